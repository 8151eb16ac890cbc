"""The words of all open documents, kept up to date edit by edit.

A document's words are counted once when it opens. An edit replaces [start, end) of the old text:
only the words that touch that span (extended to the surrounding word characters) are taken out
and the same stretch of the new text is counted again, so a keystroke costs the length of the
word it touches, never a pass over the document (5 MB documents included). Counts are kept per
document (for closing it) and in total (for asking).

Candidates for a partial word are the document words that begin with it, most frequent first.
The engine scores them (engine.core.word_choice); this module only knows text. While the `lexicon` setting
is off nothing is counted (opening a 5 MB document costs about a second of counting); turning it
on counts the documents already open.
"""

from __future__ import annotations

import functools
import heapq
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable

from lsp_server.split import MAX_RUN, is_word_char

MIN_WORD, MAX_WORD = 2, 48  # shorter words are not worth a suggestion; longer are blobs


_ASCII_WORD_RUNS = re.compile(r"\w+")  # ASCII has no combining marks: `\w` is the whole definition


@functools.cache
def _word_runs() -> re.Pattern[str]:
    """Runs of word characters exactly as lsp_server.split defines them (letters, marks, numbers,
    underscore), for text that is not ASCII. `\\w` alone leaves out combining marks, which cut a
    decomposed "café" to "cafe" and a Devanagari word into single letters; `re` has no class for
    marks, so their ranges are listed, once, when the lexicon first meets such text (about 60 ms;
    the pattern is ~3x slower than `\\w+`, hence the ASCII path)."""
    ranges: list[list[int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code))[0] == "M":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    marks = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in ranges)
    return re.compile(rf"[\w{marks}]+")


def _words(text: str) -> Counter[str]:
    """The words of `text`, counted (the regex runs in C; each distinct word is checked once)."""
    runs = _ASCII_WORD_RUNS if text.isascii() else _word_runs()
    counts = Counter(runs.findall(text))
    for word in [w for w in counts if not (MIN_WORD <= len(w) <= MAX_WORD and _is_word(w))]:
        del counts[word]
    return counts


def _is_word(word: str) -> bool:
    return any(ch.isalpha() for ch in word) and all(is_word_char(ch) for ch in word)


class Lexicon:
    def __init__(self, enabled: bool = True) -> None:
        self._docs: dict[str, Counter[str]] = {}
        self._total: Counter[str] = Counter()
        self._by_initial: dict[str, set[str]] = {}
        self.enabled = enabled

    def enable(self, on: bool, documents: Iterable[tuple[str, str]] = ()) -> None:
        """Turn counting on (counting `documents`, the (key, text) of those already open) or off
        (forgetting everything)."""
        if on == self.enabled:
            return
        self._docs.clear()
        self._total.clear()
        self._by_initial.clear()
        self.enabled = on
        for key, text in documents if on else ():
            self.opened(key, text)

    def __len__(self) -> int:
        return len(self._total)

    # --- the document watcher protocol (lsp_server.documents.Documents calls these) -------------

    def opened(self, key: str, text: str) -> None:
        if not self.enabled:
            return
        self.closed(key)
        counts = _words(text)
        self._docs[key] = counts
        self._add(counts)

    def edited(self, key: str, old: str, start: int, end: int, inserted: str) -> None:
        """`old[start:end]` was replaced by `inserted`."""
        counts = self._docs.get(key)
        if counts is None:
            return
        lo = _word_start(old, start)
        hi = _word_end(old, end)
        gone = _words(old[lo:hi])
        came = _words(old[lo:start] + inserted + old[end:hi])
        if gone == came:
            return
        counts.subtract(gone)
        counts.update(came)
        self._remove(gone)
        self._add(came)
        for word in gone:
            if counts[word] <= 0:
                del counts[word]

    def closed(self, key: str) -> None:
        counts = self._docs.pop(key, None)
        if counts is not None:
            self._remove(counts)

    # --- asking --------------------------------------------------------------------------------

    def candidates(self, typed: str, limit: int = 8) -> tuple[str, ...]:
        """Up to `limit` document words that begin with `typed` and are longer, most frequent first."""
        if not typed:
            return ()
        bucket = self._by_initial.get(typed[0], ())
        found = (w for w in bucket if len(w) > len(typed) and w.startswith(typed))
        return tuple(heapq.nsmallest(limit, found, key=lambda w: (-self._total[w], w)))

    def count(self, word: str) -> int:
        return self._total.get(word, 0)

    # --- bookkeeping ---------------------------------------------------------------------------

    def _add(self, counts: Counter[str]) -> None:
        for word, n in counts.items():
            if n <= 0:
                continue
            if word not in self._total:
                self._by_initial.setdefault(word[0], set()).add(word)
            self._total[word] += n

    def _remove(self, counts: Counter[str]) -> None:
        for word, n in counts.items():
            left = self._total.get(word, 0) - n
            if left > 0:
                self._total[word] = left
            elif word in self._total:
                del self._total[word]
                bucket = self._by_initial.get(word[0])
                if bucket is not None:
                    bucket.discard(word)


def _word_start(text: str, at: int) -> int:
    start = at
    while start > 0 and at - start <= MAX_RUN and is_word_char(text[start - 1]):
        start -= 1
    return start


def _word_end(text: str, at: int) -> int:
    end = at
    while end < len(text) and end - at <= MAX_RUN and is_word_char(text[end]):
        end += 1
    return end
