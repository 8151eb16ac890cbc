"""A tiny hand-built vocabulary and row source for unit tests of the search logic (no model)."""

from __future__ import annotations

import numpy as np

from engine.core.vocab import VocabIndex

EOG = "<eos>"


def toy_vocab(pieces: list[str | bytes], control: tuple[str, ...] = ()) -> VocabIndex:
    """`EOG` and the names in `control` render to nothing, like llama.cpp's special tokens."""
    raw = [b"" if p == EOG or p in control else (p if isinstance(p, bytes) else p.encode()) for p in pieces]
    return VocabIndex(raw, eog=[p == EOG for p in pieces], control=[p in control for p in pieces])


class ToyRows:
    """Next-token probabilities by path (token ids), given as {path: {token: prob}}; unknown
    paths get a uniform row. Counts every non-root row as one decode."""

    def __init__(self, size: int, table: dict[tuple[int, ...], dict[int, float]]) -> None:
        self.size = size
        self.table = table
        self.decodes = 0
        self.asked: list[tuple[int, ...]] = []

    def row(self, path: tuple[int, ...]) -> np.ndarray:
        if path:
            self.decodes += 1
        self.asked.append(path)
        probs = np.full(self.size, 1e-6)
        for token, p in self.table.get(path, {}).items():
            probs[token] = p
        return np.log(probs).astype(np.float32)
