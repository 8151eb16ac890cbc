"""The engine: one model, one context, one KV cache, and `complete()` for a whole request.

`complete` tokenizes the prompt (reusing the last tokenization when the text is unchanged),
windows it to the context (in the FIM layout of engine.prompt when the model has FIM tokens and
the request a suffix), runs a `Sequence` and turns its pieces into text: UTF-8 decoded
incrementally, cut at the first stop sequence or line break, never returned when cancelled. With
document-word candidates, engine.lexicon may choose another word, and the completion is made
again with it as the required prefix. `prefetch` decodes a request's prompt and nothing else.
"""

from __future__ import annotations

import codecs
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from engine.alternatives import CANDIDATES_PER_ALTERNATIVE, BudgetedRows, alternatives, first_tokens
from engine.kv import Cancelled, KvCache
from engine.lexicon import WordScorer, choose, first_word, is_word_char
from engine.llama_backend import RUNTIME, LlamaContext, LlamaModel, allocated_tokens
from engine.model_files import resolve
from engine.prompt import FIM_EXTRA_TOKENS, FimTokens, RepoTokens, context_tokens, layout
from engine.kv import PathRows
from engine.sequence import Sequence
from engine.signals import TOP as SIGNAL_TOP
from engine.signals import compute as compute_signals
from engine.speculative import DraftConfig, PromptLookup
from engine.stops import first_stop
from engine.types import (  # BudgetError is defined with the types so callers need not import llama_cpp
    COLD_EXTRA_TOKENS,
    COLD_SHARE,
    BudgetError,
    Completion,
    CompletionRequest,
    DecodeStats,
    EngineConfig,
    ModelLoadError,
    ModelServerError,
    Prefetched,
    RepoContext,
    SamplingConfig,
    Signals,
)
from engine.vocab import VocabIndex
from engine.vocab_cache import load_vocab

MIN_PROMPT_TOKENS = 64  # below this a context cannot hold a useful prompt beside the budget
CHARS_PER_CONTEXT_TOKEN = 8  # text kept before tokenizing: generous, the token window trims the rest
LINE_BREAKS = ("\n", "\r")
MIB = 1024 * 1024
MAX_REMEMBERED = 15  # sequences beyond the live one, whatever the budget
RIVALS = 16  # with nothing typed, the prompt row's first tokens looked at for the margin (engine.signals)
CONTEXT_SHARE = 2  # other files' text takes at most 1/CONTEXT_SHARE of the context window (and cold_cap)
# A remote call that failed may be made again at once when its backend says so (engine.multi: on
# the next server; behind a balancer: once through it, and once with the server it moved to).
RETRIES = 2
T = TypeVar("T")


@dataclass
class _Generated:
    """What `_generate` made: the text, why it stopped, and per sampled token (bytes, log-prob)."""

    text: str = ""
    reason: str = "cancelled"
    generated: int = 0
    logprobs: list[float] = field(default_factory=list)  # every token's, when the request asks
    steps: list[tuple[bytes, float]] = field(default_factory=list)  # sampled (not forced) tokens
    first_token: tuple[int, ...] = ()  # the first sampled token (the "covering" when none is required)


def cold_cap(file_tokens: int, n_ctx: int) -> int | None:
    """The most tokens of other files' text beside `file_tokens` of the current file's text, so
    that a cold request costs at most 1 + COLD_SHARE times what it costs without them, or
    COLD_EXTRA_TOKENS more (a short file's bound is the wait, not a ratio of its few tokens): None
    (no cap beyond CONTEXT_SHARE) once the file's tokens fill 1 / (1 + COLD_SHARE) of the window
    (the prompt is then at most the window either way)."""
    if file_tokens * (1 + COLD_SHARE) >= n_ctx:
        return None
    return max(int(file_tokens * COLD_SHARE), COLD_EXTRA_TOKENS)


