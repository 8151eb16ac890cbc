"""The vocabulary as bytes, indexed so a constrained step never scans it.

Built once per model. Tokens whose bytes start with R are one contiguous run of the byte-sorted
vocabulary (two binary searches); tokens that are a strict prefix of R are at most |R| dictionary
look-ups. A constrained step therefore costs O(|R| + log V) instead of a pass over V.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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

    def __init__(
        self, pieces: Sequence[bytes], eog: Sequence[bool], control: Sequence[bool], order: Sequence[int] | None = None
    ):
        """`order`: the ids of the non-empty pieces sorted by their bytes, as `sorted_ids` gave it
        before (engine.vocab_cache); checked, and a wrong one raises ValueError."""
        self.pieces: list[bytes] = list(pieces)
        self.size = len(self.pieces)
        self.eog = np.asarray(eog, dtype=bool)
        self.control = np.asarray(control, dtype=bool)
        # Tokens that render to nothing (EOG, control) are never consistent while bytes remain,
        # and free generation never emits a non-EOG one.
        renders_nothing = np.fromiter((not p for p in self.pieces), dtype=bool, count=self.size)
        self.banned = (self.control | renders_nothing) & ~self.eog
        self.free_ids = np.flatnonzero(~self.banned)  # what free generation may emit (built once)
        given = order is not None
        if order is None:
            order = sorted((tok for tok, piece in enumerate(self.pieces) if piece), key=self.pieces.__getitem__)
        elif not np.array_equal(np.sort(np.asarray(order)), np.flatnonzero(~renders_nothing)):
            raise ValueError("the order is not the vocabulary's non-empty pieces")
        ids = [int(t) for t in order]
        self._sorted_pieces = [self.pieces[tok] for tok in ids]
        self._sorted_ids = np.asarray(ids, dtype=np.int64)
        self._by_piece = self._group(self._sorted_pieces, ids, check=given)
        self.max_piece_len = max(map(len, self._sorted_pieces), default=0)

    @staticmethod
    def _group(sorted_pieces: list[bytes], ids: list[int], check: bool) -> dict[bytes, tuple[int, ...]]:
        """piece -> its token ids in sorted order: one id for most pieces, a tuple (one dict
        built from pairs: a list or a setdefault per token took a quarter of a second on Gemma's
        vocabulary). `check`: raise ValueError unless the pieces are in order."""
        by_piece: dict[bytes, Any] = dict(zip(sorted_pieces, ids))
        shared = set()
        for before, piece in zip(sorted_pieces, sorted_pieces[1:]):
            if piece == before:
                shared.add(piece)
            elif check and piece < before:
                raise ValueError("the order does not sort the pieces")
        for piece in shared:
            lo = bisect_left(sorted_pieces, piece)
            by_piece[piece] = tuple(ids[lo : bisect_right(sorted_pieces, piece, lo)])
        return by_piece

    @property
    def sorted_ids(self) -> np.ndarray:
        """The ids of the non-empty pieces, sorted by their bytes (ties by id)."""
        return self._sorted_ids

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
            toks = self._by_piece.get(remaining[:length])
            if toks is None:
                continue
            if isinstance(toks, int):
                found.append((toks, length))
            else:
                found.extend((tok, length) for tok in toks)
        return tuple(found)

    def candidates(self, remaining: bytes) -> Candidates:
        """Every token consistent with `remaining`."""
        return Candidates(self.starting_with(remaining), self.strict_prefixes_of(remaining))
