"""One engine call on a server's backend (engine.remote.rows `begin` ... `end`): its time budget,
its cancel flag, what its generation wants, and its prompt."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# Of each request's budget, kept for answering after the server gave up (the bench measured 59 ms).
ANSWER_RESERVE_S = 0.2
# A prefetch's budget (and so a slow prompt's, once its keystroke gave up on it): at least this,
# or this many keystroke budgets.
PREFETCH_MIN_S, PREFETCH_BUDGETS = 120.0, 12


@dataclass
class Call:
    """The current call: read by the stream, the prefills and the batched proof."""

    deadline: float | None = None
    cancel: threading.Event | None = None
    prefetching: bool = False  # the engine's prefetch: its own, longer budget
    predict: int = 16  # tokens its generation wants
    single_line: bool = True
    prompt: tuple[int, ...] = ()  # this call's prompt (tokens past it are forced)

    def start(
        self, timeout_s: float, cancel: threading.Event | None, max_tokens: int, single_line: bool, cap: float | None
    ) -> None:
        """A new call: its time budget starts now, less what answering the editor takes after the
        last read (so a server slower than the budget is answered within it), and ends by `cap`
        at the latest; generation wants about `max_tokens` (0: a prefetch, PREFETCH_MIN_S at least)."""
        budget = timeout_s
        self.prefetching = max_tokens == 0
        if self.prefetching:
            budget = max(PREFETCH_MIN_S, PREFETCH_BUDGETS * budget)
        self.deadline = time.monotonic() + budget - min(ANSWER_RESERVE_S, budget / 5)
        if cap is not None:
            self.deadline = min(self.deadline, cap)
        self.cancel = cancel
        self.predict = max(1, max_tokens)
        self.single_line = single_line
        self.prompt = ()

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


def cancel_check(cancel: threading.Event | None) -> Callable[[], bool] | None:
    return cancel.is_set if cancel else None
