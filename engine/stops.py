"""Stop sequences with OpenAI semantics over the decoded text (seed 004).

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


def safe_stream_end(text: str, stops: Sequence[str]) -> int:
    """How much of `text` may be streamed: all but a tail that could still grow into a stop.

    Measured in UTF-8 bytes like the seed (the hold-back is `max stop bytes - 1`), returned as a
    `str` index so slicing never splits a code point.
    """
    longest = max((len(s.encode("utf-8")) for s in stops), default=0)
    if longest <= 1:
        return len(text)
    keep_bytes = max(0, len(text.encode("utf-8")) - (longest - 1))
    # Walk back to a code-point boundary: count characters whose bytes fit in keep_bytes.
    used = 0
    for index, char in enumerate(text):
        used += len(char.encode("utf-8"))
        if used > keep_bytes:
            return index
    return len(text)
