"""The remote backend: the engine's next-token distributions from a llama-server over HTTP.

It stands where `engine.local.kv.KvCache` stands for the in-process model (same methods: `prepare`,
`logits_after`, `covering_rows`, `prefill`, ...), so one `Engine` does the windowing, FIM layout,
stops, lexicon and text handling for both. What differs is what a distribution is: llama-server
returns, for each token it generates, the sampled token's log-probability and the top `n_probs`
ones (raw softmax of the logits: grammar and logit_bias do not change them). Every token it does
not list is at most the N-th listed value. So each node (a token path after the prompt) holds
exact values for some tokens and upper bounds for the rest:

- a step sampled under a grammar that forces the remaining required bytes picks the most probable
  *consistent* token, so every consistent token is at most its value (a "cap");
- the same with the strict-prefix tokens banned by logit_bias picks the best *covering* token;
- a grammar term `<[id]>` forces one token and reports its exact value.

The exact covering search (engine.core.covering, unchanged) runs on rows where each unknown value is
its upper bound. Its answer is proven optimal when every token of the chosen path has an exact
value: every other covering's bound is at most what it could really be, and the search found the
best under those bounds. Before it runs, everything it may still need (engine.remote.frontier: the rows
of every spelling whose bound beats the best covering known exactly) is asked for in one request
of many prompts (engine.remote.batch), each row one of `maxCoverDecodes`, as a decode is
in-process; what is left (a token on the chosen path known only by a bound, a node the batch did
not reach) takes one more request each, and the search runs again. When the budget runs out,
the best covering whose tokens are all exact is taken (stats say "unproven"), and with none
known the server's own per-step-masked path ("mask").

One request usually does it all: the first request of a keystroke is a stream with the grammar of
the required prefix; its first token is typically a covering token (then proven at once), and the
stream goes on with the greedy continuation, which generation reads as it needs it and closes when
it stops (closing the connection makes llama-server stop decoding). Nodes are kept by token path,
so the next letter of the same word, or typing along a suggestion, usually needs no request.

A prompt decode that outlasts a keystroke's budget is not thrown away: prompts are decoded by a
prefill request (`n_predict: 0`) whose connection stays open after the budget runs out (a
`Fill`, engine.remote.fills). The keystroke answers with no suggestion; the next call on the same document (the
prefetch the scheduler queues after a slow answer, with its own longer budget, or the next
keystroke) waits on the same request, so nothing is decoded twice and the next keystroke finds
the prompt cached. Only a call for another document gives it up (closing it stops the server).

Prompts go as token ids (no BOS is added to an id array: the engine's own tokens already start
with it) with `cache_prompt` into one slot per document (`id_slot`, learnt from the server's
answers or fixed by `model_server_slot`), so an unchanged prompt costs the server no prompt work.
In a team (once a named slot gave back far less than we left in it: another user took it), each
call's first request names no slot instead, so llama-server puts the document in an idle slot and
restores it from its RAM prompt cache (engine.remote.slots `slot_for`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import replace

import numpy as np

from engine.backend import Cancelled, PromptSpeed, Traffic
from engine.core.placement import SLOT_SHARE, common_prefix_length
from engine.core.vocab import VocabIndex
from engine.remote.batch import prove
from engine.remote.bounded import BoundedRows
from engine.remote.call import Call, cancel_check
from engine.remote.fills import Prefills
from engine.remote.http import ModelServerClient, StreamCancelled, UpstreamChanged
from engine.remote.nodes import Node, NodeStore
from engine.remote.request import (
    GENERATION_SLACK,
    Inexpressible,
    gbnf_literal,
    request_body,
)
from engine.remote.slots import SlotBook
from engine.remote.stream import Stream, Walk

# Listed tokens per generated token (about 2.5 kB of JSON each). At least engine.core.signals.TOP: the
# gate's signals read that many of each row along the chosen covering, as in-process.
N_PROBS = 40
# A prompt with more tokens than this left to decode goes through a prefill first (one more round
# trip), so a slow decode is a `Fill` that a later call can wait on rather than a lost stream.
PREFILL_TAIL = 128
PROBE_TEXT = (
    "Thanks for sending over the draft yesterday.\n\tdef f(x_1, *args):  # ünïcödé 日本語 😀\n"
    '        return {\'k\': [x_1 ** 2, 0x1F, "s\\n"]} <tag attr="v">  \r\n'
)


def _unchecked(client: ModelServerClient, rows: RemoteRows) -> None:
    """The check of rows made without one (tests' fakes): nothing to check."""


class RemoteRows:
    """Distributions by token path from one llama-server (see the module docstring): an
    engine.backend `Backend`. What it knows is in `nodes` (engine.remote.nodes) and `slots`
    (engine.remote.slots); the connection's work in progress is the open `stream`
    (engine.remote.stream) or a prefill (`prefills`, engine.remote.fills), never both."""

    networked = True

    def __init__(
        self,
        client: ModelServerClient,
        vocab: VocabIndex,
        n_ctx: int,
        total_slots: int,
        slot: int | None,
        n_probs: int = N_PROBS,
    ):
        self.client = client
        self.vocab = vocab
        self.n_ctx = n_ctx
        self.sequences = 1
        self.n_probs = n_probs
        self.slots = SlotBook(total_slots, slot)
        self.nodes = NodeStore(vocab)
        self.call = Call()
        self.stream = Stream(client, vocab, self.nodes, self.slots, self.call, self._note_timings)
        self.prefills = Prefills(client, self.slots, self.call, self._note_timings)
        self._lock = threading.RLock()
        self.decoded = 0  # prompt tokens the server decoded for us (its timings' prompt_n)
        self.speed = PromptSpeed()  # from the server's timings (prompt_ms over prompt_n)
        self.fallbacks: list[str] = []  # one entry per unproven covering ("unproven" | "mask")
        self.switches = 0
        # Checks a server's model (engine.remote.connect `ServerCheck`): run again on the server a
        # balancer moved a document to, before any of its numbers are used.
        self.check: Callable[[ModelServerClient, RemoteRows], object] = _unchecked
        self.upstream_changes = 0  # documents a balancer moved to another server (UpstreamChanged)

    @property
    def total_slots(self) -> int:
        return self.slots.total_slots

    @total_slots.setter
    def total_slots(self, count: int) -> None:
        self.slots.total_slots = count

    # --- which server ----------------------------------------------------------------------

    def route(self, key: str | None) -> None:
        """The document the next calls are for: its opaque key goes on every request
        (engine.remote.http AFFINITY_HEADER), so a balancer keeps it on one server."""
        self.client.affinity = key

    @property
    def answered(self) -> str:
        """Which server answered last: the URL, or behind a balancer the upstream it named."""
        return self.client.upstream or self.client.url

    def traffic(self) -> Traffic:
        return replace(self.client.traffic)

    def recover(self, error: BaseException) -> bool:
        """After a failed call: True when it may be made again at once. So only when a balancer
        moved the document to another server (UpstreamChanged): that server's model is checked
        (through the balancer, with the same key, so on that server), and everything known of
        slots and distributions, which was the other server's, is forgotten. The retry then
        decodes its prompt there from position 0 and proves its choice on that server's numbers
        only. A server with another model raises ModelServerError("model")."""
        if not isinstance(error, UpstreamChanged):
            return False
        with self._lock:
            self.upstream_changes += 1
            self.forget()
            self.check(self.client, self)
        return True

    # --- the backend ---------------------------------------------------------------------------

    @property
    def held(self) -> int:
        return len(self.stream.held)

    @property
    def kept_prompts(self) -> int:
        """Our slots, as the in-process engine's sequences (engine.remote.slots): a first answer
        then comes from the same prompt on both backends (engine.Engine.first_prompt)."""
        return self.slots.kept_prompts

    def cached_prefix(self, tokens: tuple[int, ...]) -> int:
        return max(common_prefix_length(self.stream.held, tokens), self.slots.cached_prefix(tokens))

    def sequences_held(self) -> list[int]:
        return [len(self.stream.held)]

    def begin(
        self,
        cancel: threading.Event | None,
        max_tokens: int = 16,
        single_line: bool = True,
        deadline: float | None = None,
    ) -> None:
        """A new engine call (engine.remote.call `Call.start`), ending by `deadline` at the latest
        (a call made again on another server has what was left)."""
        self.call.start(self.client.timeout_s, cancel, max_tokens, single_line, deadline)
        self.slots.placed = False  # the server has placed this call's document (engine.remote.slots `slot_for`)

    def end(self) -> None:
        """The engine call is over (engine.remote.stream `Stream.finish`)."""
        with self._lock:
            self.stream.finish()

    def remembers(self, tokens: tuple[int, ...]) -> bool:
        return tuple(tokens) in self.nodes

    def logits_after(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> np.ndarray:
        """A dense row of log-probabilities after `tokens` (engine.remote.nodes `build_dense`).
        Read from memory, from the open stream, or from a new streamed request that goes on
        greedily from there."""
        key = tuple(tokens)
        with self._lock:
            row = self.nodes.dense_row(key)
            if row is not None:
                return row
            if key not in self.nodes:
                self.stream.advance_to(key, cancel)
            if key not in self.nodes:
                self.query(key, predict=self.call.predict + GENERATION_SLACK, cancel=cancel, until_free=False)
                self.stream.advance_to(key, cancel)
            node = self.nodes.peek(key)
            if node is None:
                raise self.client.protocol("the stream ended before its first token")
            return self.nodes.build_dense(key, node)

    def rows_along(
        self, tokens: tuple[int, ...], draft: tuple[int, ...], cancel: threading.Event | None = None
    ) -> None:
        """Drafts buy nothing here (the server decodes one token per step either way)."""
        self.logits_after(tokens, cancel)

    def prepare(
        self, tokens: tuple[int, ...], required: bytes, cancel: threading.Event | None = None, exact: bool = True
    ) -> None:
        """The keystroke's first step: with a required prefix, whatever the search on what is
        known asks for first (nothing when that already proves its choice); without, the row
        after the prompt. Per-step masking (`exact` False) is the server's own grammar: its
        greedy pick is the best consistent token, so the sampler's pick on these rows follows it."""
        self.call.prompt = tuple(tokens)
        if not required:
            self.logits_after(tokens, cancel)
            return
        if not exact:
            with self._lock:
                try:
                    self.query(
                        tuple(tokens), len(required) + self.call.predict + GENERATION_SLACK, cancel, literal=required
                    )
                except Inexpressible:
                    self.fallbacks.append("inexpressible")
                    self.logits_after(tokens, cancel)
            return
        with self._lock:
            if self.nodes.node(tuple(tokens)) is None:  # the prompt's own row: its stream goes on into the suggestion
                BoundedRows(self, tokens, required, cancel, budget=1).expand(())

    def covering_rows(
        self, prompt: tuple[int, ...], required: bytes, cancel: threading.Event | None, budget: int
    ) -> BoundedRows:
        """The search's rows, with what proving its choice needs asked for first, all of it in one
        request where it can be (engine.remote.batch)."""
        rows = BoundedRows(self, prompt, required, cancel, budget)
        with self._lock:
            prove(rows)
        return rows

    def prefill(self, tokens: tuple[int, ...], cancel: threading.Event | None = None, beside: bool = False) -> None:
        """Prefetch: the server decodes the prompt into its slot (`n_predict: 0`) and nothing else
        (`beside`: in another slot than the live one unless that holds a prefix of it, as
        in-process: engine.core.placement).
        A decode still running for this document (a `Fill`) is waited on first; one for another
        document is left to finish. A timeout or a cancel leaves this one running for the next call."""
        key = tuple(tokens)
        with self._lock:
            self.stream.settle()
            self.reap()
            self.prefills.reattach(key)
            fill = self.prefills.running
            if fill is not None:
                if common_prefix_length(fill.prompt, key) >= SLOT_SHARE * len(fill.prompt):
                    self.prefills.wait(cancel)
                    slot, warm = self.slots.slot_for(key, beside)
                    if slot >= 0 and self.slots.cached_in(slot, warm, key) >= len(key) - 1:
                        return  # what was running was this prompt (all but its last token)
                else:
                    self.prefills.detach()  # another document needs the client
            slot, warm = self.slots.slot_for(key, beside)
            if slot >= 0 and warm and self.slots.cached_in(slot, warm, key) >= len(key) - 1:
                # The slot holds it (typing inside a word leaves the prompt as it was): nothing to
                # decode, as in-process. Asked anyway, the request was one round trip per keystroke
                # that the keystroke's own request, cancelling it, then waited for.
                return
            # All but the last token: the request that follows then decodes that one alone.
            start = key[:-1] if len(key) > 1 and self.slots.cached_in(slot, warm, key) < len(key) - 1 else key
            expected = self.slots.expect(slot, warm, start)
            self.slots.claim(slot, start)
            body = request_body(start, 0, slot, warm, self.n_probs, False)
            body["stream"] = False
            self.prefills.start(start, body, slot, expected, cancel)

    @property
    def filling(self) -> bool:
        """A prompt decode is still running on the server for us (it outlasted a budget)."""
        return self.prefills.running is not None

    def reap(self) -> None:
        """Take in the answers of detached prefills that have come (engine.remote.fills)."""
        self.prefills.reap()

    def forget(self) -> None:
        """Drop every distribution and what we know of the slots: the next prompt is decoded
        whole, from position 0, as in a fresh in-process sequence."""
        with self._lock:
            self.stream.close()
            self.prefills.clear()
            self.slots.clear()
            self.nodes.clear()

    def close(self) -> None:
        self.forget()
        self.client.close()

    # --- what is known (the tests read these) ------------------------------------------------

    def node(self, key: tuple[int, ...]) -> Node | None:
        return self.nodes.node(key)

    # --- requests --------------------------------------------------------------------------

    def _note_timings(self, event: dict, expected: int | None = None) -> None:
        """Prompt tokens the server evaluated for a request: its timings' `prompt_n` (a prefill's
        answer), or a stream's first progress event (`total` - `cache`). Fewer reused than
        `expected` from a named slot: another client took it (`shared`)."""
        reused = None
        timings = event.get("timings")
        progress = event.get("prompt_progress")
        if isinstance(timings, dict) and isinstance(timings.get("prompt_n"), int):
            self.decoded += max(0, timings["prompt_n"])
            reused = timings.get("cache_n")
            if isinstance(timings.get("prompt_ms"), (int, float)):
                self.speed.note(timings["prompt_n"], timings["prompt_ms"])
        elif (
            isinstance(progress, dict)
            and isinstance(progress.get("total"), int)
            and isinstance(progress.get("cache"), int)
        ):
            self.decoded += max(0, progress["total"] - progress["cache"])
            reused = progress["cache"]
        self.slots.reused(expected, reused)

    def query(
        self,
        tokens: tuple[int, ...],
        predict: int,
        cancel: threading.Event | None,
        forced: Seq[int] = (),
        literal: bytes | None = None,
        ban: Seq[int] = (),
        until_free: bool = True,
        exclude: frozenset[int] = frozenset(),
        listed: int | None = None,
    ) -> None:
        """One streamed request from `tokens`: the grammar forces `forced`, then `literal`,
        then anything; `ban` are banned by logit_bias (their values are still reported), so the
        first free token is the best *covering* token; `exclude` are banned too, and the first
        free token bounds every consistent token but them. Reads until the forced part is through
        (or, with until_free False, one event); the stream then stays open for generation to read on.
        `listed`: tokens listed per event, if not `n_probs`."""
        self.stream.settle()
        self.reap()
        # What the server decodes as its prompt, and how: the request's prompt (in the same
        # chunks as in-process, its last token alone: engine.local.llama), then every token past
        # it forced one by one, as the in-process engine decodes them (engine.local.kv `prepare`).
        start = tokens
        prompt = self.call.prompt
        if prompt and len(tokens) > len(prompt) and tokens[: len(prompt)] == prompt:
            # Past the prompt, what the slot already holds (a branch asked before, the path of a
            # stream) is its prompt too: each of those tokens was decoded alone, and only the last
            # is decoded again (alone); the rest are forced one by one. Forced from the prompt on,
            # a suggestion's request restated the covering's rows: 3 kB an event for rows known.
            slot, warm = self.slots.slot_for(prompt)
            held = self.slots.cached_in(slot, warm, tokens) if slot >= 0 and warm else 0
            keep = max(len(prompt), min(held, len(tokens)))
            start, forced = tokens[:keep], tokens[keep:] + tuple(forced)
        slot, warm = self.slots.slot_for(start)
        if (
            (slot, warm) == (-1, False)
            or self.prefills.running is not None
            or len(start) - self.slots.cached_in(slot, warm, start) > PREFILL_TAIL
        ):
            # A new document: a stream's token events do not name their slot (only its last
            # event does, which a closed stream never sends), so a prefetch decodes it first and
            # its answer names the slot; every later request of the document then names it and
            # reads KV computed once, in the same ubatches as in-process. A long new tail (or a
            # decode still running) goes the same way, so a slow decode is kept (`Fill`).
            self.prefill(start, cancel)
            slot, warm = self.slots.slot_for(start)
        if len(start) > 1 and self.slots.cached_in(slot, warm, start) < len(start) - 1:
            start, forced = start[:-1], (start[-1],) + tuple(forced)
        # A single-line stream stops at a line break, but not at one it is made to write: a
        # forced token past a line break (`next_line`: the line ended at once) would stop it there.
        line_stop = not any(b in self.vocab.pieces[t] for t in forced for b in (b"\n", b"\r"))
        line_stop = line_stop and not (literal and (b"\n" in literal or b"\r" in literal))
        expected = self.slots.expect(slot, warm, start)
        self.slots.claim(slot, start)
        body = request_body(
            start, predict + len(tokens) - len(start), slot, warm, self.n_probs, self.call.single_line and line_stop
        )
        terms = [f"<[{t}]>" for t in forced]
        if literal:
            written = gbnf_literal(literal)
            if written is None:
                raise Inexpressible()
            terms.append(written)
        if terms:
            body["grammar"] = "root ::= " + " ".join(terms) + " .*"
        # A token the grammar forces (the path the slot lacks, decoded here one by one) is never
        # banned: logit_bias holds at every step, and a banned forced token leaves the server no
        # token to take ("empty grammar stack", HTTP 500). Left allowed at the free step too, the
        # cap read there still bounds what it says it bounds (the greedy pick is over more tokens).
        banned = (set(ban) | exclude) - set(forced)
        if banned:
            body["logit_bias"] = [[int(t), False] for t in sorted(banned)]
        if listed is not None:
            body["n_probs"] = max(1, listed)
        try:
            stream = self.client.stream("/completion", body, self.call.deadline, cancel_check(cancel))
        except StreamCancelled:
            raise Cancelled() from None
        self.stream.open(Walk(
            stream, start, list(forced), literal if literal else None, bool(ban), slot=body["id_slot"],
            n_predict=body["n_predict"], excluded=frozenset(exclude), expected=expected,
        ))  # fmt: skip
        if until_free:
            self.stream.read_forced(cancel)

    def close_stream(self) -> None:
        """Close an open stream (the server stops decoding it)."""
        self.stream.close()
