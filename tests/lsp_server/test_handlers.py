"""The handlers, through the server's real stdio loop in this process, with a fake engine.

What the engine would say is fixed (`tests.fixtures.FakeEngine` finishes a known word); what is
under test is everything around it: positions in the negotiated encoding, ranges, the completion
fallback, supersede and cancel, settings, loading with progress, stats. Every test runs with
VS Code's position encoding (UTF-16) and Neovim's (UTF-8). The same claims with the real model,
through the real server and pytest-lsp's client, are in test_e2e.py.
"""

from __future__ import annotations

import pytest

from tests.fixtures import DRAFT, WORDS, Editor, FakeLoader, InProcessServer, end_position

INLINE = "textDocument/inlineCompletion"
REQUEST_CANCELLED = -32800


def units(text: str, encoding: str) -> int:
    return end_position(text, encoding)[1]


def long_prefix(name: str) -> str:
    return f"Inventory of {name}: " + ", ".join(f"{name}-{i}" for i in range(90)) + ".\n"


def inline_capable(encoding: str, **extra: dict) -> dict:
    return {"general": {"positionEncodings": [encoding]}, "textDocument": {"inlineCompletion": {}}, **extra}


@pytest.fixture(params=["utf-16", "utf-8"])
def editor(request) -> Editor:
    """An initialized in-process server whose fake engine takes 50 ms a request (long enough for
    the supersede and cancel tests to catch work in flight)."""
    server = InProcessServer(load=FakeLoader(words=WORDS, step_s=0.05))
    capabilities = inline_capable(request.param, window={"workDoneProgress": True})
    result = server.client.initialize({"cpcLsp": {"maxTokens": 16}}, wait_loaded=True, capabilities=capabilities)
    assert result["capabilities"]["positionEncoding"] == request.param
    yield Editor(server.client, request.param)
    server.close()


def test_mid_word_finishes_the_word(editor):
    uri = "file:///tmp/handlers/draft.txt"
    editor.open(uri, DRAFT)
    items = editor.inline(uri).result
    assert len(items) == 1 and items[0]["insertText"] == "yesterday done"
    start = units("Thanks for sending over the draft ", editor.encoding)
    assert items[0]["range"] == {"start": {"line": 0, "character": start}, "end": {"line": 0, "character": start + 4}}


def test_astral_characters_before_the_cursor(editor):
    before = "Notes 😀 𝒳: thanks for sending over the draft yest"
    uri = "file:///tmp/handlers/astral.txt"
    editor.open(uri, before + " and the notes.\nNext line")
    cursor = (0, units(before, editor.encoding))
    items = editor.inline(uri, cursor).result
    assert len(items) == 1 and items[0]["insertText"].startswith("yesterday")
    assert items[0]["range"]["start"] == {"line": 0, "character": units(before[:-4], editor.encoding)}
    assert items[0]["range"]["end"] == {"line": 0, "character": cursor[1]}


def test_a_keystroke_inside_a_word_keeps_the_prompt_and_stats_carry_no_text(editor):
    uri = "file:///tmp/handlers/keystroke.txt"
    editor.open(uri, DRAFT)
    assert editor.inline(uri).result
    editor.type(uri, "r")  # not the suggestion's next letter: the engine is asked again
    assert editor.suggestion(uri).startswith("yestr")
    stats = editor.stats()
    assert stats["decodedTokens"] == 0  # the prompt ends before " yest": unchanged by the keystroke
    assert stats["promptTokens"] > 0 and stats["stopReason"] == "eos" and stats["requests"] == 2
    assert stats["engineAnswers"] == 2 and stats["carried"] == 0
    assert not any(isinstance(value, str) and "yest" in value for value in stats.values())


def test_a_newer_request_supersedes_an_older_one(editor):
    busy = long_prefix("supersede") + "The list is comp"
    editor.open("file:///tmp/handlers/busy.txt", busy)
    editor.open("file:///tmp/handlers/supersede.py", "def add(a, b):\n    ret")
    older = editor.send_inline("file:///tmp/handlers/busy.txt")
    newer = editor.send_inline("file:///tmp/handlers/supersede.py")
    assert editor.client.response(older).result == []  # answered, empty, not stale
    assert editor.client.response(newer).result[0]["insertText"].startswith("return")


def test_an_edit_supersedes_work_in_flight(editor):
    uri = "file:///tmp/handlers/edit.txt"
    editor.open(uri, long_prefix("edit") + "The meeting is on Mon")
    before = editor.send_inline(uri)
    editor.type(uri, "d")
    assert editor.client.response(before).result == []
    assert editor.suggestion(uri).startswith("Monday")


