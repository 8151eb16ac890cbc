"""The required-prefix constraint, one step at a time.

While bytes remain, only consistent tokens may be chosen; each chosen token consumes the bytes it
covers; the constraint clears once all are produced; if no token is consistent it is dropped for
that row instead of sampling from an all-masked distribution. An empty prefix means no constraint.
"""

from __future__ import annotations

import numpy as np

from engine.core.vocab import VocabIndex


class RequiredPrefix:
    def __init__(self, vocab: VocabIndex, required: bytes = b"") -> None:
        self._vocab = vocab
        self.remaining = required
        self.dropped = False

    @property
    def active(self) -> bool:
        return bool(self.remaining)

    def set(self, required: bytes) -> None:
        """Replace the constraint; an empty prefix clears a pending one."""
        self.remaining = required
        self.dropped = False

    def allowed(self) -> np.ndarray | None:
        """Token ids that may be chosen next, or None for no constraint. Drops the constraint
        (and returns None) when nothing in the vocabulary is consistent."""
        if not self.remaining:
            return None
        ids = self._vocab.candidates(self.remaining).all_ids()
        if ids.size == 0:
            self.remaining = b""
            self.dropped = True
            return None
        return ids

    def consume(self, token: int) -> None:
        """Account for a chosen token's bytes."""
        if not self.remaining:
            return
        piece = self._vocab.pieces[token]
        if self.remaining.startswith(piece):
            self.remaining = self.remaining[len(piece) :]
        elif piece.startswith(self.remaining):
            self.remaining = b""
        else:  # an inconsistent token was forced on us: the constraint no longer holds
            self.remaining = b""
            self.dropped = True
