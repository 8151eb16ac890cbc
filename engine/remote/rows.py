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
`_Fill`). The keystroke answers with no suggestion; the next call on the same document (the
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

import math
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, replace

import numpy as np

from engine.backend import Cancelled, Traffic
from engine.core.placement import common_prefix_length
from engine.core.vocab import VocabIndex
from engine.remote.batch import prove
from engine.remote.bounded import BoundedRows
from engine.remote.grammar import GENERATION_SLACK, Inexpressible, gbnf_literal  # noqa: F401  (gbnf_literal: re-exported)
from engine.remote.http import EventStream, ModelServerClient, Pending, StreamCancelled, UpstreamChanged
from engine.remote.nodes import CapGroup, Node, NodeStore
from engine.remote.slots import SLOT_SHARE, TAKEN_MIN_TOKENS, SlotBook  # noqa: F401  (TAKEN_MIN_TOKENS: re-exported)
from engine.types import ModelServerError

# Listed tokens per generated token (about 2.5 kB of JSON each). At least engine.core.signals.TOP: the
# gate's signals read that many of each row along the chosen covering, as in-process.
N_PROBS = 40
FINAL_FIELDS = ("id_slot", "stop", "tokens_predicted", "timings")  # what the engine reads of a final answer
# Of each request's budget, kept for answering after the server gave up (the bench measured 59 ms).
ANSWER_RESERVE_S = 0.2
DRAIN_S = 0.002  # what an ended call still reads of its stream (the final event is usually there)
# A stream with at most this many tokens left when its call ends is left to finish rather than
# closed, so its connection stays alive for the next keystroke (and its rows are read then); the
# next call reads it to its end within its own budget (the server finishes those tokens before
# it takes another request for the slot anyway), then closes it. Reading for at most 0.5 s, as
# before, closed it on a loaded machine, and the next request opened a new connection.
LEFTOVER_TOKENS = GENERATION_SLACK + 2
# A prefetch's budget (and so a slow prompt's, once its keystroke gave up on it): at least this,
# or this many keystroke budgets.
PREFETCH_MIN_S, PREFETCH_BUDGETS = 120.0, 12
# A prompt with more tokens than this left to decode goes through a prefill first (one more round
# trip), so a slow decode is a `_Fill` that a later call can wait on rather than a lost stream.
PREFILL_TAIL = 128
DETACHED = 4  # prefills of documents left for another, kept running until they answer (`_detach_fill`)
PROBE_TEXT = (
    "Thanks for sending over the draft yesterday.\n\tdef f(x_1, *args):  # ünïcödé 日本語 😀\n"
    "        return {'k': [x_1 ** 2, 0x1F, \"s\\n\"]} <tag attr=\"v\">  \r\n"
)




@dataclass
class _Walk:
    """An open stream: the next event's distribution is the one after `context`."""

    stream: EventStream
    context: tuple[int, ...]
    forced: list[int]
    literal: bytes | None  # required bytes the grammar still forces; None: no grammar literal
    cover_cap: bool
    slot: int = -1
    seen: int = 0
    first: bool = True
    expected: int | None = None  # prompt tokens the named slot should give back (engine.remote.slots `expect`)
    n_predict: int = 0  # tokens the request may generate
    leftover: bool = False  # kept open past the engine call that opened it (see `end`)
    excluded: frozenset[int] = frozenset()  # banned at the first free step: its cap leaves them out

    @property
    def left(self) -> int:
        return self.n_predict - self.seen


@dataclass
class _Fill:
    """A prompt decode the server is doing for us (a prefill), waited on across engine calls."""

    context: tuple[int, ...]  # the prompt sent
    pending: Pending
    slot: int  # the slot named in the request (-1: the server picks)
    expected: int | None = None  # prompt tokens the named slot should give back (engine.remote.slots `expect`)


class RemoteRows:
    """Distributions by token path from one llama-server (see the module docstring): an
    engine.backend `Backend`."""

    networked = True

    def __init__(self, client: ModelServerClient, vocab: VocabIndex, n_ctx: int, total_slots: int, slot: int | None, n_probs: int = N_PROBS):
        self.client = client
        self.vocab = vocab
        self.n_ctx = n_ctx
        self.sequences = 1
        self.slots = SlotBook(total_slots, slot)
        self.nodes = NodeStore(vocab)
        self.n_probs = n_probs
        # The connection's work in progress: an open stream (`_Walk`), a prefill waited on across
        # calls (`_Fill`), never both; prefills of other documents left to finish (`_detach_fill`).
        self._walk: _Walk | None = None
        self._fill: _Fill | None = None
        self._detached: list[_Fill] = []
        self.last_fill_s: float | None = None  # how long the last prefill took, from its request
        self._lock = threading.RLock()
        # The current engine call (`begin`): its budget, cancel flag, generation wants and prompt.
        self._deadline: float | None = None
        self._cancel: threading.Event | None = None
        self._prefetching = False  # the engine's prefetch: its own, longer budget
        self._predict = 16
        self._single_line = True
        self._prompt: tuple[int, ...] = ()  # this call's prompt (tokens past it are forced)
        self._held: tuple[int, ...] = ()
        self.decoded = 0  # prompt tokens the server decoded for us (its timings' prompt_n)
        self.fallbacks: list[str] = []  # one entry per unproven covering ("unproven" | "mask")
        self.switches = 0
        # Checks a server's model (engine.remote.connect `ServerCheck`): run again on the server a
        # balancer moved a document to, before any of its numbers are used.
        self.check: Callable[[ModelServerClient, RemoteRows], object] | None = None
        self.upstream_changes = 0  # documents a balancer moved to another server (UpstreamChanged)

    @property
    def total_slots(self) -> int:
        return self.slots.total_slots

    @total_slots.setter
    def total_slots(self, count: int) -> None:
        self.slots.total_slots = count

    @property
    def shared(self) -> bool:
        """Another client has taken a slot we held (a team on one server): engine.remote.slots `Sharing`."""
        return self.slots.sharing.shared

    @property
    def taken(self) -> int:
        """Named requests that found their slot taken."""
        return self.slots.sharing.taken

    @property
    def predict(self) -> int:
        """Tokens the current call's generation wants."""
        return self._predict

    # --- which server ----------------------------------------------------------------------

    def route(self, key: str | None) -> None:
        """The document the next calls are for: its opaque key goes on every request
        (http_client.AFFINITY_HEADER), so a balancer keeps it on one server."""
        self.client.affinity = key

    @property
    def answered(self) -> str:
        """Which server answered last: the URL, or behind a balancer the upstream it named."""
        return self.client.upstream or self.client.url

    @property
    def deadline(self) -> float | None:
        """When the current call's budget runs out."""
        return self._deadline

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
            if self.check is not None:
                self.check(self.client, self)
        return True

    # --- the KvCache surface ---------------------------------------------------------------

    @property
    def held(self) -> int:
        return len(self._held)

    def sequences_held(self) -> list[int]:
        return [len(self._held)]

    def begin(
        self, cancel: threading.Event | None, max_tokens: int = 16, single_line: bool = True, deadline: float | None = None
    ) -> None:
        """A new engine call: its time budget starts now, less what answering the editor takes
        after the last read (so a server slower than the budget is answered within it), and ends
        by `deadline` at the latest (a call made again on another server has what was left);
        generation wants about `max_tokens` (0: a prefetch, under PREFETCH_MIN_S at least)."""
        budget = self.client.timeout_s
        self._prefetching = max_tokens == 0  # the engine's prefetch: its own, longer budget
        if self._prefetching:
            budget = max(PREFETCH_MIN_S, PREFETCH_BUDGETS * budget)
        self._deadline = time.monotonic() + budget - min(ANSWER_RESERVE_S, budget / 5)
        if deadline is not None:
            self._deadline = min(self._deadline, deadline)
        self._cancel = cancel
        self._predict = max(1, max_tokens)
        self._single_line = single_line
        self._prompt = ()
        self.slots.placed = False  # the server has placed this call's document (engine.remote.slots `slot_for`)

    def end(self) -> None:
        """The engine call is over: an open stream is closed, so the server stops decoding it.
        Events that have already arrived are read first: the final one names the slot used. A
        stream that is nearly done (and not cancelled) is left to finish instead (LEFTOVER_TOKENS),
        which keeps its connection alive for the next call."""
        with self._lock:
            walk = self._walk
            if walk is not None and walk.left <= LEFTOVER_TOKENS and not (self._cancel is not None and self._cancel.is_set()):
                walk.leftover = True
                self._cancel = None
                return
            if self._walk is not None:
                self._deadline = time.monotonic() + DRAIN_S
                try:
                    while self._walk is not None:
                        self._read(None, quiet=True)
                except (Cancelled, ModelServerError):
                    pass
            self._close_walk()
            self._cancel = None

    def remembers(self, tokens: tuple[int, ...]) -> bool:
        return tuple(tokens) in self.nodes

    def logits_after(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> np.ndarray:
        """A dense row of log-probabilities after `tokens`: exact where the server listed them,
        the unlisted mass spread evenly below the N-th elsewhere (so argmax, top-k sampling and
        a log-sum-exp of about 0 behave as on a full row). Read from memory, from the open stream,
        or from a new streamed request that goes on greedily from there."""
        key = tuple(tokens)
        with self._lock:
            row = self.nodes.dense_row(key)
            if row is not None:
                return row
            if key not in self.nodes:
                self._advance_to(key, cancel)
            if key not in self.nodes:
                self.query(key, predict=self._predict + GENERATION_SLACK, cancel=cancel, until_free=False)
                self._advance_to(key, cancel)
            node = self.nodes.peek(key)
            if node is None:
                raise self.client.protocol("the stream ended before its first token")
            return self.nodes.build_dense(key, node)

    def rows_along(self, context: tuple[int, ...], draft: tuple[int, ...], cancel: threading.Event | None = None) -> None:
        """Drafts buy nothing here (the server decodes one token per step either way)."""
        self.logits_after(context, cancel)

    def prepare(self, tokens: tuple[int, ...], required: bytes, cancel: threading.Event | None = None, exact: bool = True) -> None:
        """The keystroke's first step: with a required prefix, whatever the search on what is
        known asks for first (nothing when that already proves its choice); without, the row
        after the prompt. Per-step masking (`exact` False) is the server's own grammar: its
        greedy pick is the best consistent token, so the sampler's pick on these rows follows it."""
        self._prompt = tuple(tokens)
        if not required:
            self.logits_after(tokens, cancel)
            return
        if not exact:
            with self._lock:
                try:
                    self.query(tuple(tokens), len(required) + self._predict + GENERATION_SLACK, cancel, literal=required)
                except Inexpressible:
                    self.fallbacks.append("inexpressible")
                    self.logits_after(tokens, cancel)
            return
        with self._lock:
            if self.nodes.node(tuple(tokens)) is None:  # the prompt's own row: its stream goes on into the suggestion
                BoundedRows(self, tokens, required, cancel, budget=1).expand(())

    def covering_rows(self, prompt: tuple[int, ...], required: bytes, cancel: threading.Event | None, budget: int) -> BoundedRows:
        """The search's rows, with what proving its choice needs asked for first, all of it in one
        request where it can be (engine.remote.batch)."""
        rows = BoundedRows(self, prompt, required, cancel, budget)
        with self._lock:
            prove(rows)
        return rows

    def prefill(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> None:
        """Prefetch: the server decodes the prompt into its slot (`n_predict: 0`) and nothing else.
        A decode still running for this document (a `_Fill`) is waited on first; one for another
        document is given up. A timeout or a cancel leaves this one running for the next call."""
        key = tuple(tokens)
        with self._lock:
            self.settle_stream()
            self.reap()
            fill = self._fill
            if fill is not None:
                if common_prefix_length(fill.context, key) >= SLOT_SHARE * len(fill.context):
                    self._await_fill(cancel)
                    slot, warm = self.slots.slot_for(key)
                    if slot >= 0 and self.slots.cached_in(slot, warm, key) >= len(key) - 1:
                        return  # what was running was this prompt (all but its last token)
                else:
                    self._detach_fill()  # another document needs the client
            slot, warm = self.slots.slot_for(key)
            if slot >= 0 and warm and self.slots.cached_in(slot, warm, key) >= len(key) - 1:
                # The slot holds it (typing inside a word leaves the prompt as it was): nothing to
                # decode, as in-process. Asked anyway, the request was one round trip per keystroke
                # that the keystroke's own request, cancelling it, then waited for.
                return
            # All but the last token: the request that follows then decodes that one alone.
            start = key[:-1] if len(key) > 1 and self.slots.cached_in(slot, warm, key) < len(key) - 1 else key
            expected = self.slots.expect(slot, warm, start)
            body = self._body(start, 0, slot, warm)
            body["stream"] = False
            pending = self.client.start("/completion", body, self._deadline, cancel.is_set if cancel else None)
            self._fill = _Fill(start, pending, slot, expected)
            self._await_fill(cancel)

    @property
    def filling(self) -> bool:
        """A prompt decode is still running on the server for us (it outlasted a budget)."""
        return self._fill is not None

    def _await_fill(self, cancel: threading.Event | None) -> None:
        """Wait for the running prefill within this call's budget; it stays open on a timeout or
        a cancel (except a prefetch's own timeout: then it is given up)."""
        fill = self._fill
        try:
            answer = fill.pending.wait(self._deadline, cancel.is_set if cancel else None)
        except StreamCancelled:
            raise Cancelled() from None
        except ModelServerError as error:
            if error.kind != "timeout" or self._prefetching or fill.pending.closed:
                self._drop_fill()
            raise
        self._fill = None
        self.last_fill_s = time.monotonic() - fill.pending.started
        if not isinstance(answer, dict):
            raise self.client.protocol("a prefetch answer that is not an object")
        self.slots.learn(fill.context, answer)
        self._note_timings(answer, fill.expected)

    def _drop_fill(self) -> None:
        """Give up the running prefill: the server stops it (decoded chunks stay in its slot, but
        which ones is not known, so neither is what the slot holds)."""
        fill, self._fill = self._fill, None
        if fill is not None:
            self._give_up(fill)

    def _give_up(self, fill: _Fill) -> None:
        fill.pending.close()
        self.slots.give_up(fill.slot, fill.context)

    def _detach_fill(self) -> None:
        """Leave the running prefill to finish while another document is served. Given up, it was
        decoded anyway (llama-server notices a closed connection only between batches, and a
        document's prompt is one or two), but the client no longer knew what its slot held, so the
        document's next request decoded it all again from position 0 (seen in the team benchmark:
        9 given up in the first second of 4 users opening 3 documents each). Its answer, read by
        `reap` when it has come, names the slot that holds it."""
        fill, self._fill = self._fill, None
        if fill is None:
            return
        if len(self._detached) >= DETACHED:
            self._give_up(self._detached.pop(0))
        self._detached.append(fill)

    def reap(self) -> None:
        """Take in the answers of detached prefills that have come, without waiting for the others.
        An answer names the slot holding its prompt, as a prefill waited on does; its decode is
        counted where it was asked for (a prefetch), not in the call that reads it."""
        for fill in list(self._detached):
            if fill.pending.closed:
                self._detached.remove(fill)
                self._give_up(fill)
            elif fill.pending.ready():
                self._detached.remove(fill)
                try:
                    answer = fill.pending.wait(time.monotonic() + self.client.timeout_s)
                except (ModelServerError, StreamCancelled):
                    self._give_up(fill)
                    continue
                if not isinstance(answer, dict):
                    self._give_up(fill)
                    continue
                # A slot we have sent something else to since holds that now, whatever this answer says.
                if self.slots.holds_other(answer.get("id_slot"), fill.context) or not self.slots.learn(fill.context, answer, live=False):
                    self._give_up(fill)

    def forget(self) -> None:
        """Drop every distribution and what we know of the slots: the next prompt is decoded
        whole, from position 0, as in a fresh in-process sequence."""
        with self._lock:
            self._close_walk()
            self._drop_fill()
            while self._detached:
                self._give_up(self._detached.pop())
            self.slots.clear()
            self.nodes.clear()

    def close(self) -> None:
        self.forget()
        self.client.close()

    # --- what is known -------------------------------------------------------------------

    def node(self, key: tuple[int, ...]) -> Node | None:
        return self.nodes.node(key)

    def _record(self, key: tuple[int, ...], token: int, logprob: float, top: list[tuple[int, float]], cap: CapGroup | None, slack: float = 0.0) -> None:
        self.nodes.record(key, token, logprob, top, cap, slack)

    def drop(self, keys) -> None:
        """Forget the distributions after these token paths."""
        self.nodes.drop(keys)

    def bounded_row(self, node: Node, remaining: bytes, pessimistic: bool) -> np.ndarray:
        return self.nodes.bounded_row(node, remaining, pessimistic)

    def _slot_for(self, context: tuple[int, ...]) -> tuple[int, bool]:
        return self.slots.slot_for(context)

    def _cached_in(self, slot: int, warm: bool, context: tuple[int, ...]) -> int:
        return self.slots.cached_in(slot, warm, context)

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
        elif isinstance(progress, dict) and isinstance(progress.get("total"), int) and isinstance(progress.get("cache"), int):
            self.decoded += max(0, progress["total"] - progress["cache"])
            reused = progress["cache"]
        self.slots.reused(expected, reused)

    def _body(self, context: tuple[int, ...], predict: int, slot: int, warm: bool, line_stop: bool = True) -> dict:
        self.slots.claim(slot, context)
        body = {
            "prompt": list(context),
            "n_predict": predict,
            "cache_prompt": warm,
            "id_slot": slot,
            "temperature": 0.0,
            "samplers": ["temperature"],
            "return_tokens": True,
            # The final answer, trimmed to what is read of it (which slot, that it stopped, and a
            # prefill's timings). Untrimmed it restates the whole prompt's text, the generated
            # text and tokens and every generation setting: kilobytes per request, for nothing.
            "response_fields": list(FINAL_FIELDS),
        }
        if predict:
            body["n_probs"] = self.n_probs
            body["stream"] = True
            # What the server reused comes in the stream's first progress event (a few hundred
            # bytes per request) rather than timings on every token event (as many per token).
            body["return_progress"] = True
            if self._single_line and line_stop:
                body["stop"] = ["\n", "\r"]
        return body

    def query(
        self,
        context: tuple[int, ...],
        predict: int,
        cancel: threading.Event | None,
        forced: Seq[int] = (),
        literal: bytes | None = None,
        ban: Seq[int] = (),
        until_free: bool = True,
        exclude: frozenset[int] = frozenset(),
        listed: int | None = None,
    ) -> None:
        """One streamed request from `context`: the grammar forces `forced`, then `literal`,
        then anything; `ban` are banned by logit_bias (their values are still reported), so the
        first free token is the best *covering* token; `exclude` are banned too, and the first
        free token bounds every consistent token but them. Reads until the forced part is through
        (or, with until_free False, one event); the stream then stays open for generation to read on.
        `listed`: tokens listed per event, if not `n_probs`."""
        self.settle_stream()
        self.reap()
        # What the server decodes as its prompt, and how: the request's prompt (in the same
        # chunks as in-process, its last token alone: engine.local.llama), then every token past
        # it forced one by one, as the in-process engine decodes them (engine.local.kv `prepare`).
        start = context
        prompt = self._prompt
        if prompt and len(context) > len(prompt) and context[: len(prompt)] == prompt:
            # Past the prompt, what the slot already holds (a branch asked before, the path of a
            # stream) is its prompt too: each of those tokens was decoded alone, and only the last
            # is decoded again (alone); the rest are forced one by one. Forced from the prompt on,
            # a suggestion's request restated the covering's rows: 3 kB an event for rows known.
            slot, warm = self.slots.slot_for(prompt)
            held = self.slots.cached_in(slot, warm, context) if slot >= 0 and warm else 0
            keep = max(len(prompt), min(held, len(context)))
            start, forced = context[:keep], context[keep:] + tuple(forced)
        slot, warm = self.slots.slot_for(start)
        if (slot, warm) == (-1, False) or self._fill is not None or len(start) - self.slots.cached_in(slot, warm, start) > PREFILL_TAIL:
            # A new document: a stream's token events do not name their slot (only its last
            # event does, which a closed stream never sends), so a prefetch decodes it first and
            # its answer names the slot; every later request of the document then names it and
            # reads KV computed once, in the same ubatches as in-process. A long new tail (or a
            # decode still running) goes the same way, so a slow decode is kept (`_Fill`).
            self.prefill(start, cancel)
            slot, warm = self.slots.slot_for(start)
        if len(start) > 1 and self.slots.cached_in(slot, warm, start) < len(start) - 1:
            start, forced = start[:-1], (start[-1],) + tuple(forced)
        # A single-line stream stops at a line break, but not at one it is made to write: a
        # forced token past a line break (`next_line`: the line ended at once) would stop it there.
        line_stop = not any(b in self.vocab.pieces[t] for t in forced for b in (b"\n", b"\r"))
        line_stop = line_stop and not (literal and (b"\n" in literal or b"\r" in literal))
        expected = self.slots.expect(slot, warm, start)
        body = self._body(start, predict + len(context) - len(start), slot, warm, line_stop)
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
            stream = self.client.stream("/completion", body, self._deadline, cancel.is_set if cancel else None)
        except StreamCancelled:
            raise Cancelled() from None
        self._held = start
        self._walk = _Walk(
            stream, start, list(forced), literal if literal else None, bool(ban), slot=body["id_slot"],
            n_predict=body["n_predict"], excluded=frozenset(exclude), expected=expected,
        )
        if not until_free:
            return
        while self._walk is not None and (self._walk.forced or self._walk.literal):
            self._read(cancel)

    def _advance_to(self, key: tuple[int, ...], cancel: threading.Event | None) -> None:
        """Read the open stream while it walks toward `key`."""
        while key not in self.nodes and self._walk is not None:
            context = self._walk.context
            if len(context) > len(key) or key[: len(context)] != context:
                return
            self._read(cancel)

    def _read(self, cancel: threading.Event | None, quiet: bool = False) -> None:
        """One token event of the open stream: record its distribution and move on."""
        walk = self._walk
        walk.stream.set_limits(self._deadline if self._deadline is not None else time.monotonic() + self.client.timeout_s, cancel.is_set if cancel else None)
        while True:
            try:
                event = walk.stream.next_event(quiet)
            except StreamCancelled:
                self._walk = None
                raise Cancelled() from None
            except ModelServerError:
                self._walk = None
                raise
            if event is None:
                self._walk = None
                return
            if walk.first and ("timings" in event or "prompt_progress" in event):
                walk.first = False
                self._note_timings(event, walk.expected)
            if walk.slot < 0 and self.slots.learn(walk.context, event):
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
            self._close_walk()
            return
        cap = None
        if walk.forced:
            if token != walk.forced[0]:
                self._close_walk()
                raise self.client.protocol("a grammar-forced token was not the one sampled")
            walk.forced.pop(0)
        elif walk.literal:
            cap = (walk.cover_cap, walk.literal, walk.excluded)
            walk.cover_cap, walk.excluded = False, frozenset()
            piece = self.vocab.pieces[token]
            if walk.literal.startswith(piece) and piece:
                walk.literal = walk.literal[len(piece) :]
            elif piece.startswith(walk.literal):
                walk.literal = None
            else:  # a token the grammar took for text (a special token's name): no cap, stop here
                self.nodes.record(walk.context, token, logprob, top, None)
                self._close_walk()
                return
        self.nodes.record(walk.context, token, logprob, top, cap)
        walk.context = walk.context + (token,)
        self._held = walk.context
        self.slots.note_content(walk.slot, walk.context)
        if self.vocab.eog[token]:
            # Nothing follows but the final event: read later (`settle_stream`, `end`), not closed,
            # so the connection serves the next request.
            walk.n_predict = walk.seen

    def parse_probs(self, probs) -> tuple[int, float, list[tuple[int, float]]]:
        try:
            entry = probs[0]
            token = int(entry["id"])
            logprob = float(entry["logprob"])
            top = [(int(e["id"]), float(e["logprob"])) for e in entry["top_logprobs"]]
        except (KeyError, TypeError, ValueError, IndexError):
            raise self.client.protocol("a token event without id, logprob and top_logprobs") from None
        size = self.vocab.size
        if not 0 <= token < size or any(not 0 <= t < size for t, _ in top) or not all(math.isfinite(v) and v <= 1e-3 for v in [logprob] + [lp for _, lp in top]):
            raise self.client.protocol("a token id or log-probability out of range")
        return token, min(0.0, logprob), [(t, min(0.0, lp)) for t, lp in top]

    def settle_stream(self, drain: bool = False) -> None:
        """Before a new request: a stream left over from an earlier call, or one with at most
        LEFTOVER_TOKENS to go, is read to its end (its rows are kept, its connection goes back to
        the pool); so is any stream when `drain` (its rows are most often the suggestion's own),
        within the call's budget. Any other open stream is closed, which stops the server
        decoding it, and costs a new connection for the next request."""
        walk = self._walk
        if walk is not None and (walk.leftover or drain or walk.left <= LEFTOVER_TOKENS):
            saved = self._deadline
            if self._deadline is None:
                self._deadline = time.monotonic() + self.client.timeout_s
            try:
                while self._walk is not None:
                    self._read(self._cancel, quiet=True)
            except (Cancelled, ModelServerError):
                pass
            finally:
                self._deadline = saved
        self._close_walk()

    def close_stream(self) -> None:
        """Close an open stream (the server stops decoding it)."""
        self._close_walk()

    def _close_walk(self) -> None:
        if self._walk is not None:
            self._walk.stream.close()
            self._walk = None
