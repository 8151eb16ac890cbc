"""Stop sequences with OpenAI semantics over the decoded text.

Generation halts at the first occurrence of any stop string and the stop text is excluded. A stop
can straddle token boundaries, so the scan runs on accumulated text, not on token ids. Working on
`str` keeps every cut on a code-point boundary.
"""

from __future__ import annotations

from collections.abc import Sequence


def first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """The earliest match as (offset where it starts, the stop). Empty stops are ignored; ties at
    one offset go to the longer stop, then to the earlier one in `stops`."""
    best: tuple[int, str] | None = None
    for stop in stops:
        if not stop:
            continue
        pos = text.find(stop)
        if pos < 0:
            continue
        if best is None or pos < best[0] or (pos == best[0] and len(stop) > len(best[1])):
            best = (pos, stop)
    return best
