"""Positions in the negotiated encoding, with LSP's line rules, and incremental edits."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lsp_server.documents import UTF8, UTF16, UTF32, Documents, Range, apply_change, offset_at, position_at

TEXT = 'x = "😀é" + yest\nnext'


@pytest.mark.parametrize(
    ("encoding", "character"),
    [(UTF16, 16), (UTF8, 19), (UTF32, 15)],  # 😀: 2 UTF-16 / 4 UTF-8 units; é: 1 / 2
)
def test_cursor_after_astral_character(encoding, character):
    offset = offset_at(TEXT, 0, character, encoding)
    assert TEXT[:offset] == 'x = "😀é" + yest'
    assert position_at(TEXT, offset, encoding) == (0, character)


def test_inside_a_character_rounds_down():
    assert offset_at(TEXT, 0, 6, UTF16) == 5  # half of the surrogate pair
    assert offset_at(TEXT, 0, 7, UTF8) == 5  # the middle of the 4 bytes


def test_out_of_range_positions_are_clamped():
    assert offset_at(TEXT, 0, 999) == TEXT.index("\n")  # end of that line, not the next line
    assert offset_at(TEXT, 1, 999) == len(TEXT)  # end of the last line
    assert offset_at(TEXT, 7, 0) == len(TEXT)  # past the last line: end of document
    assert offset_at("", 0, 5) == 0
    assert offset_at("a\n", 1, 3) == 2  # the empty last line after a final newline


def test_only_lsp_line_breaks_count():
    text = "a\x0cb\u2028c\rd\r\ne\nf"  # form feed and U+2028 are not line breaks in LSP
    assert offset_at(text, 1, 0) == text.index("d")
    assert offset_at(text, 2, 0) == text.index("e")
    assert offset_at(text, 3, 1) == len(text)
    assert position_at(text, text.index("c"), UTF16) == (0, 4)
    assert position_at(text, text.index("\n"), UTF16) == (1, 1)  # between \r and \n: end of line 1


def test_incremental_changes():
    docs = Documents()
    docs.open("file:///a%20b.txt", "hello wor\nld", 1)
    assert docs.change("file:///a b.txt", 2, [(Range(0, 9, 0, 9), "l"), (Range(0, 0, 0, 5), "HELLO")], UTF16)
    doc = docs.get("file:///a%20b.txt")
    assert (doc.text, doc.version) == ("HELLO worl\nld", 2)
    assert docs.change("file:///a b.txt", 3, [(None, "all new")], UTF16)
    assert docs.get("file:///a b.txt").text == "all new"
    assert not docs.change("file:///other", 1, [(None, "x")], UTF16)
    docs.close("file:///a b.txt")
    assert docs.get("file:///a b.txt") is None


def test_change_across_an_astral_character_in_utf8():
    assert apply_change("a😀b", Range(0, 1, 0, 5), "", UTF8) == "ab"
    assert apply_change("a😀b", Range(0, 1, 0, 3), "", UTF16) == "ab"


lsp_text = st.text(st.sampled_from(list("ab \t\r\n😀éx\u2028")), max_size=30)


@given(lsp_text, st.integers(0, 35), st.sampled_from([UTF8, UTF16, UTF32]))
def test_position_round_trip(text, offset, encoding):
    offset = min(offset, len(text))
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        offset -= 1  # no position names the point between \r and \n
    line, character = position_at(text, offset, encoding)
    assert offset_at(text, line, character, encoding) == offset
