"""KV reuse: decode only what the cache does not already hold (the longest common prefix is kept).

The cache knows which tokens its KV holds. Asked for the logits after a token sequence, it keeps
the longest common prefix, removes the rest, and decodes only the new tail. Logits rows are also
remembered by the exact token sequence that produced them (a small LRU), so an unchanged prompt,
or a covering branch or suggestion already computed on an earlier keystroke, decodes nothing.

Prompt work is never thrown away: a decode cancelled between chunks keeps the chunks it finished,
and the next request (or prefetch) resumes from them. A prefetch stopped mid-prompt is finished,
up to the chunk where they part, by the next decode that shares at least half of it, as
llama-server finishes a prefill its client stopped waiting for: the prompt's ubatches then do not
depend on when the request came, and both backends compute the same numbers (`_finish_stopped`).

Several documents stay decoded: the context has several sequences (each a whole context). One is
live. A prompt moves to the sequence that shares clearly more with it, if there is one. Else a
prompt that would cut the live sequence back by many tokens, and shares less with it than it must
decode anyway (another document, even one with the same licence header), moves to an empty or the
least recently used sequence, so the displaced prompt stays decoded for when the user comes back;
moving then costs this request at most twice its decode. A prompt that is mostly what the live
sequence holds stays (the same document with the cursor further up, or edited there: moving would
decode all of it cold).

Why sequences and not llama.cpp's per-sequence state save/restore (measured on the default
model): a saved state leaves out sliding-window cells older than the window, so a restored prompt
could only be extended, never cut back; restoring the whole context's state instead changed
logits by up to 1.9 past the window; a switch between sequences copies nothing and any prefix is
reused exactly.

A failed decode or KV removal clears the cache instead of trusting uncertain memory.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engine.backend import Cancelled, PromptSpeed, Traffic
from engine.core.path_rows import PathRows
from engine.core.placement import SLOT_SHARE, common_prefix_length, kept, placement

__all__ = ["Decoded", "Decoder", "KvCache"]

# Rows remembered per call: at least its token budget and this many more (the covering branches,
# drafts and alternatives), up to ROWS_MAX. Why: a multi-line suggestion generates 48 tokens; with
# 48 rows, the next letter typed along it found the prompt's own row evicted and generated all of it
# again (1.5 s a keystroke on the 0.5B at 2 threads, measured through the server). A row is the
# vocabulary in float32 (0.6 MB on Qwen2.5-Coder, 1 MB on Gemma 3): 80 rows at the default
# multi-line budget.
ROWS_SLACK, ROWS_MAX = 32, 160


@dataclass(frozen=True)
class Decoded:
    """What a backend decode did: `count` tokens are now in KV; `rows` (one per output, the last
    `outputs` tokens in order) is None when the decode was cancelled between chunks."""

    count: int
    rows: np.ndarray | None


class Decoder(Protocol):
    """The llama context as the cache uses it (engine.local.llama.LlamaContext)."""

    n_ctx: int
    sequences: int
    chunk_tokens: int  # a prompt is decoded in chunks of this many tokens from where it starts

    def decode(
        self, tokens: Sequence[int], start: int, cancelled: Callable[[], bool], outputs: int = 1, seq: int = 0
    ) -> Decoded: ...

    def remove_from(self, position: int, seq: int = 0) -> bool: ...

    def clear(self) -> None: ...


class KvCache:
    """The in-process engine.backend `Backend`: rows by token path over one llama context."""

    networked = False
    answered = None  # no server answers

    def __init__(self, backend: Decoder, remembered_rows: int = 48) -> None:
        self._backend = backend
        self._seqs: list[list[int]] = [[] for _ in range(backend.sequences)]  # tokens per sequence
        self._live = 0
        self._recent: list[int] = list(range(backend.sequences))  # least recently used first
        self._held = self._seqs[0]  # the live sequence: tokens in KV at positions 0..len-1
        self._rows: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self._capacity = remembered_rows
        self._lock = threading.Lock()  # guards the sequences, _rows and the backend
        self.decoded = 0  # tokens decoded since construction (for per-request accounting)
        self.speed = PromptSpeed()
        self.switches = 0  # moves to a sequence that already held a shared prefix
        self._stopped: tuple[int, tuple[int, ...]] | None = None  # (sequence, prompt) of a prefetch stopped mid-prompt

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def kept_prompts(self) -> int:
        return len(self._seqs)

    def cached_prefix(self, tokens: tuple[int, ...]) -> int:
        with self._lock:
            return max(common_prefix_length(held, tokens) for held in self._seqs)

    def sequences(self) -> list[int]:
        """Tokens held per sequence, the live one first (diagnostics)."""
        with self._lock:
            return [len(self._held)] + [len(t) for i, t in enumerate(self._seqs) if i != self._live]

    def remembers(self, tokens: tuple[int, ...]) -> bool:
        with self._lock:
            return tokens in self._rows

    # The surface the engine uses (engine.backend), shared with the remote backend (engine.remote.rows.RemoteRows).

    fallbacks: tuple[str, ...] = ()  # every covering is proven here

    def route(self, key: str) -> None:
        """One process, one model: nothing to route."""

    def recover(self, error: BaseException) -> bool:
        return False  # nothing to fail over to

    def traffic(self) -> Traffic:
        return Traffic()

    _alone_from: int | None = None  # tokens from here on (past the prompt) are decoded one by one

    def begin(self, cancel: threading.Event | None, max_tokens: int = 16, single_line: bool = True) -> None:
        """A new engine call: no prompt yet. The rows remembered grow to hold the call's path."""
        self._alone_from = None
        self._capacity = max(self._capacity, min(max_tokens + ROWS_SLACK, ROWS_MAX))

    def end(self) -> None:
        """The engine call is over."""
        self._alone_from = None

    def prepare(
        self, tokens: tuple[int, ...], required: bytes, cancel: threading.Event | None = None, exact: bool = True
    ) -> None:
        """Decode the prompt (the required prefix is resolved by the covering search after).
        Tokens past the prompt (covering branches, the covering, generation) are then decoded
        one by one, as llama-server decodes what it generates, so both backends compute the
        same numbers (engine.remote.rows)."""
        self._alone_from = None
        self.logits_after(tokens, cancel)
        self._alone_from = len(tokens)

    def prefill(self, tokens: tuple[int, ...], cancel: threading.Event | None = None, beside: bool = False) -> None:
        """Prefetch: decode the prompt and nothing else (`beside`: in another sequence than the
        live one, unless that holds a prefix of it)."""
        with self._lock:
            self._finish_stopped(tokens, cancel)
            if tokens in self._rows:
                return
            decoded = self.decoded
            try:
                rows = self._decode_to(tokens, 1, cancel, beside)
            except Cancelled:
                if self.decoded > decoded and self._held == list(tokens[: len(self._held)]):
                    self._stopped = (self._live, tokens)
                raise
            self._remember(tokens, rows[0])

    def covering_rows(
        self, prompt: tuple[int, ...], required: bytes, cancel: threading.Event | None, budget: int
    ) -> PathRows:
        return PathRows(self, prompt, cancel or threading.Event())

    def logits_after(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> np.ndarray:
        """The logits row for the token after `tokens` (read-only: the row may be shared).

        Raises Cancelled when `cancel` is set before or between decode chunks; the chunks
        decoded by then stay in the cache."""
        with self._lock:
            self._finish_stopped(tokens, cancel)
            row = self._rows.get(tokens)
            if row is not None:
                self._rows.move_to_end(tokens)
                return row
            rows = self._decode_to(tokens, 1, cancel)
            return self._remember(tokens, rows[0])

    def rows_along(
        self, tokens: tuple[int, ...], draft: tuple[int, ...], cancel: threading.Event | None = None
    ) -> None:
        """Remember the rows after `tokens` and after each prefix of `draft` behind it, decoded
        in one batch (speculative drafts: a sampler then finds them as it walks the draft).

        The batch is the last of `tokens` and the draft only. When KV lacks more of `tokens`
        (after a covering whose tokens were not decoded), they are decoded alone, in
        the batch plain decoding would use: a longer batch would round differently (see
        engine.core.speculative) and could change a greedy token."""
        with self._lock:
            self._finish_stopped(tokens, cancel)
            if common_prefix_length(self._held, tokens) < len(tokens) - 1:
                self._remember(tokens, self._decode_to(tokens, 1, cancel)[0])
                return
            rows = self._decode_to(tokens + draft, len(draft) + 1, cancel)
            for i, row in enumerate(rows):
                self._remember(tokens + draft[:i], row)

    def _decode_to(
        self, tokens: tuple[int, ...], outputs: int, cancel: threading.Event | None, beside: bool = False
    ) -> np.ndarray:
        """Bring KV to hold `tokens`, decoding at least the last `outputs` of them; their rows.
        `beside`: see `prefill`."""
        if not tokens:  # there is no "row after nothing"; the cut below would go negative
            raise ValueError("no tokens to decode: a prompt needs at least one token")
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        self._switch_for(tokens, beside)
        keep = min(common_prefix_length(self._held, tokens), len(tokens) - outputs)
        if outputs == 1:  # a prompt (or a token past it): from 0 when it shares under a chunk (`kept`)
            prompt = len(tokens) if self._alone_from is None else self._alone_from
            keep = kept(keep, prompt, self._backend.chunk_tokens)
        keep = self._cut(keep)
        tail = tokens[keep:]
        cancelled = cancel.is_set if cancel else (lambda: False)
        parts = [tail]
        if outputs == 1 and self._alone_from is not None and keep + len(tail) > self._alone_from + 1:
            cut = max(0, self._alone_from - keep)
            parts = ([tail[:cut]] if cut else []) + [tail[i : i + 1] for i in range(cut, len(tail))]
        for i, part in enumerate(parts):
            if i and cancelled():
                raise Cancelled()
            started = time.perf_counter()
            try:
                done = self._backend.decode(part, len(self._held), cancelled, outputs, self._live)
            except Exception:
                self._reset()
                raise
            if done.rows is not None:
                self.speed.note(done.count, (time.perf_counter() - started) * 1000)
            self._held.extend(part[: done.count])
            self.decoded += done.count
            if done.rows is None:  # cancelled between chunks: what was decoded stays for the next request
                raise Cancelled()
            rows: np.ndarray = done.rows
        return rows

    def _finish_stopped(self, tokens: tuple[int, ...], cancel: threading.Event | None) -> None:
        """Before a decode of `tokens`: when they share at least SLOT_SHARE of the prefetch stopped
        mid-prompt, and more than it decoded, go on with that prefetch in its sequence, in its
        chunks, to the end of the chunk where the two part (and one token alone, as a decode's
        last): the shared tokens' KV is then what the whole prefetch would have left; later chunks
        cannot change it. Why: llama-server finishes a prefill whatever its client does, and the
        remote backend waits for it by the same rule (engine.remote.rows `prefill`); decoded from
        where the request stopped it instead, the request's last chunk was cut elsewhere (a case
        of the unseen check read "is:" in-process and "is_writable" remotely). A cancel stops it
        between chunks and leaves it to the next decode."""
        stopped, self._stopped = self._stopped, None
        if stopped is None:
            return
        seq, prompt = stopped
        held = self._seqs[seq]
        if not (len(held) < len(prompt) and held == list(prompt[: len(held)])):
            return  # decoded or cut back since
        shared = common_prefix_length(prompt, tokens)
        if shared < SLOT_SHARE * len(prompt):
            self._stopped = stopped
            return
        if shared <= len(held):
            return  # the shared tokens were decoded in the prefetch's own chunks
        chunk = self._backend.chunk_tokens
        end = len(held) + -(-(shared - len(held)) // chunk) * chunk
        run = prompt[: end + 1]
        self._use(seq)
        alone_from, self._alone_from = self._alone_from, None
        try:
            self._remember(run, self._decode_to(run, 1, cancel)[0])
        except Cancelled:
            self._stopped = stopped
            raise
        finally:
            self._alone_from = alone_from

    def _switch_for(self, tokens: tuple[int, ...], beside: bool = False) -> None:
        """Pick the sequence `tokens` decode into (see the module docstring and `placement`);
        `beside`: not the live one if that would be cut back."""
        others = [(i, self._seqs[i]) for i in range(len(self._seqs)) if i != self._live]
        where, target = placement(self._held, others, tokens, beside)
        if where == "move":
            self._use(target)
            self.switches += 1
        elif where == "fresh":
            target = next((i for i in self._recent if not self._seqs[i]), None)
            if target is None:
                target = next(i for i in self._recent if i != self._live)
            self._use(target)
            self._cut(0)

    def _use(self, seq: int) -> None:
        self._live = seq
        self._held = self._seqs[seq]
        self._recent.remove(seq)
        self._recent.append(seq)

    def _cut(self, keep: int) -> int:
        """Remove the live sequence's KV from position `keep` on; returns what is kept (0 after a
        refused removal, which clears the whole cache)."""
        if keep < len(self._held):
            if not self._backend.remove_from(keep, self._live):
                self._reset()
                return 0
            del self._held[keep:]
        return keep

    def _remember(self, tokens: tuple[int, ...], row: np.ndarray) -> np.ndarray:
        row.flags.writeable = False
        self._rows[tokens] = row
        self._rows.move_to_end(tokens)
        while len(self._rows) > self._capacity:
            self._rows.popitem(last=False)
        return row

    def _reset(self) -> None:
        self._stopped = None
        self._backend.clear()
        for held in self._seqs:
            held.clear()
        self._rows.clear()

    def forget(self) -> None:
        """Drop everything (e.g. after the model's context is replaced)."""
        with self._lock:
            self._reset()
