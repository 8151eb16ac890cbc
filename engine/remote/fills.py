"""Prompt decodes the server does for a backend (prefills, `n_predict: 0`), kept across calls.

A prompt decode that outlasts a keystroke's budget is not thrown away: its connection stays
open (a `Fill`), and the next call on the same document waits on the same request. A call for
another document leaves it to finish (detached, at most DETACHED): its answer, read when it has
come (`reap`), names the slot that holds the prompt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.backend import Cancelled
from engine.core.placement import SLOT_SHARE, common_prefix_length
from engine.remote.call import Call, cancel_check
from engine.remote.http import ModelServerClient, Pending, StreamCancelled
from engine.remote.slots import SlotBook
from engine.types import ModelServerError

DETACHED = 4  # prefills of documents left for another, kept running until they answer (`detach`)


@dataclass
class Fill:
    """A prompt decode the server is doing for us (a prefill), waited on across engine calls."""

    prompt: tuple[int, ...]  # the prompt sent
    pending: Pending
    slot: int  # the slot named in the request (-1: the server picks)
    expected: int | None = None  # prompt tokens the named slot should give back (engine.remote.slots `expect`)
    claim: int = 0  # its number among the requests sent (engine.remote.slots `claim`)


class Prefills:
    """The prefill waited on (`running`) and the detached ones. `note_timings(answer, expected)`
    takes in an answer's prompt work."""

    def __init__(
        self, client: ModelServerClient, slots: SlotBook, call: Call, note_timings: Callable[[dict, int | None], None]
    ) -> None:
        self._client, self._slots, self._call, self._note_timings = client, slots, call, note_timings
        self.running: Fill | None = None
        self.detached: list[Fill] = []
        self.last_fill_s: float | None = None  # how long the last prefill took, from its request

    def start(
        self, prompt: tuple[int, ...], body: dict, slot: int, expected: int | None, cancel: threading.Event | None
    ) -> None:
        """Send a prefill of `prompt` and wait for it (`wait`)."""
        pending = self._client.start("/completion", body, self._call.deadline, cancel_check(cancel))
        self.running = Fill(prompt, pending, slot, expected, self._slots.claims)
        self.wait(cancel)

    def wait(self, cancel: threading.Event | None) -> None:
        """Wait for the running prefill within this call's budget; it stays open on a timeout or
        a cancel (except a prefetch's own timeout: then it is given up)."""
        fill = self.running
        assert fill is not None
        try:
            answer = fill.pending.wait(self._call.deadline, cancel_check(cancel))
        except StreamCancelled:
            raise Cancelled() from None
        except ModelServerError as error:
            if error.kind != "timeout" or self._call.prefetching or fill.pending.closed:
                self.drop()
            raise
        self.running = None
        self.last_fill_s = time.monotonic() - fill.pending.started
        if not isinstance(answer, dict):
            raise self._client.protocol("a prefetch answer that is not an object")
        self._slots.learn(fill.prompt, answer)
        self._note_timings(answer, fill.expected)

    def drop(self) -> None:
        """Give up the running prefill: the server stops it (decoded chunks stay in its slot, but
        which ones is not known, so neither is what the slot holds)."""
        fill, self.running = self.running, None
        if fill is not None:
            self._give_up(fill)

    def _give_up(self, fill: Fill) -> None:
        fill.pending.close()
        self._slots.give_up(fill.slot, fill.prompt)

    def detach(self) -> None:
        """Leave the running prefill to finish while another document is served. Given up, it was
        decoded anyway (llama-server notices a closed connection only between batches, and a
        document's prompt is one or two), but the client no longer knew what its slot held, so the
        document's next request decoded it all again from position 0 (seen in the team benchmark:
        9 given up in the first second of 4 users opening 3 documents each). Its answer, read by
        `reap` when it has come, names the slot that holds it."""
        fill, self.running = self.running, None
        if fill is None:
            return
        if len(self.detached) >= DETACHED:
            self._give_up(self.detached.pop(0))
        self.detached.append(fill)

    def reattach(self, prompt: tuple[int, ...]) -> None:
        """Wait on a detached prefill again (`running`) when `prompt` shares at least SLOT_SHARE
        of it: the whole prompt prefetched again after a first answer (engine.Engine.first_prompt)
        whose keystroke left it. Sent again instead, the server decoded it from 0 in another slot,
        beside the first decode still running, at every keystroke (warm calls of 3.5 s)."""
        if self.running is not None:
            return
        for fill in reversed(self.detached):
            if common_prefix_length(fill.prompt, prompt) >= SLOT_SHARE * len(fill.prompt):
                self.detached.remove(fill)
                self.running = fill
                return

    def reap(self) -> None:
        """Take in the answers of detached prefills that have come, without waiting for the others.
        An answer names the slot holding its prompt, as a prefill waited on does; its decode is
        counted where it was asked for (a prefetch), not in the call that reads it."""
        for fill in list(self.detached):
            if fill.pending.closed:
                self.detached.remove(fill)
                self._give_up(fill)
            elif fill.pending.ready():
                self.detached.remove(fill)
                try:
                    answer = fill.pending.wait(time.monotonic() + self._client.timeout_s)
                except (ModelServerError, StreamCancelled):
                    self._give_up(fill)
                    continue
                if not isinstance(answer, dict):
                    self._give_up(fill)
                    continue
                # A slot we have sent something else to since holds that now, whatever this answer says.
                if self._slots.named_since(answer.get("id_slot"), fill.claim) or not self._slots.learn(
                    fill.prompt, answer, live=False
                ):
                    self._give_up(fill)

    def clear(self) -> None:
        """Give up every prefill (the running one, then the detached ones, last first)."""
        self.drop()
        while self.detached:
            self._give_up(self.detached.pop())
