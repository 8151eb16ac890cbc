"""A hostile client against the server's real stdio loop: every request is answered (a result or
a JSON-RPC error), the server stays alive, and a normal completion afterwards is still right.

The server runs in this process with a fake engine (`fake_module_server`): what is under test is
the transport, the protocol overrides and the handlers. One server for the module; the last test
is the normal completion. Exiting (after `exit`, or when the client goes away) is a claim about the
process, so those two tests start `python -m lsp_server` (with no model to load).
"""

from __future__ import annotations

import json
import random

import pytest

from tests.fixtures import DRAFT, Editor, LspClient, Reply, end_position, frame

INLINE = "textDocument/inlineCompletion"
INVALID_PARAMS, METHOD_NOT_FOUND, INVALID_REQUEST, PARSE_ERROR = -32602, -32601, -32600, -32700


@pytest.fixture(scope="module")
def server(fake_module_server) -> LspClient:
    return fake_module_server.client


@pytest.fixture(scope="module")
def editor(server) -> Editor:
    return Editor(server)


def answered(reply: Reply) -> Reply:
    """A reply is either a result or an error with an integer code and a message."""
    message = reply.message
    assert message.get("jsonrpc") == "2.0"
    if "error" in message:
        assert isinstance(message["error"]["code"], int) and isinstance(message["error"]["message"], str)
    else:
        assert "result" in message
    return reply


def error_code(reply: Reply) -> int | None:
    return answered(reply).code


def inline_params(uri, line, character) -> dict:
    return {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 2},
    }


@pytest.mark.parametrize(
    "params",
    [None, [], [1, 2], "text", 42, {}, {"textDocument": None, "position": None, "context": None},
     {"textDocument": {"uri": "file:///x"}, "position": {"line": "one", "character": 0}, "context": {"triggerKind": 2}},
     {"textDocument": {"uri": "file:///x"}, "position": [0, 0], "context": {"triggerKind": 99}}],
)  # fmt: skip
def test_params_of_the_wrong_shape_get_invalid_params(server, params):
    for method in (INLINE, "textDocument/completion"):
        assert error_code(server.request(method, params, timeout=60)) == INVALID_PARAMS


def test_positions_out_of_range(server, editor):
    uri = "file:///tmp/hostile/range.txt"
    editor.open(uri, DRAFT)
    for line, character in [(-1, 0), (0, -5), (2**31, 0), (0, 2**40), (0.5, "x")]:  # not uintegers
        assert error_code(server.request(INLINE, inline_params(uri, line, character))) == INVALID_PARAMS
    end = {"line": 0, "character": len(DRAFT)}
    for line, character in [(0, 2**31 - 1), (10**6, 0), (2**31 - 1, 2**31 - 1)]:  # valid, clamped to the end
        items = answered(server.request(INLINE, inline_params(uri, line, character))).result
        assert items and items[0]["range"]["end"] == end and "yesterday" in items[0]["insertText"]


def test_a_cursor_inside_a_surrogate_pair_rounds_down(server, editor):
    uri = "file:///tmp/hostile/pair.txt"
    text = "Thanks for the notes 😀 yest"
    editor.open(uri, text)
    emoji = len("Thanks for the notes ")  # 😀 takes UTF-16 units emoji and emoji + 1
    items = answered(server.request(INLINE, inline_params(uri, 0, emoji + 1))).result
    for item in items:  # never a position between the two halves
        assert item["range"]["end"] == {"line": 0, "character": emoji}
        assert item["range"]["start"]["character"] <= emoji


def test_lone_surrogates_in_the_text(server, editor):
    uri = "file:///tmp/hostile/surrogates.txt"
    text = "Note \ud800 and \udfff: thanks for sending over the draft yest"
    editor.open(uri, text)
    items = answered(server.request(INLINE, inline_params(uri, *end_position(text)))).result
    assert items and items[0]["insertText"].startswith("yest") and len(items[0]["insertText"]) > 4
    editor.change(uri, "\udc00", (0, 5), (0, 5))  # and one more through didChange
    items = answered(server.request(INLINE, inline_params(uri, *end_position(text + "x")))).result
    assert items and items[0]["insertText"].startswith("yest")


def test_did_change_ranges_outside_the_document(server, editor):
    uri = "file:///tmp/hostile/outside.txt"
    editor.open(uri, "The meeting is on Mon")
    editor.change(uri, "d", (40, 0), (99, 99))  # both ends past the end: an insertion at the end
    editor.change(uri, "", (0, 10**6), (0, 10**5))  # reversed and clamped: nothing to remove
    items = answered(server.request(INLINE, inline_params(uri, 0, 10**6))).result
    assert items and items[0]["insertText"].startswith("Mond")
    assert items[0]["range"]["end"] == {"line": 0, "character": len("The meeting is on Mond")}