@dataclass
class _TokenizedPrompt:
    text: str = ""
    tokens: tuple[int, ...] = ()


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo; None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def remembered_sequences(config: EngineConfig, kv_bytes_per_token: int, available: int | None = None) -> int:
    """How many prompts (documents) stay decoded: the live one, plus as many more whole contexts
    of KV as fit in `memory_budget_mib`, and in half the memory the machine has available (llama.cpp
    allocates every sequence's KV at load, so a budget larger than the machine would get the
    server killed later instead of failing now). A context costs what llama.cpp allocates for it,
    a multiple of 256 tokens, not the size asked for."""
    per_context = max(1, allocated_tokens(config.context_tokens) * kv_bytes_per_token)
    budget = config.memory_budget_mib * MIB
    if available is not None:
        budget = min(budget, available // 2)
    return 1 + min(MAX_REMEMBERED, budget // per_context)


class Engine:
    """Not thread-safe: run `complete` on one worker thread. To stop it from another thread, set
    the `cancel` event passed to `complete` (each request has its own, so a cancel can never
    reach the request that follows it); it returns within one decode step."""

    def __init__(
        self, model: LlamaModel, context: LlamaContext, vocab: VocabIndex, config: EngineConfig, kv=None,
        model_id: str = "",
    ):
        """`kv`: the distributions' source; by default a KvCache over `context`. The remote
        backend (engine.remote.RemoteRows) is both `context` and `kv`. `model_id`: what makes the
        distributions (engine.model_files.model_id: a catalogue name or "sha256:<hex>")."""
        self.config = config
        self.model_path = model.path
        self.model_id = model_id
        self._model = model
        self._context = context
        self.vocab = vocab
        self.kv = kv if kv is not None else KvCache(context)
        self.drafts = DraftConfig(max_draft=config.draft_tokens)
        self._draft_line_stops: list[bool] | None = None  # built on first use (a pass over the vocabulary)
        self._bos = list(model.tokenize(b"", add_bos=True))
        self._last_prompt = _TokenizedPrompt()
        self._last_suffix = _TokenizedPrompt()
        self.fim = FimTokens.of(*model.fim_ids())  # None: the model has no FIM tokens
        self.repo = RepoTokens.of(*model.repo_ids())  # None: no repository-level tokens (plain layout)
        self._last_context: tuple[object, tuple[int, ...]] = (None, ())  # (RepoContext, budget) -> tokens
        # the budget each recent context was laid out with (context_budget): kept while it stays within the bound
        self._context_budgets: OrderedDict[RepoContext, int] = OrderedDict()

    @classmethod
    def load(cls, config: EngineConfig = EngineConfig()) -> Engine:
        """Load the model: `config.model_path` is a catalogue name or a path (None: the default).
        Raises ModelLoadError.
        With `config.model_server` the model runs on that llama-server (engine.remote_load);
        only the vocabulary is read here. Raises ModelServerError then."""
        if config.model_server:
            from engine.remote_load import connect

            model, remote, vocab, model_id = connect(config, MIN_PROMPT_TOKENS)
            return cls(model, remote, vocab, config, kv=remote, model_id=model_id)
        if config.context_tokens < 2 * MIN_PROMPT_TOKENS:
            raise ModelLoadError(
                config.model_path,
                f"a context of {config.context_tokens} tokens is too small",
                f"Set `contextTokens` to at least {2 * MIN_PROMPT_TOKENS} (2048 is the default)",
            )
        resolved = resolve(config.model_path)
        model = LlamaModel(resolved.path)
        try:
            sequences = remembered_sequences(config, model.kv_bytes_per_token(), available_memory_bytes())
            context = LlamaContext(model, config.context_tokens, config.batch_tokens, config.threads, sequences)
        except Exception:
            model.close()
            raise
        try:
            vocab = load_vocab(model, resolved.model_id, RUNTIME)
        except Exception:
            context.close()
            model.close()
            raise
        return cls(model, context, vocab, config, model_id=resolved.model_id)

    @property
    def n_ctx(self) -> int:
        return self._context.n_ctx

    def tokenize(self, text: str) -> tuple[int, ...]:
        """Prompt tokens, BOS first; the previous result is reused for an unchanged text."""
        if text != self._last_prompt.text or not self._last_prompt.tokens:
            raw = text.encode("utf-8", "replace")
            self._last_prompt = _TokenizedPrompt(text, tuple(self._model.tokenize(raw, add_bos=True)))
        return self._last_prompt.tokens

    def count_tokens(self, text: str) -> int:
        return len(self._model.tokenize(text.encode("utf-8", "replace"), add_bos=True))

    def clip(self, text: str) -> str:
        """Drop the head of a huge prompt before tokenizing it, so a 5 MB document is never
        tokenized whole. Like `window`, the cut moves in large steps and then to the next line
        start, so it stays put while the user types at the end."""
        keep = self.n_ctx * CHARS_PER_CONTEXT_TOKEN
        if len(text) <= keep:
            return text
        step = keep // 4
        cut = math.ceil((len(text) - keep) / step) * step
        line = text.find("\n", cut, cut + step)
        return text[cut if line < 0 else line + 1 :]

    def window(self, tokens: tuple[int, ...], reserve: int) -> tuple[int, ...]:
        """Keep the prompt's tail within the context. The start moves in large steps, so the kept
        tokens stay a common prefix from one keystroke to the next and the KV cache is reused.
        The step is a quarter of the context, not of the budget: the reserve grows with every
        letter typed into a word, and a step that followed it moved the start (and decoded the
        whole window again) every few keystrokes."""
        budget = self.n_ctx - reserve
        if budget < MIN_PROMPT_TOKENS:
            raise BudgetError(
                f"the context of {self.n_ctx} tokens cannot hold {reserve} generated tokens and a prompt; "
                "raise `contextTokens` or lower `maxTokens`"
            )
        if len(tokens) <= budget:
            return tokens
        head = len(self._bos)
        step = min(budget, max(MIN_PROMPT_TOKENS, self.n_ctx // 4))
        drop = math.ceil((len(tokens) - budget) / step) * step
        return tokens[:head] + tokens[head + drop :]

    def prompt_tokens(self, request: CompletionRequest, reserve: int) -> tuple[int, ...]:
        """The tokens to decode: the plain prompt, or (when the model has FIM tokens and the request
        carries a suffix) the FIM layout of engine.prompt with the suffix's first tokens; other
        files' text (`request.context`) first, in the layout of engine.prompt."""
        clipped = self.clip(request.prompt)
        plain = self.tokenize(clipped)
        head = len(self._bos)
        context = self.context_tokens(request, self._before_line(clipped, plain) if request.context is not None else 0)
        reserve += len(context)
        if self.fim is None or request.suffix is None:
            kept = self.window(plain, reserve)
            return layout(kept[:head], context, kept[head:], None, None, self.repo)
        if request.suffix != self._last_suffix.text or not self._last_suffix.tokens:
            self._last_suffix = _TokenizedPrompt(request.suffix, self.suffix_tokens(request.suffix))
        # The suffix never takes the room the text before the cursor needs: at most half of what
        # the context has left, and never so much that the prefix drops below MIN_PROMPT_TOKENS
        # (a `fimSuffixTokens` near the context size would otherwise fail every request).
        room = self.n_ctx - reserve - FIM_EXTRA_TOKENS
        fits = max(0, min(room // 2, room - MIN_PROMPT_TOKENS))
        suffix = self._last_suffix.tokens[: min(request.suffix_tokens, fits)]
        kept = self.window(plain, reserve + len(suffix) + FIM_EXTRA_TOKENS)
        return layout(kept[:head], context, kept[head:], suffix, self.fim, self.repo, request.fim_order)

    def context_tokens(self, request: CompletionRequest, file_tokens: int | None = None) -> tuple[int, ...]:
        """The tokens of the other files' text (engine.prompt.context_tokens), remembered for an
        unchanged context. The budget does not depend on the keystroke (the reserve grows with
        each letter typed): `maxTokens` of the context, at most half of the context window
        (CONTEXT_SHARE), so the current file keeps half or more, and at most cold_cap of
        `file_tokens`, the current file's tokens before the cursor's line (the same for every
        keystroke of a line): a cold request costs at most 1.5x, by this tokenizer's count. The
        caller (lsp_server.context) sizes its choice by an estimate of the same bound; when the
        estimate runs over (prose counts more characters a token than code), the worst-ranked
        lines are left out here (engine.prompt.context_tokens). None: no such bound (a caller that
        has no current file)."""
        context = request.context
        if context is None:
            return ()
        budget = self.context_budget(context, file_tokens)
        key = (context, budget)
        if self._last_context[0] != key:
            self._last_context = (key, context_tokens(context, self._context_text_tokens, self.repo, budget))
        return self._last_context[1]

    def context_budget(self, context: RepoContext, file_tokens: int | None) -> int:
        """`context.max_tokens`, at most half the window, and at most cold_cap(`file_tokens`). The
        budget a context was first laid out with is kept while it stays within that bound: the file
        grows as the user types, and a cap that followed it would lay the context out again (and
        decode the whole prompt) at every line. It is made again when the bound falls below it (the
        cursor moved up) or for a new context (the caller's choice changes at its own steps)."""
        budget = min(context.max_tokens, self.n_ctx // CONTEXT_SHARE)
        if file_tokens is None:
            return budget
        cap = cold_cap(file_tokens, self.n_ctx)
        allowed = budget if cap is None else min(budget, cap)
        kept = self._context_budgets.get(context)
        if kept is None or kept > allowed:
            kept = self._context_budgets[context] = allowed
        self._context_budgets.move_to_end(context)
        while len(self._context_budgets) > MAX_REMEMBERED + 1:
            self._context_budgets.popitem(last=False)
        return kept

    def _before_line(self, text: str, tokens: tuple[int, ...]) -> int:
        """How many of `tokens` (the prompt `text` tokenized, BOS first) spell only text before the
        start of its last line: a token that crosses the line's start is not counted (a count
        that errs low, and that every keystroke of the line shares)."""
        line_start = max(text.rfind("\n"), text.rfind("\r")) + 1
        room = len(text[:line_start].encode("utf-8", "replace"))
        count = spelled = 0
        pieces = self.vocab.pieces
        for t in tokens[len(self._bos) :]:
            spelled += len(pieces[t])
            if spelled > room:
                break
            count += 1
        return count

    def _context_text_tokens(self, text: str) -> tuple[int, ...]:
        """Tokens of a piece of context text, spelling exactly it (no BOS, no space prefix)."""
        return self.suffix_tokens(text)

    def suffix_tokens(self, text: str) -> tuple[int, ...]:
        """The tokens of the text after the cursor, spelling exactly it. A SentencePiece tokenizer
        puts a space before a text's start (its space prefix): right for the prompt, which starts a
        document, wrong for the suffix, which continues one (" print" for "print"; CodeLlama's own
        infilling strips it too). Tokenized after a line break, the space goes to the line break,
        and both are dropped; when that does not split cleanly, the plain tokens are kept."""
        raw = text.encode("utf-8", "replace")
        plain = tuple(self._model.tokenize(raw, add_bos=False))
        if self._spelled(plain) == raw:  # no space prefix (BPE vocabularies, Gemma)
            return plain
        lead = self._model.tokenize(b"\n" + raw, add_bos=False)
        for i in range(1, min(3, len(lead) + 1)):
            if self._spelled(lead[:i]) in (b"\n", b" \n"):
                rest = tuple(lead[i:])
                return rest if self._spelled(rest) == raw else plain
        return plain

    def _spelled(self, tokens: Iterable[int]) -> bytes:
        return b"".join(self.vocab.pieces[t] for t in tokens)

    def sequence(self, sampling: SamplingConfig = SamplingConfig(), cancel: threading.Event | None = None) -> Sequence:
        """A seed-003 style sequence over this engine's KV cache (for callers that stream)."""
        return Sequence(self.kv, self.vocab, sampling, cancel, self._drafter(sampling))

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
            self.kv.begin(cancel, max_tokens, single_line)
            try:
                return body()
            except ModelServerError as error:
                failed = error
            finally:
                self.kv.end()
            if attempt == RETRIES or not self._recover(failed):
                raise failed
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def prefetch(self, request: CompletionRequest, cancel: threading.Event | None = None) -> Prefetched:
        """Decode the prompt `request` would need, and nothing else (no covering, no sampling),
        so a later `complete` with the same prompt starts warm. Low priority by contract: the
        caller cancels it for any real request; what it decoded by then stays in the KV cache."""
        started = time.perf_counter()
        prompt = self.prompt_tokens(request, self._reserve(request))
        before = self.kv.decoded
        self._route(request)

        def decode() -> bool:
            try:
                if prompt:  # see `complete` for an empty one
                    self.kv.prefill(prompt, cancel)
                return True
            except Cancelled:
                return False

        done = self._retrying(cancel, 0, request.sampling.single_line, decode)
        ms = (time.perf_counter() - started) * 1000
        return Prefetched(len(prompt), self.kv.decoded - before, done, ms)

    def complete(self, request: CompletionRequest, cancel: threading.Event | None = None) -> Completion:
        """Raises ModelServerError when a remote server fails mid-request (the engine stays
        usable: the next call tries again)."""
        cancel = cancel or threading.Event()
        traffic = self._traffic()
        self._route(request)
        # A server stops a single-line stream at a line break itself; a `next_line` request whose
        # line ends at once asks for the rest again from there (one round trip more, only then).
        completion = self._retrying(cancel, request.max_tokens, request.sampling.single_line,
                                    lambda: self._complete(request, cancel))
        after = self._traffic()
        stats = replace(
            completion.stats,
            round_trips=after[0] - traffic[0],
            bytes_sent=after[1] - traffic[1],
            bytes_received=after[2] - traffic[2],
            fallback=",".join(self.kv.fallbacks[traffic[3] :]) or None,
            server=getattr(self.kv, "answered", None),
        )
        return replace(completion, stats=stats)

    def _route(self, request: CompletionRequest) -> None:
        """Tell a remote backend which document this is (engine.multi: the server it goes to, and
        the key a load balancer keeps it on one server by); the in-process cache has no use for it."""
        route = getattr(self.kv, "route", None)
        if route is not None:
            from engine.multi import affinity_key

            route(affinity_key(request.document if request.document else request.prompt[:256]))

    def _recover(self, error: ModelServerError) -> bool:
        """A remote call failed: may it be made again at once (another server, or the server a
        balancer moved the document to, checked first)? At most RETRIES times per call."""
        recover = getattr(self.kv, "recover", None)
        return bool(recover is not None and recover(error))

    def _traffic(self) -> tuple[int, int, int, int]:
        """(round trips, bytes sent, bytes received, fallbacks so far) of a remote backend."""
        client = getattr(self.kv, "client", None)
        if client is None:
            return 0, 0, 0, len(self.kv.fallbacks)
        t = client.traffic
        return t.round_trips, t.bytes_sent, t.bytes_received, len(self.kv.fallbacks)

    def _complete(self, request: CompletionRequest, cancel: threading.Event) -> Completion:
        started = time.perf_counter()
        required = request.required.encode("utf-8", "replace")
        prompt = self.prompt_tokens(request, self._reserve(request))
        if not prompt:
            # An empty text and a model that adds no BOS (e.g. Qwen2.5-Coder without FIM): the
            # model has nothing to condition on, so there is no suggestion rather than a guess.
            stats = DecodeStats(ms=(time.perf_counter() - started) * 1000, kv_tokens=self.kv.held)
            return Completion("", "empty", stats, required_satisfied=not required)
        decoded_before = self.kv.decoded
        seq = self.sequence(request.sampling, cancel)
        gen = _Generated()
        if seq.decode_prompt(prompt, required, request.exact, request.max_cover_decodes):
            gen = self._generate(seq, request, len(required))
        choice, lexicon_decodes = None, 0
        first, first_seq = seq.diagnostics(), seq  # the prompt's cost, paid by the first pass only
        if request.candidates and gen.reason != "cancelled" and seq.required_satisfied:
            choice, lexicon_decodes = self._choose_word(prompt, request, gen.text, cancel)
            if choice is None and cancel.is_set():
                gen = replace(gen, reason="cancelled")
            elif choice is not None and choice.word != choice.base_word:
                typed = _typed(request.required)
                chosen = replace(request, required=request.required[: len(request.required) - len(typed)] + choice.word)
                seq = self.sequence(request.sampling, cancel)
                gen = _Generated()
                spelled = chosen.required.encode("utf-8", "replace")
                if seq.decode_prompt(prompt, spelled, request.exact, request.max_cover_decodes):
                    gen = self._generate(seq, chosen, len(required))
        signals, alternatives, alternative_decodes = None, (), 0
        if gen.reason == "cancelled":
            gen = replace(gen, text="")  # never a stale suggestion
        elif seq.required_satisfied:
            seen = self._seen_alike(request, prompt, first_seq)  # read by the signals and the alternatives'
            signals = self._signals(request, first_seq, seq, gen, seen)
            if request.alternatives > 0:
                # Free when typed along a suggestion, and always over the network, where every row is
                # a round trip: there they come from the rows the keystroke already brought back.
                free = self.kv.decoded == decoded_before or bool(self.config.model_server)
                alternatives, alternative_decodes = self._alternatives(
                    request, prompt, first_seq, gen, signals, seen, 0 if free else None, cancel
                )
        diag = seq.diagnostics()
        again = choice is not None and choice.word != choice.base_word  # a second pass was made
        reused, decoded = first.reused_tokens, first.decoded_tokens + (diag.decoded_tokens if again else 0)
        if self.config.model_server:
            # Over the network every request restates the prompt, and the server evaluates what its
            # slot lacks in whichever request comes first (often the generation's, after the
            # covering was proven on remembered rows): so the call's prompt work is everything the
            # server reported evaluating during it (the remote backend counts prompt tokens only).
            decoded = self.kv.decoded - decoded_before
            reused = max(0, diag.prompt_tokens - decoded)
        stats = DecodeStats(
            prompt_tokens=diag.prompt_tokens,
            reused_tokens=reused,
            decoded_tokens=decoded,
            cover_decodes=first.cover_decodes + (diag.cover_decodes if again else 0),
            generated_tokens=gen.generated,
            kv_tokens=diag.kv_tokens,
            ms=(time.perf_counter() - started) * 1000,
            lexicon_decodes=lexicon_decodes,
            lexicon_changed=again,
            alternative_decodes=alternative_decodes,
            fim=self.fim is not None and request.suffix is not None,
        )
        return Completion(
            gen.text, gen.reason, stats, seq.required_satisfied, tuple(gen.logprobs), signals, alternatives
        )

    def _coverings(self, request: CompletionRequest, prompt: tuple[int, ...], seq: Sequence, n: int):
        """(the best `n` coverings of the typed prefix, the log of their summed mass): from the
        exact search, or with nothing to cover from the prompt's row (its first tokens, mass 1)."""
        if seq.search is not None:
            return seq.search.ranked(n), seq.search.log_mass()
        if request.required or not self.kv.remembers(prompt):  # masking, or the row is gone: no decode for it
            return [], 0.0
        return first_tokens(self.kv.logits_after(prompt), self.vocab, n), 0.0

    def _seen_alike(self, request: CompletionRequest, prompt: tuple[int, ...], seq: Sequence):
        """(the coverings the gate's signals read, the log of their summed mass): those along the
        chosen covering among each row's SIGNAL_TOP most probable tokens (CoveringSearch.along),
        which a remote backend sees as the in-process one does; with nothing typed, the prompt's
        row's first tokens (mass 1)."""
        if seq.search is not None and seq.covering is not None:
            return seq.search.along(seq.covering, request.required.encode("utf-8", "replace"), SIGNAL_TOP)
        return self._coverings(request, prompt, seq, RIVALS)

    def _signals(
        self, request: CompletionRequest, first_seq: Sequence, seq: Sequence, gen: _Generated, seen_alike: tuple[list, float]
    ) -> Signals:
        """The completion's confidence (engine.signals), normalised by the first pass's coverings
        (a lexicon word's second pass covers a longer prefix, on the same prompt row)."""
        seen, log_mass = seen_alike
        steps = list(gen.steps)
        if seq.covering is not None:
            covered = b"".join(self.vocab.pieces[t] for t in seq.covering.path)
            steps.insert(0, (covered, seq.covering.log_prob - log_mass))
        rivals = [(b"".join(self.vocab.pieces[t] for t in c.path), c.log_prob - log_mass) for c in seen]
        raw = tuple(lp for _, lp in gen.steps)
        return compute_signals(request.required, steps, rivals, _typed_log_prob(first_seq, log_mass), gen.reason == "eos", raw)

    def _alternatives(self, request, prompt, first_seq: Sequence, gen: _Generated, signals: Signals, seen_alike, budget, cancel):
        """(other first words (engine.alternatives) within `max_cover_decodes` decodes (`budget` 0:
        remembered rows only), the decodes spent); none when cancelled meanwhile. Their signals
        read the same coverings as the completion's (`_seen_alike`)."""
        ranked, _ = self._coverings(request, prompt, first_seq, request.alternatives * CANDIDATES_PER_ALTERNATIVE + 1)
        seen, log_mass = seen_alike
        primary = gen.text[: signals.word_ends[0].chars] if signals.word_ends else gen.text
        chosen = first_seq.covering.path if first_seq.covering is not None else gen.first_token
        rows = BudgetedRows(PathRows(self.kv, prompt, cancel), request.max_cover_decodes if budget is None else budget)
        try:
            found = alternatives(
                self.vocab, rows, request.required, ranked, log_mass, primary, chosen, request.alternatives,
                request.sampling.single_line, seen, _typed_log_prob(first_seq, log_mass),
            )  # fmt: skip
        except Cancelled:
            found = ()
        return found, rows.decodes

    def _choose_word(self, prompt: tuple[int, ...], request: CompletionRequest, text: str, cancel: threading.Event):
        """The lexicon's choice between the model's word and the document words (engine.lexicon);
        (None, decodes) when the budget or a cancel cut it short."""
        typed = _typed(request.required)
        whitespace = request.required[: len(request.required) - len(typed)]
        base_word = first_word(text[len(whitespace) :])
        candidates = [c for c in request.candidates if c.startswith(typed) and c != typed]
        if not typed or not base_word or not candidates:
            return None, 0
        rows = PathRows(self.kv, prompt, cancel)
        scorer = WordScorer(self.vocab, rows, self._spell, request.lexicon_decodes)
        try:
            return choose(scorer, whitespace, base_word, candidates, request.lexicon_prior), scorer.decodes
        except Cancelled:
            return None, scorer.decodes

    def _spell(self, text: bytes) -> list[int]:
        """The tokens of `text` alone, or [] when they do not spell exactly it. (SentencePiece
        vocabularies prepend a space to a text's start; a lone leading space token is dropped.)"""
        tokens = list(self._model.tokenize(text, add_bos=False))
        spelled = self._spelled(tokens)
        if spelled == text:
            return tokens
        if spelled == b" " + text and tokens and self.vocab.pieces[tokens[0]] == b" ":
            return tokens[1:]
        return []

    def _generate(self, seq: Sequence, request: CompletionRequest, required_bytes: int) -> _Generated:
        """Sample until end, stop sequence, line break, budget or cancel. A token counts against
        `max_tokens` when it adds bytes beyond the required prefix (what the user already typed)."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        produced = 0
        gen = _Generated()
        text = ""
        counted = 0
        while counted < request.max_tokens:
            result = seq.sample_next(request.sampling.logprobs, horizon=request.max_tokens - counted, free_logprob=True)
            if result.was_cancelled:
                return replace(gen, text=text, reason="cancelled")
            if not result.forced and not gen.first_token:
                gen.first_token = (result.token,)
            if result.is_eos:
                if result.logprob is not None and not result.forced:
                    gen.steps.append((b"", result.logprob))
                return replace(gen, text=text, reason="eos")
            gen.generated += 1
            if result.logprob is not None:
                if request.sampling.logprobs:
                    gen.logprobs.append(result.logprob)
                if not result.forced:
                    gen.steps.append((result.piece, result.logprob))
            produced += len(result.piece)
            counted += produced > required_bytes
            text += decoder.decode(result.piece)
            free_from = len(request.required) if seq.required_satisfied else 0
            cut = self._cut(text, free_from, request)
            if cut is not None:
                return replace(gen, text=cut[0], reason=cut[1])
        return replace(gen, text=text, reason="length")

    @staticmethod
    def _cut(text: str, free_from: int, request: CompletionRequest) -> tuple[str, str] | None:
        """Where generated text ends early: a stop sequence or, in single-line mode, a line break
        (multi-line: a line indented below `indent_floor`, the end of the block)."""
        free = text[free_from:]
        found = first_stop(free, request.stop) if request.stop else None
        ends = []
        if found is not None:
            ends.append((found[0], "stop"))
        if request.sampling.single_line:
            breaks = [i for i in (free.find(b) for b in LINE_BREAKS) if i >= 0]
            if breaks and request.next_line and not free[: min(breaks)].strip():
                if (end := _next_line_end(free, min(breaks))) is not None:
                    ends.append((end, "line"))
            elif breaks:
                ends.append((min(breaks), "line"))
        elif request.indent_floor is not None and (dedent := _dedent(free, request.indent_floor)) is not None:
            ends.append((dedent, "block"))
        if not ends:
            return None
        end, reason = min(ends)
        return text[: free_from + end], reason

    def close(self) -> None:
        self.kv.forget()
        self._context.close()
        self._model.close()


def _dedent(text: str, floor: int) -> int | None:
    """Where the first line after the first one that is indented less than `floor` begins (at
    its line break), once that line has something on it; blank lines never end a block."""
    at = text.find("\n")
    while at >= 0:
        nxt = text.find("\n", at + 1)
        line = text[at + 1 : len(text) if nxt < 0 else nxt].rstrip("\r")
        body = line.lstrip(" \t")
        if body and len(line) - len(body) < floor:
            return at
        at = nxt
    return None


def _typed_log_prob(seq: Sequence, log_mass: float) -> float:
    """log p(typed prefix | prompt) from a mass relative to the prompt's row (0: nothing typed)."""
    return log_mass - seq.search.root_log_norm if seq.search is not None else 0.0


def _next_line_end(text: str, first_break: int) -> int | None:
    """Where the first line after `text`'s first one (which ends at `first_break`) that has
    something on it ends (at its line break, or at a line break that shows it is done); None
    while that line may still grow."""
    at = first_break
    while True:
        nxt = min((i for i in (text.find(b, at + 1) for b in LINE_BREAKS) if i >= 0), default=-1)
        if nxt < 0:
            return None
        if text[at + 1 : nxt].strip():
            return nxt
        at = nxt


def _typed(required: str) -> str:
    """The partial word at the end of a required prefix (after its boundary whitespace)."""
    start = len(required)
    while start > 0 and is_word_char(required[start - 1]):
        start -= 1
    return required[start:]
