"""The engine: a tokenizer, a backend (engine.backend), and `complete()` for a whole request.

`complete` tokenizes the prompt (reusing the last tokenization when the text is unchanged),
windows it to the context (in the FIM layout of engine.core.prompt when the model has FIM tokens and
the request a suffix), runs a `Sequence` and turns its pieces into text: UTF-8 decoded
incrementally, cut at the first stop sequence or line break, never returned when cancelled. With
document-word candidates, engine.core.word_choice may choose another word, and the completion is made
again with it as the required prefix. `prefetch` decodes a request's prompt and nothing else.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from engine.backend import Backend, Cancelled, Window, affinity_key
from engine.core.generation import Generated, generate
from engine.core.prompt import PSM_LINE
from engine.core.sequence import Sequence
from engine.core.speculative import DraftConfig, PromptLookup
from engine.core.vocab import VocabIndex
from engine.local.llama import LlamaModel
from engine.local.load import open_local
from engine.prompt_window import Cut, PromptWindow
from engine.readings import Readings, typed_word
from engine.remote.connect import connect
from engine.types import (
    COLD_EXTRA_MS,
    LEAN_MIN_TOKENS,
    MIN_PROMPT_TOKENS,
    Completion,
    CompletionRequest,
    DecodeStats,
    EngineConfig,
    ModelServerError,
    Prefetched,
    SamplingConfig,
)

# A remote call that failed may be made again at once when its backend says so (engine.remote.servers: on
# the next server; behind a balancer: once through it, and once with the server it moved to).
RETRIES = 2
UNTIMED_MS_PER_TOKEN = COLD_EXTRA_MS / LEAN_MIN_TOKENS  # before the backend has timed a prompt
KEYSTROKE_TOKENS = 8  # at most this many missing, a prompt counts as decoded (a keystroke's own tokens)
T = TypeVar("T")


class Engine(PromptWindow):
    """Not thread-safe: run `complete` on one worker thread. To stop it from another thread, set
    the `cancel` event passed to `complete` (each request has its own, so a cancel can never
    reach the request that follows it); it returns within one decode step."""

    def __init__(
        self,
        model: LlamaModel,
        context: Window,
        vocab: VocabIndex,
        config: EngineConfig,
        backend: Backend,
        model_id: str = "",
    ):
        """`model`: the tokenizer (a vocabulary-only model when a server runs the weights);
        `context`: what sets the window (the llama context; a server backend is its own);
        `backend`: where the distributions come from (engine.backend). `model_id`: what makes the
        distributions (engine.model_files.model_id: a catalogue name or "sha256:<hex>")."""
        super().__init__(model, context, vocab, backend.speed)
        self.config = config
        self.model_path = model.path
        self.model_id = model_id
        self.backend = backend
        self.drafts = DraftConfig(max_draft=config.draft_tokens)
        self._draft_line_stops: list[bool] | None = None  # built on first use (a pass over the vocabulary)
        self._readings = Readings(backend, vocab, self._spell)

    @classmethod
    def load(cls, config: EngineConfig = EngineConfig()) -> Engine:
        """Load the model: `config.model_path` is a catalogue name or a path (None: the default).
        Raises ModelLoadError.
        With `config.model_server` the model runs on that llama-server (engine.remote.connect);
        only the vocabulary is read here. Raises ModelServerError then."""
        if config.model_server:
            model, remote, vocab, model_id = connect(config, MIN_PROMPT_TOKENS)
            return cls(model, remote, vocab, config, remote, model_id=model_id)
        model, context, vocab, kv, model_id = open_local(config)
        return cls(model, context, vocab, config, kv, model_id=model_id)

    @property
    def kv(self) -> Backend:
        """The backend, under the name its first callers knew it by."""
        return self.backend

    def sequence(self, sampling: SamplingConfig = SamplingConfig(), cancel: threading.Event | None = None) -> Sequence:
        """A sequence (decode a prompt, then sample pieces) over this engine's backend, for callers that stream."""
        return Sequence(self.backend, self.vocab, sampling, cancel, self._drafter(sampling))

    def _drafter(self, sampling: SamplingConfig) -> PromptLookup | None:
        """Prompt-lookup drafts when enabled. A draft ends after a token that ends generation or,
        in single-line mode, breaks the line (nothing after it would be used)."""
        if self.drafts.max_draft <= 0:
            return None
        if not sampling.single_line:
            return PromptLookup(self.drafts, self.vocab.eog)
        if self._draft_line_stops is None:
            breaks = [b"\n" in piece or b"\r" in piece for piece in self.vocab.pieces]
            self._draft_line_stops = [bool(eog) or brk for eog, brk in zip(self.vocab.eog, breaks)]
        return PromptLookup(self.drafts, self._draft_line_stops)

    @staticmethod
    def _reserve(request: CompletionRequest) -> int:
        """Context tokens kept free after the prompt: the budget, the required prefix, a word."""
        longest = max((len(c.encode("utf-8", "replace")) for c in request.candidates), default=0)
        return request.max_tokens + len(request.required.encode("utf-8", "replace")) + longest + 1

    def _retrying(self, cancel: threading.Event | None, max_tokens: int, single_line: bool, body: Callable[[], T]) -> T:
        """`body` inside one KV session; a model server that failed mid-call and is recovered
        (another server of a list, or the same one reconnected) gets the call again, up to RETRIES
        times. The session ends before recovering, so the retry starts from the cache's state."""
        for attempt in range(RETRIES + 1):
            self.backend.begin(cancel, max_tokens, single_line)
            try:
                return body()
            except ModelServerError as error:
                failed = error
            finally:
                self.backend.end()
            if attempt == RETRIES or not self.backend.recover(failed):
                raise failed
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def prefetch(self, request: CompletionRequest, cancel: threading.Event | None = None) -> Prefetched:
        """Decode the prompt `request` would need, and nothing else (no covering, no sampling),
        so a later `complete` with the same prompt starts warm. Low priority by contract: the
        caller cancels it for any real request; what it decoded by then stays in the KV cache."""
        started = time.perf_counter()
        prompt = self.request_prompt(request)
        before = self.backend.decoded
        self._route(request)

        def decode() -> bool:
            try:
                first = self.first_prompt(request, prompt)
                if first is not None:  # what a request made now would read, then the whole prompt
                    self.backend.prefill(first[1], cancel)
                if prompt:  # see `complete` for an empty one
                    self.backend.prefill(prompt, cancel, beside=first is not None)
                return True
            except Cancelled:
                return False

        done = self._retrying(cancel, 0, request.sampling.single_line, decode)
        ms = (time.perf_counter() - started) * 1000
        return Prefetched(len(prompt), self.backend.decoded - before, done, ms)

    def complete(self, request: CompletionRequest, cancel: threading.Event | None = None) -> Completion:
        """Raises ModelServerError when a remote server fails mid-request (the engine stays
        usable: the next call tries again)."""
        cancel = cancel or threading.Event()
        traffic = self._traffic()
        self._route(request)
        # A server stops a single-line stream at a line break itself; a `next_line` request whose
        # line ends at once asks for the rest again from there (one round trip more, only then).
        completion = self._retrying(
            cancel, request.max_tokens, request.sampling.single_line, lambda: self._complete(request, cancel)
        )
        after = self._traffic()
        stats = replace(
            completion.stats,
            round_trips=after[0] - traffic[0],
            bytes_sent=after[1] - traffic[1],
            bytes_received=after[2] - traffic[2],
            fallback=",".join(self.backend.fallbacks[traffic[3] :]) or None,
            server=self.backend.answered,
        )
        return replace(completion, stats=stats)

    def _hidden(
        self, request: CompletionRequest, prompt: tuple[int, ...], seq: Sequence
    ) -> Callable[[Generated], bool] | None:
        """`request.hidden` asked with the signals of the text so far (as `_complete` computes
        them after generation), or None when the request has no such check."""
        check = request.hidden
        if check is None:
            return None
        seen: list = []  # the coverings the signals read: known once the covering is chosen

        def hidden(gen: Generated) -> bool:
            if not seen:
                seen.append(self._readings.seen_alike(request, prompt, seq))
            return check(self.model_id or None, gen.text, self._readings.signals(request, seq, seq, gen, seen[0]))

        return hidden

    def _route(self, request: CompletionRequest) -> None:
        """Tell the backend which document this is (a server backend: the server it goes to, and
        the key a load balancer keeps it on one server by); the in-process cache has no use for it."""
        self.backend.route(affinity_key(request.document if request.document else request.prompt[:256]))

    def _traffic(self) -> tuple[int, int, int, int]:
        """(round trips, bytes sent, bytes received, fallbacks so far) of the backend."""
        t = self.backend.traffic()
        return t.round_trips, t.bytes_sent, t.bytes_received, len(self.backend.fallbacks)

    def request_prompt(self, request: CompletionRequest) -> tuple[int, ...]:
        """The whole prompt of `request`. Where no first answer can come before it (`answers_first`
        false: one kept prompt, e.g. a fixed slot on a model server; prefetch off) a short file's context is the "lean" one:
        what the request waits for is bounded in time (COLD_EXTRA_MS) either way."""
        return self.prompt_tokens(request, self._reserve(request), "whole" if self.answers_first(request) else "lean")

    def answers_first(self, request: CompletionRequest) -> bool:
        """A first answer may come from a cheaper prompt while the whole one decodes beside it."""
        return request.first_window > 0 and self.backend.kept_prompts >= 2

    def first_prompt(self, request: CompletionRequest, prompt: tuple[int, ...]) -> tuple[Cut, tuple[int, ...]] | None:
        """A first answer's prompt while `prompt` is not decoded, when the backend keeps another
        prompt beside it (the whole one then decodes into another sequence, by the prefetch the
        server sends after such an answer): "near", the text near the cursor alone, when more than
        twice `request.first_window` tokens are missing (a long file just opened: it answers after
        about 300 tokens, not 1,600); "lean", other files' text within what COLD_EXTRA_MS evaluate,
        when the rest of it would cost more (a short file, whose whole context is a few hundred
        tokens). A first prompt already decoded is kept until the whole one is, so the keystrokes
        in between decode what they type only. (Which, its tokens); None: `prompt` itself
        (docs/first-contact.md)."""
        if not self.answers_first(request):
            return None
        missing = self._missing(prompt)
        if missing <= KEYSTROKE_TOKENS:
            return None
        reserve, headers = self._reserve(request), self.headers  # `headers`: the whole prompt's, if it stays
        near = self.prompt_tokens(request, reserve, "near")
        if missing > 2 * request.first_window or self._missing(near) <= KEYSTROKE_TOKENS:
            return "near", near
        if request.context is not None:
            lean = self.prompt_tokens(request, reserve, "lean")
            left = self._missing(lean)
            rate = self.backend.speed.ms_per_token or UNTIMED_MS_PER_TOKEN
            if left <= KEYSTROKE_TOKENS or (missing - left) * rate > COLD_EXTRA_MS:
                return "lean", lean
        self.headers = headers
        return None

    def _missing(self, tokens: tuple[int, ...]) -> int:
        """Tokens of `tokens` no kept prompt holds: what decoding them would cost."""
        return len(tokens) - self.backend.cached_prefix(tokens)

    def _complete(self, request: CompletionRequest, cancel: threading.Event) -> Completion:
        started = time.perf_counter()
        required = request.required.encode("utf-8", "replace")
        prompt = self.request_prompt(request)
        first_prompt = self.first_prompt(request, prompt)
        prompt = prompt if first_prompt is None else first_prompt[1]
        if not prompt:
            # An empty text and a model that adds no BOS (e.g. Qwen2.5-Coder without FIM): the
            # model has nothing to condition on, so there is no suggestion rather than a guess.
            stats = DecodeStats(ms=(time.perf_counter() - started) * 1000, kv_tokens=self.backend.held)
            return Completion("", "empty", stats, required_satisfied=not required)
        decoded_before = self.backend.decoded
        seq = self.sequence(request.sampling, cancel)
        gen = Generated()
        covered = seq.decode_prompt(prompt, required, request.exact, request.max_cover_decodes)
        prompt_ms = (time.perf_counter() - started) * 1000
        if covered:
            gen = generate(seq, request, len(required), self.headers, self._hidden(request, prompt, seq))
        choice, lexicon_decodes = None, 0
        first, first_seq = seq.diagnostics(), seq  # the prompt's cost, paid by the first pass only
        if request.candidates and gen.reason != "cancelled" and seq.required_satisfied:
            choice, lexicon_decodes = self._readings.choose_word(prompt, request, gen.text, cancel)
            if choice is None and cancel.is_set():
                gen = replace(gen, reason="cancelled")
            elif choice is not None and choice.word != choice.base_word:
                typed = typed_word(request.required)
                chosen = replace(request, required=request.required[: len(request.required) - len(typed)] + choice.word)
                seq = self.sequence(request.sampling, cancel)
                gen = Generated()
                spelled = chosen.required.encode("utf-8", "replace")
                if seq.decode_prompt(prompt, spelled, request.exact, request.max_cover_decodes):
                    gen = generate(seq, chosen, len(required), self.headers)
        signals, alternatives, alternative_decodes, deferred = None, (), 0, False
        if gen.reason == "cancelled":
            gen = replace(gen, text="")  # never a stale suggestion
        elif seq.required_satisfied:
            seen = self._readings.seen_alike(request, prompt, first_seq)  # read by the signals and the alternatives'
            signals = self._readings.signals(request, first_seq, seq, gen, seen)
            if request.alternatives > 0:
                # Over the network every row is a round trip: they come from the rows the keystroke
                # already brought back. `alternatives_later` (answer first): from remembered rows only,
                # and the caller asks again for the rest, unless nothing was decoded (typed along a
                # suggestion: their rows are remembered from the keystroke that made it).
                later = request.alternatives_later or self.backend.networked
                alternatives, alternative_decodes = self._readings.alternatives(
                    request, prompt, first_seq, gen, signals, seen, 0 if later else None, cancel
                )
                new_rows = self.backend.decoded != decoded_before and not self.backend.networked
                deferred = request.alternatives_later and new_rows and len(alternatives) < request.alternatives
        diag = seq.diagnostics()
        again = choice is not None and choice.word != choice.base_word  # a second pass was made
        reused, decoded = first.reused_tokens, first.decoded_tokens + (diag.decoded_tokens if again else 0)
        if self.backend.networked:
            # Over the network every request restates the prompt, and the server evaluates what its
            # slot lacks in whichever request comes first (often the generation's, after the
            # covering was proven on remembered rows): so the call's prompt work is everything the
            # server reported evaluating during it (the remote backend counts prompt tokens only).
            decoded = self.backend.decoded - decoded_before
            reused = max(0, diag.prompt_tokens - decoded)
        stats = DecodeStats(
            prompt_tokens=diag.prompt_tokens,
            reused_tokens=reused,
            decoded_tokens=decoded,
            cover_decodes=first.cover_decodes + (diag.cover_decodes if again else 0),
            generated_tokens=gen.generated,
            kv_tokens=diag.kv_tokens,
            ms=(time.perf_counter() - started) * 1000,
            prompt_ms=prompt_ms,
            lexicon_decodes=lexicon_decodes,
            lexicon_changed=again,
            alternative_decodes=alternative_decodes,
            alternatives_deferred=deferred,
            fim=self.fim is not None and request.suffix is not None,
            fim_line=self.fim is not None and request.suffix is not None and request.fim_order == PSM_LINE,
            first_prompt=None if first_prompt is None else first_prompt[0],
        )
        return Completion(
            gen.text, gen.reason, stats, seq.required_satisfied, tuple(gen.logprobs), signals, alternatives
        )

    def close(self) -> None:
        self.backend.forget()
        self._context.close()
        self._model.close()
