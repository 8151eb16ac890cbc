"""Properties over random Unicode text, positions, edits and byte streams.

test_split.py and test_documents.py pin the definitions on small alphabets; here the server's
fast versions (line index, sliced measuring, bounded runs, tolerant framing) are checked against
slow reference versions written straight from the spec, on any code point (lone surrogates, line
separators, astral characters) and any position, negative or far out of range.
"""

from __future__ import annotations

import asyncio
import json
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_server.documents import UTF8, UTF16, UTF32, Document, Documents, Lines, Range, offset_at, position_at
from lsp_server.split import MAX_RUN, is_horizontal_space, is_word_char, split
from lsp_server.transport import INVALID_REQUEST, MAX_LINE, PARSE_ERROR, Source, read_loop

ENCODINGS = st.sampled_from([UTF8, UTF16, UTF32])
SPECIAL = list("\r\n\r\n \t_a1é😀\u2028\u0301\x0c") + ["\ud800", "\udfff"]
chars = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()) | st.sampled_from(SPECIAL)
texts = st.lists(chars, max_size=60).map("".join)
positions = st.integers(-3, 70) | st.integers(-(2**40), 2**40)


# --- reference implementations, one character at a time ------------------------------------


def ref_spans(text: str) -> list[tuple[int, int]]:
    """(start, end without the break) of every line; only \\r\\n, \\r and \\n break lines."""
    spans, start, i = [], 0, 0
    while i < len(text):
        if text[i] in "\r\n":
            step = 2 if text[i : i + 2] == "\r\n" else 1
            spans.append((start, i))
            i += step
            start = i
        else:
            i += 1
    return [*spans, (start, len(text))]


def ref_width(ch: str, encoding: str) -> int:
    if encoding == UTF8:
        return len(ch.encode("utf-8", "surrogatepass"))
    return 1 if encoding == UTF32 or ord(ch) <= 0xFFFF else 2


def ref_offset(text: str, line: int, character: int, encoding: str) -> int:
    spans = ref_spans(text)
    if max(line, 0) >= len(spans):
        return len(text)
    start, end = spans[max(line, 0)]
    units = 0
    for offset in range(start, end):
        units += ref_width(text[offset], encoding)
        if units > character:
            return offset
    return end


def ref_position(text: str, offset: int, encoding: str) -> tuple[int, int]:
    offset = max(0, min(offset, len(text)))
    spans = ref_spans(text)
    for line, (start, end) in enumerate(spans):
        if line + 1 == len(spans) or offset < spans[line + 1][0]:
            return line, sum(ref_width(ch, encoding) for ch in text[start : min(offset, end)])
    raise AssertionError("unreachable")


def ref_split_line_end(text: str, cursor: int) -> int:
    end = cursor
    while end < len(text) and text[end] not in "\r\n":
        end += 1
    return end


# --- positions ------------------------------------------------------------------------------


@given(texts, positions, positions, ENCODINGS)
def test_offset_matches_the_reference(text, line, character, encoding):
    assert offset_at(text, line, character, encoding) == ref_offset(text, line, character, encoding)
    assert Document("u", text).offset_at(line, character, encoding) == ref_offset(text, line, character, encoding)


@given(texts, positions, ENCODINGS)
def test_position_matches_the_reference(text, offset, encoding):
    assert position_at(text, offset, encoding) == ref_position(text, offset, encoding)


@given(texts, st.integers(0, 70), ENCODINGS)
def test_round_trip_on_any_unicode(text, offset, encoding):
    offset = min(offset, len(text))
    if 0 < offset < len(text) and text[offset - 1 : offset + 1] == "\r\n":
        offset -= 1  # no position names the point between \r and \n
    doc = Document("u", text)
    assert doc.offset_at(*doc.position_at(offset, encoding), encoding) == offset


@given(st.text(st.sampled_from(["a", "😀", "é", "\ud800"]), min_size=1, max_size=30), st.integers(0, 80), ENCODINGS)
def test_a_position_inside_a_character_rounds_down(text, character, encoding):
    offset = offset_at(text, 0, character, encoding)
    line, reached = position_at(text, offset, encoding)
    assert line == 0 and reached <= character
    if offset < len(text):  # the next character would overshoot
        assert reached + ref_width(text[offset], encoding) > character


def test_a_megabyte_line_is_measured_exactly():
    text = ("abc😀é" * 200_000) + "\nend"
    doc = Document("u", text)
    for encoding in (UTF8, UTF16, UTF32):
        end = doc.position_at(text.index("\n"), encoding)
        assert doc.offset_at(*end, encoding) == text.index("\n")
        assert doc.offset_at(0, end[1] - 1, encoding) == text.index("\n") - 1  # inside the last é (UTF-8) or at it


# --- incremental edits ----------------------------------------------------------------------

edits = st.lists(
    st.tuples(positions, positions, positions, positions, texts, st.booleans()),
    min_size=1,
    max_size=8,
)


@given(texts, edits, ENCODINGS)
def test_incremental_edits_match_the_reference(text, changes, encoding):
    docs = Documents()
    docs.open("file:///p", text, 1)
    expected = text
    for version, (sl, sc, el, ec, new_text, whole) in enumerate(changes, start=2):
        if whole:
            expected = new_text
            docs.change("file:///p", version, [(None, new_text)], encoding)
            continue
        start = ref_offset(expected, sl, sc, encoding)
        end = ref_offset(expected, el, ec, encoding)
        start, end = min(start, end), max(start, end)
        expected = expected[:start] + new_text + expected[end:]
        docs.change("file:///p", version, [(Range(sl, sc, el, ec), new_text)], encoding)
        doc = docs.get("file:///p")
        assert doc.text == expected
        assert list(doc.lines.starts) == list(Lines.of(expected).starts)  # the index kept in step
    assert docs.get("file:///p").version == len(changes) + 1


