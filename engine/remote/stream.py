"""The one streamed request a server's backend has open (engine.remote.rows): its token events
read into nodes (engine.remote.nodes) as the engine walks its path, with what they say of the
slot and of the prompt work."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.backend import Cancelled
from engine.core.vocab import VocabIndex
from engine.remote.call import Call, cancel_check
from engine.remote.http import EventStream, ModelServerClient, StreamCancelled
from engine.remote.nodes import NodeStore
from engine.remote.request import GENERATION_SLACK
from engine.remote.slots import SlotBook
from engine.types import ModelServerError

DRAIN_S = 0.002  # what an ended call still reads of its stream (the final event is usually there)
# A stream with at most this many tokens left when its call ends is left to finish rather than
# closed, so its connection stays alive for the next keystroke (and its rows are read then); the
# next call reads it to its end within its own budget (the server finishes those tokens before
# it takes another request for the slot anyway), then closes it. Reading for at most 0.5 s, as
# before, closed it on a loaded machine, and the next request opened a new connection.
LEFTOVER_TOKENS = GENERATION_SLACK + 2


@dataclass
class Walk:
    """An open stream: the next event's distribution is the one after `path`."""

    stream: EventStream
    path: tuple[int, ...]  # the tokens the stream has walked (its prompt, then what it generated)
    forced: list[int]
    literal: bytes | None  # required bytes the grammar still forces; None: no grammar literal
    cover_cap: bool
    slot: int = -1
    seen: int = 0
    first: bool = True
    expected: int | None = None  # prompt tokens the named slot should give back (engine.remote.slots `expect`)
    n_predict: int = 0  # tokens the request may generate
    leftover: bool = False  # kept open past the engine call that opened it (see `Stream.finish`)
    excluded: frozenset[int] = frozenset()  # banned at the first free step: its cap leaves them out

    @property
    def left(self) -> int:
        return self.n_predict - self.seen


