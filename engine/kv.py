"""KV reuse: decode only what the cache does not already hold (seed 003's trimKV, generalised).

The cache knows which tokens its KV holds. Asked for the logits after a token sequence, it keeps
the longest common prefix, removes the rest, and decodes only the new tail. Logits rows are also
remembered by the exact token sequence that produced them (a small LRU), so an unchanged prompt,
or a covering branch or suggestion already computed on an earlier keystroke, decodes nothing.
A failed decode clears the cache instead of trusting uncertain memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Backend(Protocol):
    n_ctx: int

    def decode(self, tokens: Sequence[int], start: int, cancelled) -> np.ndarray | None: ...

    def remove_from(self, position: int) -> bool: ...

    def clear(self) -> None: ...


class Cancelled(Exception):
    """The request was cancelled between decode chunks or steps."""


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    # Compare in blocks first: prompts share long prefixes, so this is mostly one slice compare.
    step = 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KvCache:
    def __init__(self, backend: Backend, remembered_rows: int = 48) -> None:
        self._backend = backend
        self._held: list[int] = []  # tokens in KV at positions 0..len-1
        self._rows: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self._capacity = remembered_rows
        self._lock = threading.Lock()
        self.decoded = 0  # tokens decoded since construction (for per-request accounting)

    @property
    def held(self) -> int:
        return len(self._held)

    def shared_prefix(self, tokens: Sequence[int]) -> int:
        return common_prefix_length(self._held, tokens)

    def logits_after(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> np.ndarray:
        """The logits row for the token after `tokens` (read-only: the row may be shared).

        Raises Cancelled when `cancel` is set before or between decode chunks."""
        row = self._rows.get(tokens)
        if row is not None:
            self._rows.move_to_end(tokens)
            return row
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        with self._lock:
            keep = common_prefix_length(self._held, tokens)
            if keep == len(tokens):  # the row was forgotten: decode the last token again
                keep -= 1
            if keep < len(self._held):
                if not self._backend.remove_from(keep):
                    self._reset()
                    keep = 0
                del self._held[keep:]
            tail = tokens[keep:]
            try:
                row = self._backend.decode(tail, keep, cancel.is_set if cancel else (lambda: False))
            except Exception:
                self._reset()
                raise
            if row is None:  # cancelled between chunks; the cache holds an unknown part of the tail
                self._backend.remove_from(keep)
                raise Cancelled()
            self._held.extend(tail)
            self.decoded += len(tail)
        row.flags.writeable = False
        self._rows[tokens] = row
        if len(self._rows) > self._capacity:
            self._rows.popitem(last=False)
        return row

    def _reset(self) -> None:
        self._backend.clear()
        self._held.clear()
        self._rows.clear()

    def forget(self) -> None:
        """Drop everything (e.g. after the model's context is replaced)."""
        with self._lock:
            self._reset()
