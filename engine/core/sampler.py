"""Token choice from one logits row (engine.types.SamplingConfig).

Order: the mask, then the repetition penalty, top-k, top-p, min-p, and temperature last. The
mask comes first: a constrained step passes only the consistent token ids, so every filter works
on a handful of logits instead of the whole vocabulary. The filters then run in llama.cpp's
default order (its sampler chain: penalties, top-k, top-p, min-p, temperature), so top-p and
min-p judge the model's own probabilities and temperature only reshapes what they kept: a
setting means here what it means in llama.cpp and in llama-cpp-python, the benchmarks' peer.
Temperature 0 is greedy.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.types import SamplingConfig

PENALTY_WINDOW = 64  # like llama.cpp's default penalty_last_n


def log_sum_exp(row: np.ndarray) -> float:
    """log(sum(exp(row))) without overflow; -inf for an empty row or one of only -inf (a remote
    row where nothing is known, see engine.remote.rows), where exp(row - peak) would be nan."""
    if row.size == 0:
        return float("-inf")
    peak = float(row.max())
    if peak == float("-inf"):
        return peak
    return peak + float(np.log(np.exp(row - peak, dtype=np.float64).sum()))


_NORMS: dict[int, tuple[weakref.ref, float]] = {}


def row_log_norm(row: np.ndarray) -> float:
    """`log_sum_exp` of a logits row, remembered while the row lives. The KV cache hands out the
    same read-only row for the same tokens, so a keystroke typed along a suggestion, which reads
    every row again, does not pay a pass over the vocabulary (about 1 ms) per token again."""
    key = id(row)
    hit = _NORMS.get(key)
    if hit is not None and hit[0]() is row:
        return hit[1]
    value = log_sum_exp(row)
    if not row.flags.writeable:  # a shared (cached) row: a writable one may change under the key
        _NORMS[key] = (weakref.ref(row, _forget(_NORMS, key)), value)
    return value


_TOPS: dict[int, tuple[weakref.ref, int, np.ndarray]] = {}


def _forget(cache: dict[int, Any], key: int) -> Callable[[weakref.ref], None]:
    """The callback that drops `key` from `cache` once its row is gone."""

    def drop(_: weakref.ref) -> None:
        cache.pop(key, None)

    return drop


def top_ids(row: np.ndarray, k: int) -> np.ndarray:
    """The ids of the `k` highest values of `row` (in no order), remembered while a shared row
    lives, as `row_log_norm` is: a keystroke typed along a suggestion reads the same rows again."""
    if k >= row.size:
        return np.arange(row.size)
    key = id(row)
    hit = _TOPS.get(key)
    if hit is not None and hit[0]() is row and hit[1] == k:
        return hit[2]
    ids = np.argpartition(-row, k - 1)[:k]
    if not row.flags.writeable:
        _TOPS[key] = (weakref.ref(row, _forget(_TOPS, key)), k, ids)
    return ids


class Sampler:
    """Chooses tokens for one request; owns the random stream so a seed reproduces a run."""

    def __init__(self, config: SamplingConfig, banned: np.ndarray, free_ids: np.ndarray | None = None) -> None:
        self.config = config
        self._banned = banned
        self._free_ids = free_ids  # ids of the tokens that are not banned (VocabIndex.free_ids)
        self._rng = np.random.default_rng(config.seed)

    def choose(self, row: np.ndarray, history: Sequence[int], ids: np.ndarray | None = None) -> int:
        """A token id from `row`, restricted to `ids` when given (never a banned token otherwise)."""
        cfg = self.config
        if ids is None:
            if cfg.temperature <= 0 and cfg.repetition_penalty == 1.0:
                best = int(row.argmax())
                if not self._banned[best]:
                    return best
            if self._free_ids is None:  # once per sampler, not per step (262,144 entries)
                self._free_ids = np.flatnonzero(~self._banned)
            ids = self._free_ids
        logits = row[ids].astype(np.float64)
        if cfg.repetition_penalty != 1.0 and history:
            self._penalize(logits, ids, history)
        if cfg.temperature <= 0 or ids.size == 1:
            return int(ids[int(logits.argmax())])
        return int(ids[self._sample(logits)])

    def _penalize(self, logits: np.ndarray, ids: np.ndarray, history: Sequence[int]) -> None:
        recent = np.unique(np.asarray(history[-PENALTY_WINDOW:], dtype=np.int64))
        if ids is self._free_ids:  # sorted: find the recent tokens by binary search, not a pass
            at = np.searchsorted(ids, recent)
            inside = at < ids.size
            at, recent = at[inside], recent[inside]
            hit = at[ids[at] == recent]
        else:  # a handful of constrained ids
            hit = np.flatnonzero(np.isin(ids, recent))
        if hit.size == 0:
            return
        penalty = self.config.repetition_penalty
        values = logits[hit]
        logits[hit] = np.where(values > 0, values / penalty, values * penalty)

    def _sample(self, logits: np.ndarray) -> int:
        """Index into `logits` drawn after top-k, top-p, min-p and temperature (in that order)."""
        cfg = self.config
        order = np.arange(logits.size)
        if 0 < cfg.top_k < logits.size:
            order = np.argpartition(-logits, cfg.top_k - 1)[: cfg.top_k]
        order = order[np.argsort(-logits[order], kind="stable")]
        values = logits[order]
        probs = np.exp(values - values[0])  # the model's probabilities (before temperature)
        probs /= probs.sum()
        keep = probs.size
        if cfg.top_p < 1.0:  # the smallest head whose probabilities reach top_p
            keep = min(keep, int(np.searchsorted(np.cumsum(probs), cfg.top_p)) + 1)
        if cfg.min_p > 0:  # at least min_p times the top token's probability (a head: sorted)
            keep = min(keep, max(1, int(np.count_nonzero(probs[:keep] >= cfg.min_p * probs[0]))))
        scaled = values[:keep] / cfg.temperature
        weights = np.exp(scaled - scaled[0])
        return int(order[self._rng.choice(keep, p=weights / weights.sum())])

    def choose_weighted(self, weights: np.ndarray) -> int:
        """An index drawn in proportion to `weights` (used to pick among coverings)."""
        total = weights.sum()
        return int(self._rng.choice(weights.size, p=weights / total))