def test_unknown_documents_and_methods(server, editor):
    assert answered(server.request(INLINE, inline_params("file:///never/opened.txt", 0, 0))).result == []
    editor.change("file:///never/opened.txt", "x", (0, 0))
    server.notify("textDocument/didClose", {"textDocument": {"uri": "file:///never/opened.txt"}})
    for method in ("cpcLsp/noSuchThing", "textDocument/noSuchThing", "$/noSuchThing", ""):
        assert error_code(server.request(method, {"a": 1})) == METHOD_NOT_FOUND
    server.notify("cpcLsp/noSuchNotification", [1, 2])
    assert error_code(server.request("cpcLsp/stats", {"unexpected": True})) is None  # params are ignored


def test_malformed_frames(server):
    seen = set(server.responses)
    stats = json.dumps({"jsonrpc": "2.0", "id": "in-a-bad-frame", "method": "cpcLsp/stats"}).encode()
    server.send_bytes(b"Content-Length: 9\r\n\r\n{not json")
    server.send_bytes(b"Content-Length: abc\r\n\r\n" + stats)  # unreadable length: body glued to the next header
    server.send_bytes(frame([{"jsonrpc": "2.0", "id": "in-a-batch", "method": "cpcLsp/stats"}]))
    server.send_bytes(frame({"id": "no-version", "method": "cpcLsp/stats"}))
    server.send_bytes(frame({"jsonrpc": "2.0", "id": "bad-method", "method": 7}))
    server.send_bytes(b"Content-Length: 99999999999999\r\n\r\n")
    server.send_bytes(b"\x00\xff garbage without a header\r\n\r\n")
    lf = json.dumps({"jsonrpc": "2.0", "id": "lf", "method": "cpcLsp/stats"}).encode()
    server.send_bytes(b"content-length: %d\n\n" % len(lf) + lf)
    after, _ = server.send("cpcLsp/stats")
    assert error_code(server.response(after)) is None  # still reading, in step
    assert error_code(server.response("lf")) is None  # bare LF line ends, lower-case header
    assert error_code(server.response("no-version")) == INVALID_REQUEST
    assert error_code(server.response("bad-method")) == INVALID_REQUEST
    assert error_code(server.response(None)) in (PARSE_ERROR, INVALID_REQUEST)  # frames with no readable id
    assert "in-a-bad-frame" not in server.responses and "in-a-batch" not in server.responses
    assert set(server.responses) - seen >= {after, "lf", "no-version", "bad-method", None}


GARBAGE_METHODS = [
    "textDocument/didOpen", "textDocument/didChange", "textDocument/didClose", "textDocument/didSave",
    "workspace/didChangeConfiguration", "workspace/didChangeWatchedFiles", "$/cancelRequest", "$/setTrace",
    "initialized", "window/workDoneProgress/cancel", "cpcLsp/whatever", "", "\u0000", "exit/not",
]  # fmt: skip
SETTING_KEYS = ["maxTokens", "temperature", "topK", "topP", "minP", "seed", "singleLine", "contextTokens",
                "stop", "maxCoverDecodes", "threads", "logDocumentText", "model", "repetitionPenalty"]  # fmt: skip


def wrong_type(rng: random.Random, key: str):
    """A value of the wrong type for `key` (never a valid one: no reloads, no changed answers)."""
    if key in ("model", "stop"):
        return rng.choice([5, True, {"x": 1}, [1, 2], 1.5])
    if key in ("singleLine", "logDocumentText"):
        return rng.choice(["yes", 1, [], {}, 0.5])
    return rng.choice(["many", True, [], {"n": 1}, -1, 1e300, "nan"])


