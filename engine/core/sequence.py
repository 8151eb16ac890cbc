"""One autocomplete sequence: decode a prompt, then sample pieces.

`decode_prompt` brings the KV cache to the prompt (reusing what it holds) and, when a required
prefix is set, resolves it: the exact covering search picks the token path that spells it, or
per-step masking constrains each step. `sample_next` returns one piece at a time with the signals
a caller needs (end of generation, cancellation, the raw model's wish to stop, log-probability).
`cancel` is the one cross-thread call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from engine.backend import Backend, Cancelled
from engine.core.covering import Covering, CoveringSearch
from engine.core.path_rows import PathRows  # noqa: F401  (re-exported)
from engine.core.prefix import RequiredPrefix
from engine.core.sampler import Sampler, row_log_norm
from engine.core.speculative import PromptLookup
from engine.core.vocab import VocabIndex
from engine.types import SamplingConfig


@dataclass(frozen=True)
class SampleResult:
    token: int | None
    piece: bytes  # may end inside a UTF-8 character: accumulate bytes before decoding
    is_eos: bool = False
    was_cancelled: bool = False
    logprob: float | None = None  # raw-model log-probability of the token, when asked for
    forced: bool = False  # a token of the chosen covering (its probability is the covering's)


@dataclass(frozen=True)
class SequenceDiagnostics:
    """No text: token counts only."""

    prompt_tokens: int
    reused_tokens: int
    decoded_tokens: int
    cover_decodes: int
    kv_tokens: int


class Sequence:
    def __init__(
        self,
        kv: Backend,
        vocab: VocabIndex,
        sampling: SamplingConfig,
        cancel: threading.Event | None = None,
        drafter: PromptLookup | None = None,
    ) -> None:
        self._kv = kv
        self._drafter = drafter
        self._vocab = vocab
        self._sampler = Sampler(sampling, vocab.banned, vocab.free_ids)
        self._cancel = cancel or threading.Event()
        self._tokens: tuple[int, ...] = ()
        self._forced: list[int] = []  # the chosen covering, emitted before free sampling
        self._prefix = RequiredPrefix(vocab)
        self._diagnostics = SequenceDiagnostics(0, 0, 0, 0, 0)
        self.required_satisfied = True
        self.search: CoveringSearch | None = None  # the exact search of the last prompt (signals)
        self.covering: Covering | None = None  # the covering it chose

    def cancel(self) -> None:
        """Thread-safe and non-blocking: the running or next step returns was_cancelled."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def decode_prompt(
        self, tokens: tuple[int, ...], required: bytes = b"", exact: bool = True, max_cover_decodes: int = 8
    ) -> bool:
        """Bring KV to `tokens` and resolve the required prefix. False when cancelled."""
        decoded_before = self._kv.decoded
        self._tokens = tokens
        self._forced = []
        self._prefix.set(b"")
        self.required_satisfied = True
        self.search, self.covering = None, None
        cover_decodes = 0
        prompt_decoded = None
        try:
            self._kv.prepare(tokens, required, self._cancel, exact)
            prompt_decoded = self._kv.decoded - decoded_before
            if required and exact:
                rows = self._kv.covering_rows(tokens, required, self._cancel, max_cover_decodes)
                self.search = CoveringSearch(self._vocab, rows, max_cover_decodes, rows.normalised)
                covering = self.search.run(required, self._sampler)
                while covering is not None and rows.refine(covering):  # remote: prove the choice
                    self.search = CoveringSearch(self._vocab, rows, max_cover_decodes, rows.normalised)
                    covering = self.search.run(required, self._sampler)
                covering = self.covering = rows.settle(covering)
                self.search = rows.known_search(self.search, required)  # what signals and alternatives read
                cover_decodes = rows.decodes
                if covering is None:
                    self.required_satisfied = False  # nothing consistent: the constraint is dropped
                else:
                    self._forced = list(covering.path)
            elif required:
                self._prefix.set(required)
        except Cancelled:
            return False
        finally:
            if prompt_decoded is None:  # cancelled during the prompt itself
                prompt_decoded = self._kv.decoded - decoded_before
            self._diagnostics = SequenceDiagnostics(
                prompt_tokens=len(tokens),
                reused_tokens=max(0, len(tokens) - prompt_decoded),
                decoded_tokens=prompt_decoded,
                cover_decodes=cover_decodes,
                kv_tokens=self._kv.held,
            )
        return True

    def sample_next(self, want_logprob: bool = False, horizon: int = 1, free_logprob: bool = False) -> SampleResult:
        """The next piece. A forced covering token needs no logits unless a log-probability is asked.
        `horizon`: how many more tokens the caller may want (bounds a speculative draft).
        `free_logprob`: the log-probability of sampled (not forced) tokens only (no extra decode)."""
        if self._cancel.is_set():
            return SampleResult(None, b"", was_cancelled=True)
        forced = bool(self._forced)
        try:
            if forced:
                token = self._forced.pop(0)
                row = self._kv.logits_after(self._tokens, self._cancel) if want_logprob else None
            else:
                want_logprob = want_logprob or free_logprob
                if self._drafter is not None and horizon > 1 and not self._kv.remembers(self._tokens):
                    draft = self._drafter.propose(self._tokens, horizon - 1)
                    if draft:
                        self._kv.rows_along(self._tokens, draft, self._cancel)
                row = self._kv.logits_after(self._tokens, self._cancel)
                allowed = self._prefix.allowed()
                if self._prefix.dropped:
                    self.required_satisfied = False
                token = self._sampler.choose(row, self._tokens, allowed)
                self._prefix.consume(token)
        except Cancelled:
            return SampleResult(None, b"", was_cancelled=True)
        logprob = float(row[token]) - row_log_norm(row) if (want_logprob and row is not None) else None
        if self._vocab.eog[token]:
            return SampleResult(token, b"", is_eos=True, logprob=logprob, forced=forced)
        self._tokens = self._tokens + (token,)
        return SampleResult(token, self._vocab.pieces[token], logprob=logprob, forced=forced)

    def diagnostics(self) -> SequenceDiagnostics:
        return replace(self._diagnostics, kv_tokens=self._kv.held)
