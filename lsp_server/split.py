"""The word-boundary split: where the prompt ends and what the completion must begin with.

Pure text logic, no protocol and no model. The prompt ends before the horizontal whitespace that
precedes the partial word, so the tokenizer only ever sees whole words and typing inside a word
leaves the prompt (and its KV cache) unchanged.

Definitions (code points, not bytes or UTF-16 units):

- A *word character* is a Unicode letter (L*), combining mark (M*: keeps a decomposed accent with
  its letter), number (N*) or the underscore. Everything else, e.g. ``.``, ``(``, ``"`` or ``-``,
  ends a word, so ``{re`` has the partial word ``re``.
- *Horizontal whitespace* is a tab or a space separator (Zs: space, no-break space, ideographic
  space...). Line breaks are not horizontal: a partial word never reaches back over a line.
- The *suffix* is the text after the cursor up to the end of its line, at most `MAX_SUFFIX`
  characters: it only serves to keep a suggestion from retyping it, and a suggestion is shorter
  than that, so the search for the line end never runs through the rest of a huge document.
- The text *after* the cursor, for models with FIM tokens, is bounded: `after_lines` lines
  (the cursor's own line first) and `after_lines` × AFTER_CHARS_PER_LINE characters in all, so a
  keystroke never reads the rest of a 5 MB document.
- A run of more than `MAX_RUN` word characters (a hash, a base64 blob, a minified line) is not a
  word being typed: the cursor then has no partial word, so nothing is required and the prompt
  runs to the cursor. Likewise a longer run of horizontal whitespace stays in the prompt. This
  keeps a keystroke's split O(1) however long the line, and no model could be asked to cover a
  prefix that long anyway.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

LINE_BREAKS = "\r\n"
MAX_RUN = 256  # longest partial word (and boundary whitespace) the split looks back over
AFTER_CHARS_PER_LINE = 256  # the text after the cursor is at most this many characters a line
MAX_SUFFIX = 4096  # the rest of the line kept as the suffix (512 tokens of 8 characters fit)


def is_word_char(ch: str) -> bool:
    """True for the characters a partial word is made of (see the module docstring)."""
    return ch == "_" or unicodedata.category(ch)[0] in "LMN"


def is_horizontal_space(ch: str) -> bool:
    """True for whitespace that does not break a line."""
    return ch == "\t" or unicodedata.category(ch) == "Zs"


@dataclass(frozen=True)
class Split:
    """A document cut at the cursor: ``prompt + required == text[:cursor]``."""

    prompt: str  # everything before the boundary whitespace
    required: str  # boundary whitespace + partial word: the completion must begin with it
    word: str  # the partial word alone (the tail of `required`)
    suffix: str  # the rest of the cursor's line, which a suggestion must not repeat
    word_start: int  # offset of the partial word in the document (code points)
    cursor: int  # offset of the cursor in the document (code points)
    after: str | None = None  # the bounded text after the cursor (FIM models); None: not asked for


def text_after(text: str, cursor: int, lines: int, max_chars: int | None = None) -> str:
    """The text after `cursor`: the rest of its line and up to `lines - 1` more lines (without the
    last line break), at most `max_chars` characters (default: AFTER_CHARS_PER_LINE a line)."""
    if lines <= 0:
        return ""
    limit = min(len(text), cursor + (AFTER_CHARS_PER_LINE * lines if max_chars is None else max_chars))
    end = cursor
    for _ in range(lines):
        found = text.find("\n", end, limit)
        if found < 0:
            return text[cursor:limit]
        end = found + 1
    return text[cursor : end - 1].rstrip("\r")


def split(text: str, cursor: int, after_lines: int | None = None) -> Split:
    """Cut `text` at `cursor` (clamped to the text) into prompt, required prefix and suffix; with
    `after_lines`, also the bounded text after the cursor (see `text_after`)."""
    cursor = max(0, min(cursor, len(text)))
    word_start = _run_start(text, cursor, is_word_char)
    boundary = _run_start(text, word_start, is_horizontal_space)
    line_end = text.find("\n", cursor, cursor + MAX_SUFFIX)
    if line_end < 0:
        line_end = min(len(text), cursor + MAX_SUFFIX)
    if (found := text.find("\r", cursor, line_end)) >= 0:
        line_end = found
    return Split(
        prompt=text[:boundary],
        required=text[boundary:cursor],
        word=text[word_start:cursor],
        suffix=text[cursor:line_end],
        word_start=word_start,
        cursor=cursor,
        after=None if after_lines is None else text_after(text, cursor, after_lines),
    )


def prompt_end(text: str, cursor: int) -> int:
    """Where `split(text, cursor)`'s prompt ends (before the boundary whitespace and the partial
    word), without the rest of the split."""
    cursor = max(0, min(cursor, len(text)))
    return _run_start(text, _run_start(text, cursor, is_word_char), is_horizontal_space)


def _run_start(text: str, end: int, belongs: Callable[[str], bool]) -> int:
    """Where the run of characters ending at `end` starts; `end` itself (no run) when the run
    is longer than MAX_RUN."""
    start = end
    while start > 0 and belongs(text[start - 1]):
        start -= 1
        if end - start > MAX_RUN:
            return end
    return start
