"""A 5 MB document: opening, editing and completing stay bounded and right.

The engine clips the prompt before tokenizing and windows the tokens to the context (the first
test, real model through the real server); the server keeps a line index that each edit updates
locally (the others, on the in-process server with a fake engine), so neither side does a Python
pass over the whole document per keystroke. These tests check the answers are right and the prompt
fits the context; they do not time anything.
"""

from __future__ import annotations

import random
from functools import cache

from tests.fixtures import DRAFT, Editor, LspClient, end_position

CONTEXT = 256
# the confidence gate off: the claims are about huge documents, and a word typed off the suggestion
# ("yesta") is one the gate rightly hides
SERVER_SETTINGS = {"maxTokens": 4, "contextTokens": CONTEXT, "threads": 1, "minConfidence": 0}
SERVER_LOG_LEVEL = "warning"
WORDS = (
    "the team met on tuesday to review the budget and the plan for next quarter while sales "
    "asked about the launch date and support wanted more staff before the holidays"
).split()


@cache
def prose(size: int = 5_000_000, seed: int = 7) -> str:
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 18))).capitalize() + "."
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def test_completing_at_the_end_of_5_mb(model_server: LspClient):
    assert len(prose()) >= 5_000_000
    editor = Editor(model_server)
    uri = "file:///tmp/huge/notes.txt"
    editor.open(uri, prose() + "\n" + DRAFT)
    assert "yesterday" in editor.suggestion(uri, timeout=600)
    first = editor.stats()
    assert 0 < first["promptTokens"] <= CONTEXT and first["kvTokens"] <= CONTEXT

    editor.type(uri, "a")  # a keystroke at the end, off the suggestion (one along it costs no engine call)
    assert editor.suggestion(uri, timeout=600).startswith("yesta")
    typed = editor.stats()
    assert typed["promptTokens"] <= CONTEXT
    assert typed["decodedTokens"] == 0  # the clipped, windowed prompt did not move: KV reused whole


def test_edits_far_from_the_cursor_keep_positions_right(fake_module_server):
    editor = Editor(fake_module_server.client)
    uri = "file:///tmp/huge/edited.txt"
    text = prose() + "\n" + DRAFT
    editor.open(uri, text)
    lines = text.split("\n")
    editor.change(uri, "A new first line.\n", (0, 0))  # every later line moves down
    editor.change(uri, "", (1000, 0), (41000, 0))  # 40,000 lines removed from the middle
    editor.change(uri, "\r\n", (20000, 3))  # a CRLF break in the middle of a line
    expected = ["A new first line.", *lines][:1000] + ["A new first line.", *lines][41000:]
    expected[20000:20001] = [expected[20000][:3] + "\r", expected[20000][3:]]
    expected_text = "\n".join(expected)
    assert expected_text.endswith(DRAFT)
    line, character = end_position(expected_text)  # the client's idea of the end
    reply = editor.inline(uri, (line, character), timeout=600)
    items = reply.result
    assert items and "yesterday" in items[0]["insertText"]
    assert items[0]["range"]["end"] == {"line": line, "character": character}


def test_a_5_mb_line_without_breaks(fake_module_server):
    editor = Editor(fake_module_server.client)
    uri = "file:///tmp/huge/one-line.txt"
    text = "data = " + random.Random(3).randbytes(2_500_000).hex()
    editor.open(uri, text)
    for character in (len(text), len(text) // 2):  # at the end, in the middle
        reply = editor.inline(uri, (0, character), timeout=600)
        assert reply.error is None
        cursor = {"line": 0, "character": character}
        for item in reply.result:  # a run this long is not a word being typed: nothing replaced
            assert item["range"] == {"start": cursor, "end": cursor}
    reply = editor.inline(uri, (0, 3), timeout=600)  # inside "data"
    assert reply.result, "the fake engine finishes `dat`"
    for item in reply.result:
        assert item["insertText"].startswith("dat") and item["range"]["start"] == {"line": 0, "character": 0}