def test_cancel_request_answers_request_cancelled(editor):
    uri = "file:///tmp/handlers/cancel.txt"
    editor.open(uri, long_prefix("cancel") + "Please review the attached pro")
    msg_id = editor.send_inline(uri, msg_id="cancel-me")
    editor.client.notify("$/cancelRequest", {"id": msg_id})
    assert editor.client.response(msg_id).code == REQUEST_CANCELLED
    assert editor.suggestion(uri).startswith("proposal")  # the engine is free again


def test_invalid_params_get_an_error_naming_the_field(editor):
    params = {"textDocument": {"uri": "file:///x"}, "position": {"line": "one", "character": 0}}
    reply = editor.client.request(INLINE, params)
    assert reply.code == -32602 and "position" in reply.error["message"]


def test_the_server_survives_garbage(editor):
    uri = "file:///tmp/handlers/survivor.txt"
    editor.open(uri, DRAFT)
    bad_change = {"textDocument": {"uri": uri}, "contentChanges": [{"text": 5}]}  # no version; text 5
    editor.client.notify("textDocument/didChange", bad_change)
    editor.client.send_bytes(b"Content-Length: 9\r\n\r\n{not json")
    editor.client.notify("cpcLsp/unknownNotification", [1])
    # The unreadable change leaves the server's copy in doubt: nothing until the whole text comes.
    assert editor.inline(uri).result == []
    editor.change(uri, DRAFT)
    assert "yesterday" in editor.suggestion(uri)


def test_unknown_documents_and_out_of_range_positions(editor):
    assert editor.client.request(INLINE, editor.inline_params("file:///never-opened.txt", (0, 0))).result == []
    uri = "file:///tmp/handlers/range.txt"
    editor.open(uri, DRAFT)
    items = editor.inline(uri, (0, 999)).result  # clamped to the end of the line
    assert items and items[0]["range"]["end"] == editor.end(uri)
    assert editor.inline(uri, (42, 7)).result == items  # past the end: end of document


def test_settings_change_takes_effect(editor):
    uri = "file:///tmp/handlers/settings.py"
    editor.open(uri, "total = add(a, b)\nret")  # no block opens here: one line, `maxTokens`
    assert editor.suggestion(uri) == "return done"
    shown = len(editor.client.messages("window/showMessage"))
    editor.client.notify(
        "workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"maxTokens": 1, "temperature": "hot"}}}
    )
    assert editor.suggestion(uri) == "return"  # one token: the fake engine stops after the word
    warnings = editor.client.messages("window/showMessage")[shown:]
    assert any("temperature" in w for w in warnings) and not any("maxTokens" in w for w in warnings)
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"maxTokens": None}})
    assert editor.suggestion(uri) == "return done"


def test_the_model_loads_with_progress_and_reloads_on_a_context_change(editor):
    progress = [n["params"]["value"]["kind"] for n in editor.client.notifications if n["method"] == "$/progress"]
    assert progress[:1] == ["begin"] and progress[-1:] == ["end"]
    seen = len(editor.client.notifications)
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"contextTokens": 1024}})
    assert editor.client.wait_loaded(after=seen).startswith("loaded")
    logged = editor.client.messages("window/logMessage")
    assert any("loading" in m and "1024 context tokens" in m for m in logged)
    uri = "file:///tmp/handlers/reload.txt"
    editor.open(uri, DRAFT)
    assert "yesterday" in editor.suggestion(uri)


def test_a_repeated_initialized_does_not_reload(editor):
    seen = len(editor.client.notifications)
    editor.client.notify("initialized", {})
    assert editor.client.call("cpcLsp/stats") is None  # answered: the notification was handled first
    assert not any("loading" in n["params"].get("message", "") for n in editor.client.notifications[seen:]
                   if n["method"] == "window/logMessage")  # fmt: skip


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
def test_the_completion_fallback_for_a_client_without_inline_completion(encoding):
    """Neovim 0.11 asks textDocument/completion; a client with inline completion gets nothing
    there (answering both would make each keystroke's two requests supersede each other)."""
    for inline, expect_items in ((False, True), (True, False)):
        server = InProcessServer()
        try:
            capabilities = {"general": {"positionEncodings": [encoding]}, "textDocument": {"completion": {}}}
            if inline:
                capabilities["textDocument"]["inlineCompletion"] = {}
            server.client.initialize({}, wait_loaded=True, capabilities=capabilities)
            editor = Editor(server.client, encoding)
            uri = "file:///tmp/handlers/fallback.txt"
            editor.open(uri, DRAFT)
            params = {"textDocument": {"uri": uri}, "position": editor.end(uri)}
            result = server.client.call("textDocument/completion", params)
            assert result["isIncomplete"] and bool(result["items"]) == expect_items
            if expect_items:
                edit = result["items"][0]["textEdit"]
                start = units("Thanks for sending over the draft ", encoding)
                assert edit["newText"] == "yesterday done"
                assert edit["range"] == {
                    "start": {"line": 0, "character": start},
                    "end": {"line": 0, "character": start + 4},
                }
        finally:
            server.close()