def random_json(rng: random.Random, depth: int = 0):
    kinds = ["null", "bool", "int", "float", "str"] + (["list", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, -1, 2**31, 2**63, -(2**70), rng.randint(-100, 100)])
    if kind == "float":
        return rng.choice([0.5, -1e308, 1e-300, 3.14])
    if kind == "str":
        return "".join(
            chr(rng.choice([0x41, 0x0, 0xD800, 0x1F600, 0x2028, rng.randint(0, 0x10FFFF)]))
            for _ in range(rng.randint(0, 6))
        )
    if kind == "list":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["textDocument", "uri", "contentChanges", "range", "text", "version", "settings", "id", "cpcLsp", "position"]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_a_stream_of_random_garbage_notifications(server):
    rng = random.Random(20240906)
    shown = len(server.messages("window/showMessage"))
    for _ in range(300):
        method = rng.choice(GARBAGE_METHODS)
        if method == "workspace/didChangeConfiguration" and rng.random() < 0.6:
            keys = rng.sample(SETTING_KEYS, rng.randint(1, 4))
            params = {"settings": {"cpcLsp": {key: wrong_type(rng, key) for key in keys}}}
        elif method == "textDocument/didChange" and rng.random() < 0.5:
            params = {"textDocument": {"uri": "file:///tmp/hostile/garbage.txt", "version": rng.randint(-5, 5)},
                      "contentChanges": [random_json(rng) for _ in range(rng.randint(0, 3))]}  # fmt: skip
        else:
            params = random_json(rng)
        server.notify(method, params)
    reply = server.request("cpcLsp/stats")
    assert error_code(reply) is None and server.alive()
    warnings = server.messages("window/showMessage")[shown:]
    assert warnings and all(w.startswith("cpcLsp.") for w in warnings)  # settings said what is wrong


def test_an_unreadable_change_makes_the_document_stale_until_its_text_comes_again(server, editor):
    uri = "file:///tmp/hostile/stale.txt"
    editor.open(uri, DRAFT)
    logged = len(server.notifications)
    bad_change = {"range": {"start": {"line": 0}}, "text": "x"}  # no end, no start character
    server.notify(
        "textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [bad_change]}
    )
    assert answered(server.request(INLINE, inline_params(uri, *end_position(DRAFT)))).result == []
    warning = server.wait_notification(
        lambda n: n["method"] == "window/logMessage" and "could not be read" in n["params"]["message"], after=logged
    )
    assert warning["params"]["type"] == 2  # Warning
    editor.change(uri, "x", (0, 0))  # incremental changes still cannot be trusted
    assert answered(server.request(INLINE, inline_params(uri, *end_position(DRAFT)))).result == []
    editor.change(uri, DRAFT)  # the whole text: in step again
    items = answered(server.request(INLINE, inline_params(uri, *end_position(DRAFT)))).result
    assert items and "yesterday" in items[0]["insertText"]


def test_a_failed_reload_keeps_the_previous_model(server, editor):
    shown = len(server.messages("window/showMessage"))
    after = len(server.notifications)
    server.notify(
        "workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"model": "/nonexistent/cpc-reload.gguf"}}}
    )
    message = server.wait_loaded(after=after)
    assert "/nonexistent/cpc-reload.gguf" in message and "Keeping the previous model" in message
    assert any("Keeping the previous model" in m for m in server.messages("window/showMessage")[shown:])
    uri = "file:///tmp/hostile/kept.txt"
    editor.open(uri, DRAFT)
    assert "yesterday" in (editor.suggestion(uri) or "")
    after = len(server.notifications)
    server.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"model": None}}})
    assert server.wait_loaded(after=after).startswith("loaded")


def test_requests_after_shutdown_get_an_error():
    server = LspClient(["--model", "/nonexistent/cpc-shutdown.gguf"])  # nothing to load: cheap
    try:
        server.initialize()
        assert error_code(server.request("shutdown")) is None
        assert error_code(server.request(INLINE, inline_params("file:///x", 0, 0))) == INVALID_REQUEST
        server.notify("exit")
        assert server.process.wait(30) == 0
    finally:
        server.close()


def test_the_server_exits_when_the_client_goes_away():
    server = LspClient(["--model", "/nonexistent/cpc-eof.gguf"])
    try:
        server.initialize()
        server.send_bytes(b"Content-Length: 100\r\n\r\n{")  # half a message, then nothing
        server.process.stdin.close()  # no shutdown, no exit: the editor died
        assert server.process.wait(30) == 0
    finally:
        server.close()


def test_afterwards_a_normal_completion_is_still_right(server, editor):
    uri = "file:///tmp/hostile/final.txt"
    editor.open(uri, DRAFT)
    items = answered(server.request(INLINE, inline_params(uri, *end_position(DRAFT)))).result
    assert len(items) == 1 and "yesterday" in items[0]["insertText"]
    start = len("Thanks for sending over the draft ")
    assert items[0]["range"] == {"start": {"line": 0, "character": start}, "end": {"line": 0, "character": start + 4}}
    assert server.alive()
