"""What is known of the server's distributions, by token path (engine.remote.rows).

A node holds exact log-probabilities of the tokens the server listed after one path, a bound for
every token it did not list (the N-th listed value), and caps: bounds that a step sampled under
a grammar or a logit_bias put on a group of tokens. From a node come a dense row for the sampler
and a row of exact values and upper bounds for the covering search.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from engine.core.vocab import VocabIndex

NODES = 4096  # distributions remembered by token path
DENSE_ROWS = 48  # dense rows built for the sampler, as KvCache remembers rows
BOUNDED_ROWS = 32  # rows built for the covering search

_SERIALS = itertools.count()

# A token known only by a bound is placed this far below it in the search's rows, so a token known
# exactly at that value wins a tie. One float step below (np.nextafter) did not survive the search
# adding the path's log-probability: after 17 spaces, `max_help_po`'s "po", bounded by the cap of
# "pos" (-6.17763, exact), summed to the same -14.93 and, first in byte order, was chosen and made
# exact again and again (the same request 7 times, the budget spent, "unproven"). Far below float
# noise between backends (2e-4 nats): what it decides is a tie either way.
BOUND_MARGIN = 1e-9

# (covering_only, bytes, banned): the tokens a cap bounds (see `Node`)
CapGroup = tuple[bool, bytes] | tuple[bool, bytes, frozenset[int]]


@dataclass
class Node:
    """What is known of one distribution: exact log-probabilities of some tokens, a bound for the
    rest, and caps: (covering_only, R, v, banned) = every token consistent with R (only those
    starting with R when covering_only), except the `banned` ones, is at most v."""

    exact: dict[int, float] = field(default_factory=dict)
    nth: float = 0.0
    caps: list[tuple[bool, bytes, float, frozenset[int]]] = field(default_factory=list)
    serial: int = field(default_factory=lambda: next(_SERIALS))  # names it in row caches


class NodeStore:
    """Nodes by token path (least recently used dropped past NODES), and the rows built from them."""

    def __init__(self, vocab: VocabIndex) -> None:
        self._vocab = vocab
        self._nodes: OrderedDict[tuple[int, ...], Node] = OrderedDict()
        self._dense: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self._bounded: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self._nodes

    def node(self, key: tuple[int, ...]) -> Node | None:
        node = self._nodes.get(key)
        if node is not None:
            self._nodes.move_to_end(key)
        return node

    def peek(self, key: tuple[int, ...]) -> Node | None:
        """The node after `key`, without marking it used."""
        return self._nodes.get(key)

    def record(
        self,
        key: tuple[int, ...],
        token: int,
        logprob: float,
        top: list[tuple[int, float]],
        cap: CapGroup | None,
        slack: float = 0.0,
    ) -> None:
        """A token event's values; `cap` bounds the tokens it names at `logprob` + `slack`."""
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = Node(nth=min((lp for _, lp in top), default=logprob))
            while len(self._nodes) > NODES:
                self._nodes.popitem(last=False)
        else:
            self._nodes.move_to_end(key)
            if top:
                node.nth = min(node.nth, min(lp for _, lp in top))
            self._dense.pop(key, None)
        for tok, lp in top:
            node.exact.setdefault(tok, lp)
        node.exact.setdefault(token, logprob)
        if cap is not None:
            node.caps.append((cap[0], cap[1], logprob + slack, cap[2] if len(cap) > 2 else frozenset()))

    def drop(self, keys: Iterable[tuple[int, ...]]) -> None:
        """Forget the distributions after these token paths."""
        for key in keys:
            self._nodes.pop(tuple(key), None)
            self._dense.pop(tuple(key), None)

    def clear(self) -> None:
        self._nodes.clear()
        self._dense.clear()
        self._bounded.clear()

    def dense_row(self, key: tuple[int, ...]) -> np.ndarray | None:
        """The remembered dense row after `key` (None: not built, or the node changed since)."""
        row = self._dense.get(key)
        if row is not None:
            self._dense.move_to_end(key)
        return row

    def build_dense(self, key: tuple[int, ...], node: Node) -> np.ndarray:
        """A dense row of log-probabilities: exact where the server listed them, the unlisted mass
        spread evenly below the N-th elsewhere (so argmax, top-k sampling and a log-sum-exp of
        about 0 behave as on a full row). Remembered (the last DENSE_ROWS)."""
        size = self._vocab.size
        ids = np.fromiter(node.exact.keys(), dtype=np.int64, count=len(node.exact))
        lps = np.fromiter(node.exact.values(), dtype=np.float64, count=len(node.exact))
        rest = max(1e-12, 1.0 - float(np.exp(lps).sum()))
        fill = min(node.nth, math.log(rest / max(1, size - ids.size)))
        row = np.full(size, fill, dtype=np.float32)
        row[ids] = lps
        row.flags.writeable = False
        self._dense[key] = row
        while len(self._dense) > DENSE_ROWS:
            self._dense.popitem(last=False)
        return row

    def bounded_row(self, node: Node, remaining: bytes, pessimistic: bool) -> np.ndarray:
        """Log-probabilities for the covering search at a node with `remaining` bytes to cover:
        exact where known, else the tightest upper bound (pessimistic: -inf, i.e. known only).
        The last few are kept: one keystroke runs the search a few times over the same nodes."""
        key = (node.serial, len(node.exact), len(node.caps), remaining, pessimistic)
        row = self._bounded.get(key)
        if row is None:
            row = self._bounded[key] = self._bounded_row(node, remaining, pessimistic)
            row.flags.writeable = False
            while len(self._bounded) > BOUNDED_ROWS:
                self._bounded.popitem(last=False)
        return row

    def _bounded_row(self, node: Node, remaining: bytes, pessimistic: bool) -> np.ndarray:
        row = np.full(self._vocab.size, -np.inf)
        vocab = self._vocab
        if not pessimistic:
            caps = [cap for cap in node.caps if remaining.startswith(cap[1])]
            consistent = min((v for cov, _, v, banned in caps if not cov and not banned), default=0.0)
            covering = min((v for cov, _, v, banned in caps if cov and not banned), default=0.0)
            bound = min(node.nth, consistent)
            ids = vocab.starting_with(remaining)
            row[ids] = min(bound, covering) - BOUND_MARGIN
            for _, _, v, banned in (cap for cap in caps if cap[3]):  # a cap that leaves some tokens out
                kept = ids[~np.isin(ids, np.fromiter(banned, dtype=np.int64, count=len(banned)))]
                row[kept] = np.minimum(row[kept], v - BOUND_MARGIN)
            for tok, _length in vocab.strict_prefixes_of(remaining):
                piece = vocab.pieces[tok]
                cap = min(
                    (
                        v
                        for cov, r, v, banned in caps
                        if (not cov or piece.startswith(r)) and tok not in banned and (cov or banned)
                    ),
                    default=0.0,
                )
                row[tok] = min(bound, cap) - BOUND_MARGIN
        for tok, lp in node.exact.items():
            row[tok] = lp
        return row
