"""Token choice from one logits row: penalty, then temperature / top-k / top-p / min-p (seed 003).

The mask comes first: a constrained step passes only the consistent token ids, so every filter
works on a handful of logits instead of the whole vocabulary. Temperature 0 is greedy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.types import SamplingConfig

PENALTY_WINDOW = 64  # like llama.cpp's default penalty_last_n


def log_sum_exp(row: np.ndarray) -> float:
    peak = float(row.max())
    return peak + float(np.log(np.exp(row - peak, dtype=np.float64).sum()))


class Sampler:
    """Chooses tokens for one request; owns the random stream so a seed reproduces a run."""

    def __init__(self, config: SamplingConfig, banned: np.ndarray) -> None:
        self.config = config
        self._banned = banned
        self._rng = np.random.default_rng(config.seed)

    def choose(self, row: np.ndarray, history: Sequence[int], ids: np.ndarray | None = None) -> int:
        """A token id from `row`, restricted to `ids` when given (never a banned token otherwise)."""
        cfg = self.config
        if ids is None:
            if cfg.temperature <= 0 and cfg.repetition_penalty == 1.0:
                best = int(row.argmax())
                if not self._banned[best]:
                    return best
            ids = np.flatnonzero(~self._banned)  # rare path: the raw argmax was a control token
        logits = row[ids].astype(np.float64)
        if cfg.repetition_penalty != 1.0 and history:
            self._penalize(logits, ids, history)
        if cfg.temperature <= 0 or ids.size == 1:
            return int(ids[int(logits.argmax())])
        return int(ids[self._sample(logits)])

    def _penalize(self, logits: np.ndarray, ids: np.ndarray, history: Sequence[int]) -> None:
        recent = np.unique(np.asarray(history[-PENALTY_WINDOW:], dtype=np.int64))
        hit = np.isin(ids, recent)
        if not hit.any():
            return
        penalty = self.config.repetition_penalty
        values = logits[hit]
        logits[hit] = np.where(values > 0, values / penalty, values * penalty)

    def _sample(self, logits: np.ndarray) -> int:
        """Index into `logits` drawn after top-k, temperature, min-p and top-p."""
        cfg = self.config
        order = np.arange(logits.size)
        if 0 < cfg.top_k < logits.size:
            order = np.argpartition(-logits, cfg.top_k - 1)[: cfg.top_k]
        scaled = logits[order] / cfg.temperature
        ranked = np.argsort(-scaled, kind="stable")
        order, scaled = order[ranked], scaled[ranked]
        probs = np.exp(scaled - scaled[0])
        if cfg.min_p > 0:
            probs[probs < cfg.min_p] = 0.0  # relative to the top token, whose weight is 1
        probs /= probs.sum()
        if cfg.top_p < 1.0:
            cutoff = int(np.searchsorted(np.cumsum(probs), cfg.top_p)) + 1
            probs = probs[:cutoff] / probs[:cutoff].sum()
            order = order[:cutoff]
        return int(order[self._rng.choice(probs.size, p=probs)])

    def choose_weighted(self, weights: np.ndarray) -> int:
        """An index drawn in proportion to `weights` (used to pick among coverings)."""
        total = weights.sum()
        return int(self._rng.choice(weights.size, p=weights / total))
