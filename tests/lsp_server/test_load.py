"""Storms: keystrokes sent without waiting, and mass cancellation.

The server's real stdio loop, handlers and scheduler run in this process; the engine is a fake
that takes 20 ms per request, so requests pile up behind it the way they do behind a real model on
a slow machine. (Cancellation inside the real engine is proven in tests/engine/test_model.py and
through the real server in test_e2e.py.) Nothing here measures time: the timeouts only keep a
broken server from hanging the suite.
"""

from __future__ import annotations

import pytest

from tests.fixtures import DRAFT, WORDS, Editor, FakeLoader, InProcessServer, end_position

REQUEST_CANCELLED = -32800
# 150 characters typed one by one, ending inside a word the engine finishes.
TYPED = (
    "Hi Samantha,\nI hope the trip home went well and that the weather was kind to you all week long. "
    "See you on Monday.\n" + DRAFT
)
TYPED = TYPED[len(TYPED) - 150 :]


@pytest.fixture(scope="module")
def editor():
    server = InProcessServer(load=FakeLoader(words=WORDS, step_s=0.02))
    server.client.initialize({"cpcLsp": {}}, wait_loaded=True, timeout=30)
    yield Editor(server.client)
    assert server.client.alive()
    server.close()


def test_150_keystrokes_without_waiting(editor):
    assert len(TYPED) == 150 and TYPED.endswith(" yest")
    uri = "file:///tmp/load/keystrokes.txt"
    editor.open(uri, "")
    sent = []  # (request id, the text it was asked about)
    for ch in TYPED:
        editor.type(uri, ch)
        sent.append((editor.send_inline(uri), editor.text(uri)))
    replies = [editor.client.response(msg_id, timeout=600) for msg_id, _ in sent]  # all drained
    for reply, (_, typed) in zip(replies, sent):
        assert reply.error is None, reply.message
        for item in reply.result:  # an answer that arrived is never for an older text
            line, character = end_position(typed)
            assert item["range"]["end"] == {"line": line, "character": character}
    last = replies[-1].result
    assert len(last) == 1 and "yesterday" in last[0]["insertText"], last
    start = end_position(TYPED[:-4])
    assert last[0]["range"]["start"] == {"line": start[0], "character": start[1]}
    assert sum(1 for reply in replies if reply.result) < len(replies)  # older ones were superseded


def test_60_requests_cancelled_at_once(editor):
    uri = "file:///tmp/load/cancel.txt"
    text = "Inventory: " + ", ".join(f"crate-{i}" for i in range(60)) + ".\nPlease review the attached pro"
    editor.open(uri, text)
    ids = [editor.send_inline(uri, msg_id=f"cancel-{i}") for i in range(60)]
    for msg_id in ids:
        editor.client.notify("$/cancelRequest", {"id": msg_id})
    for msg_id in ids:
        reply = editor.client.response(msg_id, timeout=600)
        if reply.error is not None:
            assert reply.code == REQUEST_CANCELLED, reply.message
        else:
            assert isinstance(reply.result, list)
    assert editor.suggestion(uri, timeout=600).startswith("pro")  # the engine is free
