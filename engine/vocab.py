"""The vocabulary as bytes, indexed so a constrained step never scans it.

Built once per model. Tokens whose bytes start with R are one contiguous run of the byte-sorted
vocabulary (two binary searches); tokens that are a strict prefix of R are at most |R| dictionary
look-ups. A constrained step therefore costs O(|R| + log V) instead of a pass over V.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string that starts with `prefix`."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


@dataclass(frozen=True)
class Candidates:
    """Tokens consistent with remaining bytes R, split by how they relate to R."""

    covering: np.ndarray  # token ids whose bytes start with R (they finish the constraint)
    partial: tuple[tuple[int, int], ...]  # (token id, byte length): strict prefixes of R

    def all_ids(self) -> np.ndarray:
        if not self.partial:
            return self.covering
        extra = np.fromiter((tok for tok, _ in self.partial), dtype=np.int64)
        return np.concatenate([self.covering, extra])


class VocabIndex:
    """Token pieces (bytes), end-of-generation flags and the byte-sorted index."""

    def __init__(self, pieces: Sequence[bytes], eog: Sequence[bool], control: Sequence[bool]):
        self.pieces: list[bytes] = list(pieces)
        self.size = len(self.pieces)
        self.eog = np.asarray(eog, dtype=bool)
        # Tokens that render to nothing (EOG, control) are never consistent while bytes remain,
        # and free generation never emits a non-EOG one.
        renders_nothing = np.fromiter((not p for p in self.pieces), dtype=bool, count=self.size)
        self.banned = (np.asarray(control, dtype=bool) | renders_nothing) & ~self.eog
        self.free_ids = np.flatnonzero(~self.banned)  # what free generation may emit (built once)
        order = sorted((tok for tok, piece in enumerate(self.pieces) if piece), key=self.pieces.__getitem__)
        self._sorted_pieces = [self.pieces[tok] for tok in order]
        self._sorted_ids = np.asarray(order, dtype=np.int64)
        self._by_piece: dict[bytes, list[int]] = {}
        for tok in order:
            self._by_piece.setdefault(self.pieces[tok], []).append(tok)
        self.max_piece_len = max((len(p) for p in self._sorted_pieces), default=0)

    def starting_with(self, prefix: bytes) -> np.ndarray:
        """Ids of tokens whose bytes start with `prefix` (a view; do not modify)."""
        lo = bisect_left(self._sorted_pieces, prefix)
        upper = _prefix_upper_bound(prefix)
        hi = len(self._sorted_pieces) if upper is None else bisect_left(self._sorted_pieces, upper, lo)
        return self._sorted_ids[lo:hi]

    def strict_prefixes_of(self, remaining: bytes) -> tuple[tuple[int, int], ...]:
        """(token id, length) for every token whose bytes are a strict prefix of `remaining`."""
        found: list[tuple[int, int]] = []
        for length in range(1, min(len(remaining), self.max_piece_len + 1)):
            for tok in self._by_piece.get(remaining[:length], ()):
                found.append((tok, length))
        return tuple(found)

    def candidates(self, remaining: bytes) -> Candidates:
        """Every token consistent with `remaining` (seed 000's rule)."""
        return Candidates(self.starting_with(remaining), self.strict_prefixes_of(remaining))
