"""The covering search's rows read straight from a backend (engine.backend): every row exact."""

from __future__ import annotations

import threading

import numpy as np

from engine.backend import Backend
from engine.core.covering import Covering, CoveringSearch


class PathRows:
    """Rows after prompt + path for the covering search, counting real decodes only. Every row is
    exact, so a covering the search chose needs no refining (see engine.remote.bounded.BoundedRows)."""

    normalised = False  # logits

    def __init__(self, kv: Backend, prompt: tuple[int, ...], cancel: threading.Event) -> None:
        self._kv, self._prompt, self._cancel = kv, prompt, cancel
        self.decodes = 0
        self.fallback: str | None = None

    def row(self, path: tuple[int, ...]) -> np.ndarray:
        before = self._kv.decoded
        row = self._kv.logits_after(self._prompt + path, self._cancel)
        self.decodes += self._kv.decoded != before
        return row

    def cached(self, path: tuple[int, ...]) -> bool:
        """The row after `path` is remembered: reading it decodes nothing."""
        return self._kv.remembers(self._prompt + path)

    def refine(self, covering: Covering) -> bool:
        return False

    def settle(self, covering: Covering | None) -> Covering | None:
        return covering

    def known_search(self, search: CoveringSearch, required: bytes) -> CoveringSearch:
        return search  # every value it saw is exact
