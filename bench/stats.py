"""Small statistics and timing helpers shared by the measurements (no wall-clock assertions)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def maximum(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def per_call_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over `repeats` batches of the mean time of one call in a batch of `calls`, in µs."""
    batches = []
    for _ in range(repeats):
        started = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        batches.append((time.perf_counter_ns() - started) / calls / 1000)
    return statistics.median(batches)


def timed_ms(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    value = fn()
    return (time.perf_counter() - started) * 1000, value
