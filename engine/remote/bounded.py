"""The covering search's rows on a llama-server: exact values where the server listed them, upper
bounds elsewhere (engine.remote.nodes), and the requests that prove a choice (engine.remote.rows
describes the proof)."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from engine.core.covering import Covering, CoveringSearch
from engine.core.vocab import VocabIndex
from engine.remote.call import Call
from engine.remote.http import ModelServerClient
from engine.remote.nodes import NodeStore
from engine.remote.request import GENERATION_SLACK, Inexpressible
from engine.remote.slots import SlotBook
from engine.remote.stream import Stream

BRANCH_PREDICT = 2  # a branch the search expands: its forced token, then one under the grammar
STALE_NATS = 1e-6  # a chosen path's value above its exact one by more than this was ranked on a bound


class Server(Protocol):
    """What the covering search's rows and the batched proof (engine.remote.batch) ask of one
    server's backend (engine.remote.rows.RemoteRows)."""

    vocab: VocabIndex
    nodes: NodeStore
    slots: SlotBook
    client: ModelServerClient
    fallbacks: list[str]
    decoded: int
    n_probs: int
    call: Call  # the current call: its deadline, how many tokens its generation wants
    stream: Stream  # the open stream: settled before a new request, its events parsed

    @property
    def filling(self) -> bool: ...

    def query(
        self,
        context: tuple[int, ...],
        predict: int,
        cancel: threading.Event | None,
        forced: Sequence[int] = (),
        literal: bytes | None = None,
        ban: Sequence[int] = (),
        until_free: bool = True,
        exclude: frozenset[int] = frozenset(),
        listed: int | None = None,
    ) -> None: ...

    def prefill(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> None: ...

    def reap(self) -> None: ...


class BoundedRows:
    """The covering search's RowSource on a remote server: rows of exact values and upper bounds;
    `refine` makes the chosen covering's first inexact token exact, one request at a time."""

    normalised = True  # log-probabilities as the server lists them, and bounds

    def __init__(
        self,
        remote: Server,
        prompt: tuple[int, ...],
        required: bytes,
        cancel: threading.Event | None,
        budget: int,
        pessimistic: bool = False,
    ) -> None:
        self.remote, self.prompt, self.required = remote, tuple(prompt), required
        self.cancel, self.budget, self._pessimistic = cancel, budget, pessimistic
        self._vocab = remote.vocab
        self.decodes = 0  # requests made (each one of the budget: `refine`)
        self.rows_asked = 0  # rows asked for (the budget again: as in-process decodes, `expand`, batches)
        self.fallback: str | None = None

    def remaining(self, path: tuple[int, ...]) -> bytes:
        consumed = sum(len(self._vocab.pieces[t]) for t in path)
        return self.required[consumed:]

    def known(self, path: tuple[int, ...]) -> bool:
        return self.remote.nodes.node(self.prompt + path) is not None

    cached = known  # reading a known row costs no request

    def row(self, path: tuple[int, ...]) -> np.ndarray:
        node = self.remote.nodes.node(self.prompt + path)
        if node is None and not self._pessimistic and self.decodes < self.budget and self.rows_asked < self.budget:
            self.expand(path)
            node = self.remote.nodes.node(self.prompt + path)
        if node is None:  # past the budget: nothing is known here
            return np.full(self._vocab.size, -np.inf)
        return self.remote.nodes.bounded_row(node, self.remaining(path), self._pessimistic)

    def expand(self, path: tuple[int, ...]) -> None:
        """Learn the node after `path`: its last token forced at its parent (so its value becomes
        exact too), then the remaining bytes under the grammar."""
        self.decodes += 1
        self.rows_asked += 1
        remaining = self.remaining(path)
        # The prompt's own request goes on into the generation; a branch below it only needs its
        # token's value and the best consistent token after it (BRANCH_PREDICT). Reading it further
        # made the server decode tokens no one used: 5 to 11 events (300 to 600 ms, 2.5 kB each)
        # per branch, for the several spellings of a run of indentation spaces.
        predict = BRANCH_PREDICT if path else len(remaining) + self.remote.call.predict + GENERATION_SLACK
        try:
            if not path:
                self.remote.query(self.prompt, predict, self.cancel, literal=remaining)
            else:
                self.remote.query(self.prompt + path[:-1], predict, self.cancel, forced=(path[-1],), literal=remaining)
        except Inexpressible:
            self.fallback = "inexpressible"

    def exact(self, covering: Covering) -> int | None:
        """Index of the covering's first token whose value is only a bound (None: all exact)."""
        for i, token in enumerate(covering.path):
            node = self.remote.nodes.node(self.prompt + covering.path[:i])
            if node is None or token not in node.exact:
                return i
        return None

    def exact_log_prob(self, covering: Covering) -> float:
        """The covering's log-probability from exact values only (-inf where one is unknown)."""
        total = 0.0
        for i, token in enumerate(covering.path):
            node = self.remote.nodes.node(self.prompt + covering.path[:i])
            if node is None or token not in node.exact:
                return float("-inf")
            total += node.exact[token]
        return total

    def refine(self, covering: Covering) -> bool:
        """True: one request was made toward proving `covering`, or its value was a bound that is
        exact now; either way search again. False when it is proven or the budget is spent
        (then `settle` picks what to use)."""
        i = self.exact(covering)
        if i is None:
            # Every token is exact now, but the search may have ranked the path by a bound that a
            # request made during that search replaced (a node's token becomes exact when the node
            # is expanded): then search again, with no request, on what is now known.
            return self.exact_log_prob(covering) < covering.log_prob - STALE_NATS
        if self.decodes >= self.budget:
            return False
        node = covering.path[:i]
        remaining = self.remaining(node)
        token = covering.path[i]
        self.decodes += 1
        predict = len(remaining) + self.remote.call.predict + GENERATION_SLACK
        try:
            if i == len(covering.path) - 1:  # the covering token: the best covering token here
                partial = [t for t, _ in self._vocab.strict_prefixes_of(remaining)]
                self.remote.query(self.prompt + node, predict, self.cancel, literal=remaining, ban=partial)
            else:  # a strict-prefix token: force it, then go on under the grammar
                rest = self.remaining(node + (token,))
                self.remote.query(self.prompt + node, predict, self.cancel, forced=(token,), literal=rest)
        except Inexpressible:
            self.fallback = "inexpressible"
            return False
        return True

    def known_search(self, search: CoveringSearch, required: bytes) -> CoveringSearch:
        """The search again on exact values only (no request): the signals (the mass of what was
        typed, the margin to another word) and the alternatives read its coverings, and an upper
        bound there would count probability no token is known to have, as in-process it is not."""
        known = CoveringSearch(
            self._vocab,
            BoundedRows(self.remote, self.prompt, required, self.cancel, 0, pessimistic=True),
            1 << 30,
            normalised=True,
        )
        known.run(required)
        return known

    def settle(self, covering: Covering | None) -> Covering | None:
        """The covering to use: `covering` when proven; else the best one whose values are all
        known exactly ("unproven"), else the server's per-step-masked path ("mask")."""
        if covering is not None and self.exact(covering) is None:
            return covering
        if covering is None and self.fallback is None:
            return None  # nothing in the vocabulary is consistent
        known = CoveringSearch(
            self._vocab,
            BoundedRows(self.remote, self.prompt, self.required, self.cancel, 0, pessimistic=True),
            1 << 30,
            normalised=True,
        ).run(self.required)
        if known is not None and math.isfinite(known.log_prob):
            self.remote.fallbacks.append("unproven")
            return known
        self.remote.fallbacks.append("mask")
        return None
