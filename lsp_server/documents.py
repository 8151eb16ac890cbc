"""Open documents and LSP positions, with the protocol's own line rules.

Why not pygls's workspace: it splits lines with `str.splitlines`, which also breaks at form feed,
U+2028 and friends (LSP breaks only at ``\\n``, ``\\r\\n`` and ``\\r``), and it clamps a
too-large character on the last line to one before its end. Positions here follow the spec:
a character past the end of a line means the end of that line, a line past the end of the
document means the end of the document, and a position inside a character (half a surrogate
pair, a partial UTF-8 sequence) rounds down to the start of that character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import unquote

_LINE_BREAK = re.compile(r"\r\n|\r|\n")

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def _width(ch: str, encoding: str) -> int:
    """Code units of one character in the negotiated position encoding."""
    if encoding == UTF8:
        return len(ch.encode("utf-8", "surrogatepass"))
    if encoding == UTF32:
        return 1
    return 2 if ord(ch) > 0xFFFF else 1


def _line_span(text: str, line: int) -> tuple[int, int] | None:
    """(start, end) offsets of `line` without its line break; None past the last line."""
    start, count = 0, 0
    for match in _LINE_BREAK.finditer(text):
        if count == line:
            return start, match.start()
        start, count = match.end(), count + 1
    return (start, len(text)) if count == line else None


def offset_at(text: str, line: int, character: int, encoding: str = UTF16) -> int:
    """Offset in code points of an LSP position, clamped to the document."""
    span = _line_span(text, max(line, 0))
    if span is None:
        return len(text)
    start, end = span
    units = 0
    for offset in range(start, end):
        units += _width(text[offset], encoding)
        if units > character:
            return offset
    return end


def position_at(text: str, offset: int, encoding: str = UTF16) -> tuple[int, int]:
    """LSP (line, character) of a code point offset."""
    offset = max(0, min(offset, len(text)))
    line, start, end = 0, 0, offset
    for match in _LINE_BREAK.finditer(text):
        if match.end() > offset:  # the offset is on this line (between \r and \n: at its end)
            end = min(offset, match.start())
            break
        line, start = line + 1, match.end()
    return line, sum(_width(ch, encoding) for ch in text[start:end])


@dataclass(frozen=True)
class Document:
    """One open document; replaced (not mutated) on every change, so a snapshot stays a snapshot."""

    uri: str
    text: str
    version: int | None = None


@dataclass(frozen=True)
class Range:
    """An LSP range in client units; kept free of lsprotocol so this module is plain text logic."""

    start_line: int
    start_character: int
    end_line: int
    end_character: int


def apply_change(text: str, change_range: Range | None, new_text: str, encoding: str) -> str:
    """One content change: a whole-document replacement when `change_range` is None."""
    if change_range is None:
        return new_text
    start = offset_at(text, change_range.start_line, change_range.start_character, encoding)
    end = offset_at(text, change_range.end_line, change_range.end_character, encoding)
    start, end = min(start, end), max(start, end)
    return text[:start] + new_text + text[end:]


class Documents:
    """The open documents, keyed like pygls keys them (percent-decoded URI)."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}

    def open(self, uri: str, text: str, version: int | None) -> None:
        self._docs[unquote(uri)] = Document(uri, text, version)

    def change(
        self, uri: str, version: int | None, changes: list[tuple[Range | None, str]], encoding: str
    ) -> bool:
        """Apply changes in order; False (and nothing changes) when the document is not open."""
        doc = self._docs.get(unquote(uri))
        if doc is None:
            return False
        text = doc.text
        for change_range, new_text in changes:
            text = apply_change(text, change_range, new_text, encoding)
        self._docs[unquote(uri)] = replace(doc, text=text, version=version)
        return True

    def close(self, uri: str) -> None:
        self._docs.pop(unquote(uri), None)

    def get(self, uri: str) -> Document | None:
        return self._docs.get(unquote(uri))
