"""Where a one-line suggestion meets the text after the cursor on its line.

Pure text logic (no protocol, no model), called by `lsp_server.suggestion`. A model asked mid-line
often writes the missing text and then goes on to retype the rest of the line, all of it or part
of it, sometimes with more after it. Accepting that would duplicate the rest, so the suggestion
is cut where the retyping begins. Which place that is, the pairs decide:

- a place qualifies when the model's text from there and the rest of the line agree (one begins
  the other): the model retyped the whole rest (perhaps going on past it) or stopped partway;
- a partial retype never begins inside a word (``the`` before ``end`` is not cut to ``th``);
- of the qualifying places (and "nothing retyped", the whole text), the one whose line pairs
  best wins: brackets and quotes counted as they pair on the line as it would read, so
  ``r()))`` before ``)`` keeps ``r())`` and ``r())`` before ``)`` stays whole;
- between places that pair equally well: a retype that ends the text first (the earliest), then
  the whole text, then a retype the model went on past (the earliest): text that merely holds the
  rest's first characters somewhere (``"111""(111)`` before ``"``) is not cut unless that pairs
  better.

Nothing is trimmed from the kept text: a space the line needs (``tring `` before ``in x]``) stays.

The suggestion is always inserted at the cursor (the item's range ends at the cursor), never made
to replace the rest of the line: the rest is the user's text, and a suggestion that meets it
gives the same line as a rewrite that equals it, while a rewrite that differs would change the
user's characters where the ghost text cannot show it (docs/text-after-cursor.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from lsp_server.split import is_word_char

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in OPENERS.items()}
QUOTES = "'\"`"
MAX_LINE = 512  # characters of the line on either side of the cursor the pairs are read over


@dataclass(frozen=True)
class Pairs:
    """Brackets and quotes read so far on a line: what is open, and how many did not pair."""

    stack: tuple[str, ...] = ()  # open brackets, innermost last
    quote: str | None = None  # the open quote, if the text stopped inside a string
    unpaired: int = 0  # closers with no matching opener
    escaped: bool = False  # the text stopped after a backslash in a string (the next character is its)

    def read(self, text: str) -> Pairs:
        stack, quote, unpaired, escaped = list(self.stack), self.quote, self.unpaired, self.escaped
        for ch in text:
            if quote is not None:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    quote = None
            elif ch in QUOTES:
                quote = ch
            elif ch in OPENERS:
                stack.append(ch)
            elif ch in CLOSERS:
                if stack and stack[-1] == CLOSERS[ch]:
                    stack.pop()
                else:
                    unpaired += 1
        return Pairs(tuple(stack), quote, unpaired, escaped)

    @property
    def errors(self) -> int:
        """Closers that pair with nothing, openers left open, and an unclosed quote."""
        return self.unpaired + len(self.stack) + (self.quote is not None)


def meet(line_before: str, added: str, suffix: str) -> str:
    """The part of `added` (what the model adds after the cursor, one line) to insert before
    `suffix` (the rest of the cursor's line), given `line_before` (the line up to the cursor)."""
    rest = suffix.rstrip()
    if not rest.strip():
        return added
    before = Pairs().read(line_before[-MAX_LINE:])
    tail = suffix[:MAX_LINE]
    best, best_rank = len(added), (before.read(added).read(tail).errors, 1, 0)
    for at in range(len(added)):
        retyped = added[at:]
        if rest.startswith(retyped) or retyped.rstrip() == rest:  # the text ends retyping the rest
            left = added[at - 1] if at > 0 else line_before[-1:]
            whole = retyped.rstrip() == rest and suffix.startswith(retyped)  # the rest, with its own spaces
            if not whole and left and is_word_char(left) and is_word_char(retyped[0]):
                continue  # a partial retype (or the rest and spaces it lacks) never begins inside a word
            kind = 0
        elif retyped.startswith(rest):  # it retyped the whole rest and went on
            kind = 2
        else:
            continue
        rank = (before.read(added[:at]).read(tail).errors, kind, at if kind else 0)
        if rank < best_rank:
            best, best_rank = at, rank
    return added[:best]


def through_closers(added: str, kept: int, suffix: str) -> int:
    """Where a cut of `added` at `kept` (the confidence gate's, by words) should end instead, in
    the middle of a line: past what is left when that holds no word character (closers, quotes,
    spaces: what the pairs and the rest of the line dictate), so the gate never leaves a line a
    ``)`` or a space short of the text after the cursor; `kept` otherwise."""
    if not suffix.strip() or any(is_word_char(ch) for ch in added[kept:]):
        return kept
    return len(added)
