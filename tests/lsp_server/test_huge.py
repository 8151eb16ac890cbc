"""A 5 MB document through the real server: opening, editing and completing stay bounded.

The engine clips the prompt before tokenizing and windows the tokens to the context; the server
keeps a line index that each edit updates locally, so neither side does a Python pass over the
whole document per keystroke. These tests check the answers are right and the prompt fits the
context; they do not time anything.
"""

from __future__ import annotations

import random
from functools import cache

import pytest

from tests.lsp_server.rawlsp import DRAFT, RawServer, end_position

CONTEXT = 256
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


@pytest.fixture(scope="module")
def server():
    server = RawServer("--log-level", "warning")
    server.initialize({"cpcLsp": {"maxTokens": 4, "contextTokens": CONTEXT, "threads": 1}})
    yield server
    assert server.alive(), server.stderr()
    assert server.close() == 0


def stats(server: RawServer) -> dict:
    reply = server.call("cpcLsp/stats")
    assert "error" not in reply
    return reply["result"]


def test_completing_at_the_end_of_5_mb(server):
    assert len(prose()) >= 5_000_000
    uri = "file:///tmp/huge/notes.txt"
    text = prose() + "\n" + DRAFT
    server.open(uri, text)
    assert "yesterday" in server.suggestion(uri, *end_position(text), timeout=600)
    first = stats(server)
    assert 0 < first["promptTokens"] <= CONTEXT and first["kvTokens"] <= CONTEXT

    server.change(uri, 2, "e", end_position(text))  # a keystroke at the end
    text += "e"
    assert server.suggestion(uri, *end_position(text), timeout=600).startswith("yeste")
    typed = stats(server)
    assert typed["promptTokens"] <= CONTEXT
    assert typed["decodedTokens"] == 0  # the clipped, windowed prompt did not move: KV reused whole


def test_edits_far_from_the_cursor_keep_positions_right(server):
    uri = "file:///tmp/huge/edited.txt"
    text = prose() + "\n" + DRAFT
    server.open(uri, text)
    lines = text.split("\n")
    server.change(uri, 2, "A new first line.\n", (0, 0))  # every later line moves down
    server.change(uri, 3, "", (1000, 0), (41000, 0))  # 40,000 lines removed from the middle
    server.change(uri, 4, "\r\n", (20000, 3))  # a CRLF break in the middle of a line
    expected = ["A new first line.", *lines][:1000] + ["A new first line.", *lines][41000:]
    expected[20000 : 20001] = [expected[20000][:3] + "\r", expected[20000][3:]]
    expected_text = "\n".join(expected)
    assert expected_text.endswith(DRAFT)
    line, character = end_position(expected_text)  # the client's idea of the end
    reply = server.response(server.inline(uri, line, character), timeout=600)
    items = reply["result"]
    assert items and "yesterday" in items[0]["insertText"]
    assert items[0]["range"]["end"] == {"line": line, "character": character}


def test_a_5_mb_line_without_breaks(server):
    uri = "file:///tmp/huge/one-line.txt"
    text = "data = " + random.Random(3).randbytes(2_500_000).hex()
    server.open(uri, text)
    for character in (len(text), len(text) // 2):  # at the end, in the middle
        reply = server.response(server.inline(uri, 0, character), timeout=600)
        assert "error" not in reply
        cursor = {"line": 0, "character": character}
        for item in reply["result"]:  # a run this long is not a word being typed: nothing replaced
            assert item["range"] == {"start": cursor, "end": cursor}
        assert stats(server)["promptTokens"] <= CONTEXT
    reply = server.response(server.inline(uri, 0, 3), timeout=600)  # inside "data"
    for item in reply["result"]:
        assert item["insertText"].startswith("dat") and item["range"]["start"] == {"line": 0, "character": 0}
