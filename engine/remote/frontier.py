"""What the covering search may still need from a remote server, all at once.

Over the network the covering search (engine.core.covering) sees rows of exact values and upper bounds
(engine.remote.rows). Asked one branch at a time, a word after a run of indentation costs a round trip
per spelling of the spaces (17 spaces: 16 + 1, 13 + 4, 12 + 5, ...), because each spelling whose
first token beats the best covering must be bounded. The frontier is every such thing at once,
so one request can carry all of it:

- `rows`: token paths whose distribution is unknown and whose bound beats the floor (each is a
  prompt of its own in one multi-prompt request);
- `values`: known nodes where a token that would finish the covering is known only by a bound
  that beats the floor (the request asks, at that node, for the best consistent token the node
  does not already list, which bounds all of them).

A strict-prefix token known only by a bound is not asked for: the row after it is (its bound plus
what that row allows bounds every covering through it), and a covering chosen through it is made
exact afterwards (engine.remote.bounded `refine`).

The floor is the best covering whose every token is known exactly: nothing at or below it can be
the answer. Using it (rather than the best bound) asks for more than the search may use, and saves
the rounds in which the best bound would have been found to be lower.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.core.vocab import VocabIndex

Path = tuple[int, ...]


@dataclass(frozen=True)
class Frontier:
    rows: tuple[tuple[Path, bytes], ...]  # (path, the bytes still to cover after it), best bound first
    values: tuple[tuple[Path, bytes], ...]  # known nodes with a consistent token known only by a bound
    best: tuple[Path, float] | None = None  # the most probable covering seen, by its bound

    def __bool__(self) -> bool:
        return bool(self.rows or self.values)


def frontier(
    vocab: VocabIndex,
    exact_at: Callable[[Path], dict[int, float] | None],
    row_at: Callable[[Path, bytes], np.ndarray],
    required: bytes,
    floor: float,
    limit: int,
    skip: frozenset[Path] = frozenset(),
) -> Frontier:
    """Best first over the known nodes, as the covering search would go, down to `floor`.
    `exact_at(path)`: the node's exactly known values (None: unknown); `row_at(path, remaining)`:
    its bounded row. At most `limit` entries; paths in `skip` (asked already and still unknown)
    are left out."""
    rows: list[tuple[Path, bytes]] = []
    values: dict[Path, bytes] = {}
    best: tuple[Path, float] | None = None
    heap: list[tuple[float, Path, int]] = [(-0.0, (), 0)]
    while heap and len(rows) + len(values) < limit:
        bound, path, consumed = heapq.heappop(heap)
        if -bound <= floor:
            break
        remaining = required[consumed:]
        exact = exact_at(path)
        if exact is None:
            if path not in skip:
                rows.append((path, remaining))
            continue
        log_prob = -bound
        row = row_at(path, remaining)
        candidates = vocab.candidates(remaining)
        if candidates.covering.size:
            scores = log_prob + row[candidates.covering]
            top = int(np.argmax(scores))
            if best is None or scores[top] > best[1]:
                best = (path + (int(candidates.covering[top]),), float(scores[top]))
            loose = [int(t) for t, s in zip(candidates.covering, scores) if s > floor and int(t) not in exact]
            if loose:
                values.setdefault(path, remaining)
        for token, length in candidates.partial:
            child = log_prob + float(row[token])
            if child > floor:  # its row bounds everything below it, with the token's own bound
                heapq.heappush(heap, (-child, path + (token,), consumed + length))
    return Frontier(tuple(rows), tuple(values.items())[: max(0, limit - len(rows))], best)