@given(texts, st.integers(0, 60), st.integers(0, 60), texts)
def test_line_index_update_equals_a_rebuild(text, a, b, inserted):
    start, end = sorted((min(a, len(text)), min(b, len(text))))
    after = text[:start] + inserted + text[end:]
    updated = Lines.of(text).edited(after, start, end, len(inserted))
    assert list(updated.starts) == list(Lines.of(after).starts)


def test_a_stale_document_takes_only_a_whole_text_change():
    docs = Documents()
    docs.open("file:///s", "hello", 1)
    assert docs.mark_stale("file:///s") and docs.get("file:///s").stale
    docs.change("file:///s", 2, [(Range(0, 5, 0, 5), " world")], UTF16)
    assert docs.get("file:///s").text == "hello" and docs.get("file:///s").stale
    docs.change("file:///s", 3, [(None, "fresh"), (Range(0, 5, 0, 5), "!")], UTF16)
    doc = docs.get("file:///s")
    assert (doc.text, doc.stale, doc.version) == ("fresh!", False, 3)
    assert not docs.mark_stale("file:///never-opened")


# --- split ----------------------------------------------------------------------------------

run_texts = st.tuples(
    texts, st.sampled_from(["x", " ", "\t", "é", "\u0301"]), st.integers(0, 2 * MAX_RUN + 5), texts
).map(lambda t: t[0] + t[1] * t[2] + t[3])


@given(texts | run_texts, st.integers(-5, 2**20))
def test_split_on_any_unicode_with_long_runs(text, cursor):
    s = split(text, cursor)
    c = max(0, min(cursor, len(text)))
    assert s.prompt + s.required == text[:c] and s.cursor == c
    assert s.required.endswith(s.word) and text[s.word_start : c] == s.word
    assert all(is_word_char(ch) for ch in s.word) and len(s.word) <= MAX_RUN
    space = s.required[: len(s.required) - len(s.word)]
    assert all(is_horizontal_space(ch) for ch in space) and len(space) <= MAX_RUN
    assert s.suffix == text[c : ref_split_line_end(text, c)]
    # the word is maximal unless the run is too long to be a word being typed
    run = 0
    while run < c and is_word_char(text[c - run - 1]):
        run += 1
    assert len(s.word) == (run if run <= MAX_RUN else 0)


# --- framing --------------------------------------------------------------------------------


class BytesSource(Source):
    """An in-memory stream that behaves like stdin's readline(limit) and read(n)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    async def line(self) -> bytes:
        end = self.data.find(b"\n", self.at, self.at + MAX_LINE)
        end = min(self.at + MAX_LINE, len(self.data)) if end < 0 else end + 1
        piece, self.at = self.data[self.at : end], end
        return piece

    async def exactly(self, n: int) -> bytes:
        piece, self.at = self.data[self.at : self.at + n], min(self.at + n, len(self.data))
        return piece


class Recorder:
    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.errors: list[tuple] = []

    def structure_message(self, data: dict) -> dict:
        return data

    def handle_message(self, message: dict) -> None:
        self.messages.append(message)

    def send_error(self, msg_id, code, text) -> None:
        self.errors.append((msg_id, code))


def feed(data: bytes) -> Recorder:
    recorder = Recorder()
    asyncio.run(read_loop(BytesSource(data), recorder, threading.Event(), recorder.send_error))
    return recorder


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(chars, max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
messages = st.builds(
    lambda n, params: {"jsonrpc": "2.0", "method": f"m/{n}", "params": params}, st.integers(0, 9), json_values
)
garbage = st.binary(max_size=200).filter(lambda b: b"content-length" not in b.lower())


@settings(max_examples=200)
@given(st.lists(st.tuples(garbage, messages), max_size=5), messages)
def test_garbage_between_frames_costs_only_the_garbage(parts, last):
    data = b"".join(junk + frame(message) for junk, message in parts) + frame(last)
    got = feed(data)
    assert got.messages == [m for _, m in parts] + [last]
    assert all(msg_id is None and code in (PARSE_ERROR, INVALID_REQUEST) for msg_id, code in got.errors)


@given(st.binary(max_size=400))
def test_any_bytes_end_cleanly(data):
    got = feed(data + frame({"jsonrpc": "2.0", "method": "after"}))
    assert all(code in (PARSE_ERROR, INVALID_REQUEST) for _, code in got.errors)


def test_frames_that_pygls_would_lose():
    ok = {"jsonrpc": "2.0", "method": "ok"}
    body = json.dumps(ok).encode()
    got = feed(
        b"Content-Length: abc\r\n\r\n" + body  # a bad length, then the body glued to the next header
        + frame(ok)
        + b"content-length: %d\n\n" % len(body) + body  # lower case, LF line ends
        + b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(body) + body
        + b"Content-Length: 9\r\n\r\n{not json"
        + frame([ok])  # a batch: not in LSP
        + frame({"id": 3, "method": "x"})  # no "jsonrpc"
        + frame({"jsonrpc": "2.0", "id": 4, "method": 5})
        + b"Content-Length: 99999999999\r\n\r\n"  # over the limit: refused, not allocated
        + b"x" * (MAX_LINE * 2 + 7)  # an endless line
        + frame(ok)
    )  # fmt: skip
    assert got.messages == [ok] * 4
    assert got.errors == [
        (None, PARSE_ERROR),
        (None, PARSE_ERROR),
        (None, INVALID_REQUEST),
        (3, INVALID_REQUEST),
        (4, INVALID_REQUEST),
        (None, INVALID_REQUEST),
    ]
