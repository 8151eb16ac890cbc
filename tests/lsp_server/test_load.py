"""Storms through the real server: keystrokes sent without waiting, and mass cancellation.

Nothing here measures time: the timeouts only keep a broken server from hanging the suite.
"""

from __future__ import annotations

import pytest

from tests.lsp_server.rawlsp import DRAFT, RawServer, end_position

REQUEST_CANCELLED = -32800
# 150 characters typed one by one, ending inside a word the model finishes reliably.
TYPED = (
    "Hi Samantha,\nI hope the trip home went well and that the weather was kind to you all week long. "
    "See you on Monday.\n" + DRAFT
)
TYPED = TYPED[len(TYPED) - 150 :]


@pytest.fixture(scope="module")
def server():
    server = RawServer("--log-level", "warning")
    server.initialize({"cpcLsp": {"maxTokens": 4, "threads": 1}})
    yield server
    assert server.alive(), server.stderr()
    assert server.close() == 0


def test_150_keystrokes_without_waiting(server):
    assert len(TYPED) == 150 and TYPED.endswith(" yest")
    uri = "file:///tmp/load/keystrokes.txt"
    server.open(uri, "")
    sent = []  # (request id, the text it was asked about)
    for version, ch in enumerate(TYPED, start=2):
        typed = TYPED[: version - 1]
        server.change(uri, version, ch, end_position(typed[:-1]))
        sent.append((server.inline(uri, *end_position(typed)), typed))
    replies = [server.response(msg_id, timeout=600) for msg_id, _ in sent]  # all drained
    for reply, (_, typed) in zip(replies, sent):
        assert "error" not in reply, reply
        for item in reply["result"]:  # an answer that arrived is never for an older text
            line, character = end_position(typed)
            assert item["range"]["end"] == {"line": line, "character": character}
    last = replies[-1]["result"]
    assert len(last) == 1 and "yesterday" in last[0]["insertText"], last
    start = end_position(TYPED[:-4])
    assert last[0]["range"]["start"] == {"line": start[0], "character": start[1]}
    assert sum(1 for reply in replies if reply["result"]) < len(replies)  # older ones were superseded


def test_60_requests_cancelled_at_once(server):
    uri = "file:///tmp/load/cancel.txt"
    text = "Inventory: " + ", ".join(f"crate-{i}" for i in range(60)) + ".\nPlease review the attached pro"
    server.open(uri, text)
    ids = [server.inline(uri, *end_position(text), msg_id=f"cancel-{i}") for i in range(60)]
    for msg_id in ids:
        server.notify("$/cancelRequest", {"id": msg_id})
    for msg_id in ids:
        reply = server.response(msg_id, timeout=600)
        if "error" in reply:
            assert reply["error"]["code"] == REQUEST_CANCELLED, reply
        else:
            assert isinstance(reply["result"], list)
    assert server.suggestion(uri, *end_position(text), timeout=600).startswith("pro")  # the engine is free
