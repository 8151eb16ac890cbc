"""Exact character-prefix conditioning: the most probable token path that spells the required bytes.

A *covering* of R is a token path whose bytes start with R where every token but the last is a
strict prefix of what remains. Coverings are disjoint events whose union is "the output starts
with R", so scoring whole coverings (not single steps) is exact. Per-step masking is biased toward
short tokens (" yes"+"terday" over " yesterday"); this search is not.

Best-first branch and bound: a partial path is only expanded while its probability beats the best
complete covering found, since probabilities only shrink as a path grows. Each expansion costs one
decode; the budget bounds the worst case, past which the search finishes greedily (per-step
masking) from its most promising open path.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.core.sampler import Sampler, log_sum_exp, row_log_norm, top_ids
from engine.core.vocab import VocabIndex


class RowSource(Protocol):
    """Logits after the prompt plus a path of tokens (or log-probabilities: the search's
    `normalised`); `decodes` counts the real model calls."""

    decodes: int

    def row(self, path: tuple[int, ...]) -> np.ndarray: ...


@dataclass(frozen=True)
class Covering:
    path: tuple[int, ...]
    log_prob: float  # relative to the prompt's row (a constant offset is irrelevant to choices)


@dataclass(order=True)
class _Open:
    priority: float
    path: tuple[int, ...] = field(compare=False)
    log_prob: float = field(compare=False)
    consumed: int = field(compare=False)


@dataclass
class _Found:
    """Complete coverings seen at one expanded node: node path + any token of `ids`."""

    path: tuple[int, ...]
    ids: np.ndarray
    log_probs: np.ndarray  # path log-prob + each id's log-prob


def _already_normalised(row: np.ndarray) -> float:
    return 0.0


class CoveringSearch:
    """One search over one prompt; create a new one per request."""

    def __init__(self, vocab: VocabIndex, rows: RowSource, max_decodes: int, normalised: bool = False) -> None:
        """`normalised`: the rows are log-probabilities already (a remote server's bounded rows,
        engine.remote.bounded), not logits to normalise with row_log_norm."""
        self._vocab = vocab
        self._rows = rows
        self._norm = _already_normalised if normalised else row_log_norm
        self._max_decodes = max_decodes
        self._best: Covering | None = None
        self._found: list[_Found] = []
        self._open: list[_Open] = []
        self.exhausted = False
        self.root_log_norm = 0.0
        self._seen: dict[tuple[int, ...], tuple[np.ndarray, float]] = {}  # node -> (its row, the norm used)

    def run(self, required: bytes, sampler: Sampler | None = None) -> Covering | None:
        """The most probable covering (greedy), or one drawn in proportion to path probability
        among the explored coverings when `sampler` has a temperature. None: nothing is consistent."""
        start = self._rows.decodes
        root = self._rows.row(())
        self.root_log_norm = self._norm(root)  # log-probabilities here are relative to the root row
        self._visit(required, (), 0.0, 0, root, 0.0)
        while self._open:
            node = heapq.heappop(self._open)
            if self._best is not None and node.log_prob <= self._best.log_prob:
                break
            if self._rows.decodes - start >= self._max_decodes:
                self.exhausted = True
                self._descend_greedily(required, node)
                break
            row = self._rows.row(node.path)
            self._visit(required, node.path, node.log_prob, node.consumed, row, self._norm(row))
        if sampler is not None and sampler.config.temperature > 0 and self._found:
            return self._sample(sampler)
        return self._best

    def _visit(self, required: bytes, path, log_prob, consumed, row: np.ndarray, norm: float) -> None:
        self._seen[path] = (row, norm)
        remaining = required[consumed:]
        candidates = self._vocab.candidates(remaining)
        if candidates.covering.size:
            scores = log_prob + (row[candidates.covering].astype(np.float64) - norm)
            best = int(scores.argmax())
            self._offer(Covering(path + (int(candidates.covering[best]),), float(scores[best])))
            self._found.append(_Found(path, candidates.covering, scores))
        for token, length in candidates.partial:
            child = log_prob + float(row[token]) - norm
            if self._best is None or child > self._best.log_prob:
                heapq.heappush(self._open, _Open(-child, path + (token,), child, consumed + length))

    def log_mass(self) -> float:
        """log of the summed probability of every complete covering found: the normaliser of
        "given what was typed" (a lower bound of p(typed), see engine.core.signals). -inf: none found."""
        if not self._found:
            return float("-inf")
        return log_sum_exp(np.concatenate([found.log_probs for found in self._found]))

    def along(self, covering: Covering, required: bytes, top: int) -> tuple[list[Covering], float]:
        """The coverings that end at a node of `covering`'s path with one of the `top` most
        probable tokens of that node's row, and `covering` itself: most probable first, and the log
        of their summed probability (relative to the prompt's row, like `log_mass`). This is what
        a remote backend and the in-process one see alike (engine.core.signals): the rows along a
        chosen covering are known on both, and a server lists each row's `top` tokens. No decode:
        the rows are those the search read (a row it did not read is asked of its source, which
        remembers it, or on a remote backend knows its exact values only)."""
        found = {covering.path: covering.log_prob}
        pieces = self._vocab.pieces
        log_prob, consumed = 0.0, 0
        for i, token in enumerate(covering.path):
            node = covering.path[:i]
            seen = self._seen.get(node)
            if seen is None:
                row = self._rows.row(node)
                seen = (row, 0.0 if not node else self._norm(row))
            row, norm = seen
            remaining = required[consumed:]
            for t in top_ids(row, top):
                if np.isfinite(row[t]) and pieces[t] and pieces[t].startswith(remaining):
                    found.setdefault(node + (int(t),), log_prob + float(row[t]) - norm)
            log_prob += float(row[token]) - norm
            consumed += len(pieces[token])
        ranked = sorted((Covering(path, lp) for path, lp in found.items()), key=lambda c: -c.log_prob)
        return ranked, log_sum_exp(np.asarray([c.log_prob for c in ranked]))

    def ranked(self, n: int) -> list[Covering]:
        """The `n` most probable complete coverings found, most probable first (no decode)."""
        best: list[Covering] = []
        for found in self._found:
            k = min(n, found.ids.size)
            top = np.argpartition(-found.log_probs, k - 1)[:k] if k < found.ids.size else np.arange(k)
            best.extend(Covering(found.path + (int(found.ids[i]),), float(found.log_probs[i])) for i in top)
        best.sort(key=lambda c: -c.log_prob)
        return best[:n]

    def _offer(self, covering: Covering) -> None:
        if self._best is None or covering.log_prob > self._best.log_prob:
            self._best = covering

    def _descend_greedily(self, required: bytes, node: _Open) -> None:
        """Per-step masking from `node` until the bytes are covered (budget already spent)."""
        path, log_prob, consumed = node.path, node.log_prob, node.consumed
        while True:
            row = self._rows.row(path)
            norm = self._norm(row)
            self._seen[path] = (row, norm)
            candidates = self._vocab.candidates(required[consumed:])
            ids = candidates.all_ids()
            if ids.size == 0:
                return
            token = int(ids[int(row[ids].argmax())])
            log_prob += float(row[token]) - norm
            path = path + (token,)
            length = len(self._vocab.pieces[token])
            if consumed + length >= len(required):
                self._offer(Covering(path, log_prob))
                self._found.append(_Found(path[:-1], np.asarray([token]), np.asarray([log_prob])))
                return
            consumed += length

    def _sample(self, sampler: Sampler) -> Covering:
        temperature = sampler.config.temperature
        scores = np.concatenate([found.log_probs for found in self._found]) / temperature
        pick = sampler.choose_weighted(np.exp(scores - scores.max()))
        for found in self._found:
            if pick < found.ids.size:
                return Covering(found.path + (int(found.ids[pick]),), float(found.log_probs[pick]))
            pick -= found.ids.size
        raise AssertionError("weighted pick out of range")