class Stream:
    """The open stream (`walk`, None when there is none) and what the slot holds along it (`held`).
    `note_timings(event, expected)` takes in a request's first progress event (prompt work)."""

    def __init__(
        self,
        client: ModelServerClient,
        vocab: VocabIndex,
        nodes: NodeStore,
        slots: SlotBook,
        call: Call,
        note_timings: Callable[[dict, int | None], None],
    ) -> None:
        self._client, self._vocab, self._nodes, self._slots, self._call = client, vocab, nodes, slots, call
        self._note_timings = note_timings
        self.walk: Walk | None = None
        self.held: tuple[int, ...] = ()

    def open(self, walk: Walk) -> None:
        self.held = walk.path
        self.walk = walk

    def read_forced(self, cancel: threading.Event | None) -> None:
        """Read until the forced part (tokens, then the grammar's literal) is through."""
        while self.walk is not None and (self.walk.forced or self.walk.literal):
            self.read(cancel)

    def advance_to(self, key: tuple[int, ...], cancel: threading.Event | None) -> None:
        """Read the open stream while it walks toward `key`."""
        while key not in self._nodes and self.walk is not None:
            path = self.walk.path
            if len(path) > len(key) or key[: len(path)] != path:
                return
            self.read(cancel)

    def read(self, cancel: threading.Event | None, quiet: bool = False) -> None:
        """One token event of the open stream: record its distribution and move on."""
        walk = self.walk
        assert walk is not None
        deadline = self._call.deadline
        walk.stream.set_limits(
            deadline if deadline is not None else time.monotonic() + self._client.timeout_s, cancel_check(cancel)
        )
        while True:
            try:
                event = walk.stream.next_event(quiet)
            except StreamCancelled:
                self.walk = None
                raise Cancelled() from None
            except ModelServerError:
                self.walk = None
                raise
            if event is None:
                self.walk = None
                return
            if walk.first and ("timings" in event or "prompt_progress" in event):
                walk.first = False
                self._note_timings(event, walk.expected)
            if walk.slot < 0 and self._slots.learn(walk.path, event):
                walk.slot = event["id_slot"]  # the final event names it (token events say -1)
            if event.get("stop") is True:  # the final event: no token
                continue
            probs = event.get("completion_probabilities")
            if not probs:
                continue  # progress or an empty first event
            break
        token, logprob, top = self.parse_probs(probs)
        predicted = event.get("tokens_predicted")
        walk.seen += 1
        if isinstance(predicted, int) and predicted != walk.seen:
            # A token without its own event (llama-server holds back a token that ends inside a
            # UTF-8 character): the path beyond is unknown, so the stream is no use past here.
            self.close()
            return
        cap = None
        if walk.forced:
            if token != walk.forced[0]:
                self.close()
                raise self._client.protocol("a grammar-forced token was not the one sampled")
            walk.forced.pop(0)
        elif walk.literal:
            cap = (walk.cover_cap, walk.literal, walk.excluded)
            walk.cover_cap, walk.excluded = False, frozenset()
            piece = self._vocab.pieces[token]
            if walk.literal.startswith(piece) and piece:
                walk.literal = walk.literal[len(piece) :]
            elif piece.startswith(walk.literal):
                walk.literal = None
            else:  # a token the grammar took for text (a special token's name): no cap, stop here
                self._nodes.record(walk.path, token, logprob, top, None)
                self.close()
                return
        self._nodes.record(walk.path, token, logprob, top, cap)
        walk.path = walk.path + (token,)
        self.held = walk.path
        self._slots.note_content(walk.slot, walk.path)
        if self._vocab.eog[token]:
            # Nothing follows but the final event: read later (`settle`, `finish`), not closed,
            # so the connection serves the next request.
            walk.n_predict = walk.seen

    def parse_probs(self, probs: object) -> tuple[int, float, list[tuple[int, float]]]:
        """(token, its log-probability, the listed (token, log-probability)) of a token event."""
        try:
            entry = probs[0]  # type: ignore[index]
            token = int(entry["id"])
            logprob = float(entry["logprob"])
            top = [(int(e["id"]), float(e["logprob"])) for e in entry["top_logprobs"]]
        except (KeyError, TypeError, ValueError, IndexError):
            raise self._client.protocol("a token event without id, logprob and top_logprobs") from None
        size = self._vocab.size
        if (
            not 0 <= token < size
            or any(not 0 <= t < size for t, _ in top)
            or not all(math.isfinite(v) and v <= 1e-3 for v in [logprob] + [lp for _, lp in top])
        ):
            raise self._client.protocol("a token id or log-probability out of range")
        return token, min(0.0, logprob), [(t, min(0.0, lp)) for t, lp in top]

    def settle(self, drain: bool = False) -> None:
        """Before a new request: a stream left over from an earlier call, or one with at most
        LEFTOVER_TOKENS to go, is read to its end (its rows are kept, its connection goes back to
        the pool); so is any stream when `drain` (its rows are most often the suggestion's own),
        within the call's budget. Any other open stream is closed, which stops the server
        decoding it, and costs a new connection for the next request."""
        walk = self.walk
        if walk is not None and (walk.leftover or drain or walk.left <= LEFTOVER_TOKENS):
            saved = self._call.deadline
            if saved is None:
                self._call.deadline = time.monotonic() + self._client.timeout_s
            try:
                while self.walk is not None:
                    self.read(self._call.cancel, quiet=True)
            except (Cancelled, ModelServerError):
                pass
            finally:
                self._call.deadline = saved
        self.close()

    def finish(self) -> None:
        """The engine call is over: an open stream is closed, so the server stops decoding it.
        Events that have already arrived are read first: the final one names the slot used. A
        stream that is nearly done (and not cancelled) is left to finish instead (LEFTOVER_TOKENS),
        which keeps its connection alive for the next call."""
        walk = self.walk
        if walk is not None and walk.left <= LEFTOVER_TOKENS and not self._call.cancelled:
            walk.leftover = True
            self._call.cancel = None
            return
        if self.walk is not None:
            self._call.deadline = time.monotonic() + DRAIN_S
            try:
                while self.walk is not None:
                    self.read(None, quiet=True)
            except (Cancelled, ModelServerError):
                pass
        self.close()
        self._call.cancel = None

    def close(self) -> None:
        """Close the open stream, if any (the server stops decoding it)."""
        if self.walk is not None:
            self.walk.stream.close()
            self.walk = None
