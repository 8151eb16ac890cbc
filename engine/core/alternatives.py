"""Other ways to finish the typed word: the covering search's next-best coverings, each finished.

The covering search already ranks every complete covering it saw (with nothing typed, the prompt's
row ranks the first tokens). Each candidate, most probable first, is extended greedily until its
first word ends (engine.core.signals), so it can be shown as a whole word; distinct texts only. Rows
cost a decode unless remembered; the decodes for all alternatives together stay within a budget,
and with a budget of 0 only remembered rows are used (a keystroke typed along a suggestion).
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.core.covering import Covering
from engine.core.sampler import row_log_norm
from engine.core.signals import compute, word_ends_of
from engine.core.vocab import VocabIndex
from engine.types import Alternative

MAX_WORD_TOKENS = 6  # a candidate whose word has not ended after this many more tokens is dropped
CANDIDATES_PER_ALTERNATIVE = 3  # coverings tried for each alternative asked for


class BudgetedRows:
    """Rows after prompt + path: remembered ones are free, others cost one decode each from `budget`."""

    def __init__(self, rows, budget: int) -> None:  # rows: engine.core.sequence.PathRows
        self._rows = rows
        self._start = rows.decodes
        self.budget = budget

    @property
    def decodes(self) -> int:
        return self._rows.decodes - self._start

    def row(self, path: tuple[int, ...]) -> np.ndarray | None:
        if self.decodes >= self.budget and not self._rows.cached(path):
            return None
        return self._rows.row(path)


@dataclass(frozen=True)
class _Finished:
    text: str  # required prefix + the rest of the first word
    steps: tuple[tuple[bytes, float], ...]
    ended: bool


def finish_word(
    vocab: VocabIndex, rows: BudgetedRows, required: str, covering: Covering, log_mass: float, single_line: bool = True
) -> _Finished | None:
    """The covering extended greedily to its first word end; None when the budget or
    MAX_WORD_TOKENS runs out first, generation ends before any word, or (`single_line`) the
    text breaks the line first."""
    path = covering.path
    steps = [(b"".join(vocab.pieces[t] for t in path), covering.log_prob - log_mass)]
    start = len(required)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(steps[0][0])
    for _ in range(MAX_WORD_TOKENS + 1):
        if single_line and any(b in text[start:] for b in "\r\n"):
            return None
        ends = word_ends_of(text, start)
        if ends:
            return _Finished(text[: ends[0]], tuple(steps), False)
        row = rows.row(path)
        if row is None:
            return None
        token = _greedy(vocab, row)
        log_prob = float(row[token]) - row_log_norm(row)
        if vocab.eog[token]:
            steps.append((b"", log_prob))
            return _Finished(text, tuple(steps), True) if text[start:].strip() else None
        steps.append((vocab.pieces[token], log_prob))
        text += decoder.decode(vocab.pieces[token])
        path = path + (token,)
    return None


def _greedy(vocab: VocabIndex, row: np.ndarray) -> int:
    token = int(row.argmax())
    if not vocab.banned[token]:
        return token
    return int(vocab.free_ids[int(row[vocab.free_ids].argmax())])


def alternatives(
    vocab: VocabIndex,
    rows: BudgetedRows,
    required: str,
    ranked: Sequence[Covering],
    log_mass: float,
    primary_word: str,
    chosen: tuple[int, ...],
    count: int,
    single_line: bool = True,
    seen: Sequence[Covering] | None = None,
    typed_log_prob: float | None = None,
) -> tuple[Alternative, ...]:
    """Up to `count` distinct first words other than `primary_word`, most probable first.

    `ranked`: coverings most probable first (log-probabilities relative to the prompt's row, like
    `log_mass`); `chosen`: the primary's covering path, not tried again. Their signals are
    normalised by `log_mass`, with `seen` as the rivals (default: `ranked`) and `typed_log_prob`
    as log p(typed) (default: `log_mass`), as the completion's own are (engine.engine)."""
    rivals = [
        (b"".join(vocab.pieces[t] for t in c.path), c.log_prob - log_mass) for c in (ranked if seen is None else seen)
    ]
    typed = log_mass if typed_log_prob is None else typed_log_prob
    found: dict[str, Alternative] = {}
    for covering in ranked[: count * CANDIDATES_PER_ALTERNATIVE]:
        if covering.path == chosen:
            continue
        done = finish_word(vocab, rows, required, covering, log_mass, single_line)
        if done is None or done.text == primary_word or done.text in found:
            continue
        found[done.text] = Alternative(done.text, compute(required, done.steps, rivals, typed, done.ended))
    best = sorted(found.values(), key=lambda a: -a.signals.word_log_prob)
    return tuple(best[:count])


def first_tokens(row: np.ndarray, vocab: VocabIndex, n: int) -> list[Covering]:
    """With nothing typed: the `n` most probable first tokens as one-token coverings (no EOG or
    banned token), log-probabilities relative to the row."""
    norm = row_log_norm(row)
    k = min(n * 2, row.size - 1)
    top = np.argpartition(-row, k)[:k]
    top = top[np.argsort(-row[top], kind="stable")]
    picked = [int(t) for t in top if not vocab.banned[t] and not vocab.eog[t]][:n]
    return [Covering((t,), float(row[t]) - norm) for t in picked]
