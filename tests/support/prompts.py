"""Documents of a given token length, cut from a long file the machine already has.

The latency measurements need prompts of about 32, 214 and 838 tokens (seed 003's sizes) that are
real text, each followed by the word the file really continues with (that is what gets typed).
Every document starts at a different line of the source, so opening one after another shares no
token prefix beyond BOS: the first request on it is cold.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.cases import words

SIZES = (32, 214, 838)
SOURCE = Path(sysconfig.get_paths()["stdlib"]) / "argparse.py"


@dataclass(frozen=True)
class Typing:
    """A document ending at a word boundary (`base`) and the word typed after it."""

    base: str
    word: str
    tokens: int  # tokens of `base` with BOS, as the model's tokenizer counts them


def source_text() -> str:
    return SOURCE.read_text(encoding="utf-8")


def _line_starts(text: str) -> list[int]:
    return [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]


def documents(
    count_tokens: Callable[[str], int], size: int, how_many: int, min_word: int = 5, first_line: int = 0
) -> list[Typing]:
    """`how_many` documents of about `size` tokens, each cut just before a word of at least
    `min_word` characters preceded by a space (so the split keeps the prompt fixed while typing)."""
    text = source_text()
    starts = _line_starts(text)
    found: list[Typing] = []
    line = first_line
    while len(found) < how_many and line < len(starts):
        start = starts[line]
        best = None
        for w_start, w_end in words(text, start):
            if w_end - w_start < min_word or text[w_start - 1] != " ":
                continue
            n = count_tokens(text[start:w_start].rstrip(" "))
            if n >= size:
                best = (w_start, w_end, n)
                break
        if best is None:
            break
        w_start, w_end, n = best
        found.append(Typing(text[start:w_start], text[w_start:w_end], n))
        line = text.count("\n", 0, w_end) + 7  # the next document starts past this one's word
    return found
