"""Typed values that cross the engine's boundary: what a caller asks for and what it gets back.

The engine owns model, context, KV cache, sampler and cancellation; it owns no documents,
positions or request identity. Everything it is told arrives in a `CompletionRequest`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def server_urls(value: str | None) -> tuple[str, ...]:
    """`EngineConfig.model_server` as URLs: one, or several separated by commas or white space
    (several: engine.remote.servers keeps each document on one of them)."""
    return tuple(u for u in re.split(r"[\s,]+", value or "") if u)


@dataclass(frozen=True)
class EngineConfig:
    """How to load the model. `model_path` is a GGUF path or a catalogue name (engine.catalogue,
    resolved at load by engine.model_files.resolve); None means the default model."""

    model_path: Path | str | None = None
    context_tokens: int = 2048
    threads: int | None = None  # None: all cores
    batch_tokens: int = 512
    memory_budget_mib: int = 128  # KV of earlier prompts (other documents) kept decoded, LRU
    draft_tokens: int = 0  # prompt-lookup drafts per step; 0: off (slower on this model: see bench)
    model_server: str | None = None  # llama-server URL(s) (http://127.0.0.1:8080; several: commas); None/"": in-process
    model_server_api_key: str | None = field(default=None, repr=False)  # never in a repr or a log
    model_server_timeout_s: float = 5.0  # one request's time budget against the server
    model_server_slot: int | None = None  # None: the engine picks its slot per document
    model_server_ca_file: str | None = None  # PEM CA for an https:// model server; None: the system's


@dataclass(frozen=True)
class SamplingConfig:
    """The sampler's settings. Temperature 0 is greedy."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repetition_penalty: float = 1.0
    seed: int = 0
    single_line: bool = True
    logprobs: bool = False


@dataclass(frozen=True)
class ContextFile:
    """Text from another file of the workspace that goes before the current file in the prompt:
    a whole file or a chunk of one. `path` is relative to the workspace root (what the model sees)."""

    path: str
    text: str
    # One number a line of `text` (lower: more wanted), or (): when the budget cannot hold every
    # file, the engine leaves out the highest-numbered lines first (else the last lines of the list)
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class RepoContext:
    """Other files' text for the prompt, and the names the layout needs (see engine.core.prompt).

    The caller chooses `files` and keeps the same value from keystroke to keystroke (their order
    is the prompt's order, so a stable choice keeps the KV cache); the engine lays them out before
    the current file, within `max_tokens` (and half the context), dropping the files at the end
    that do not fit."""

    files: tuple[ContextFile, ...]
    path: str = ""  # the current file's path, relative to the root ("" when it has none)
    name: str = ""  # the repository's name (the root folder's)
    max_tokens: int = 1024


# Whether nothing more of a completion could be shown, from (the identity of the model making it:
# Engine.model_id, the text so far, its signals): the caller's gate. Generation stops when it says so.
HiddenCheck = Callable[[str | None, str, "Signals"], bool]


@dataclass(frozen=True)
class CompletionRequest:
    """One completion: `prompt` ends at a word boundary; the output must begin with `required`.

    `suffix` is the text after the cursor (already bounded in lines by the caller), used only when
    the model has FIM tokens; None leaves it out. Its first `suffix_tokens` tokens are kept, laid
    out in `fim_order` ("psm", "spm" or "psm-line", see engine.core.prompt)."""

    prompt: str
    required: str = ""
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_cover_decodes: int = 8
    exact: bool = True  # False: per-step masking only, kept for comparison with the exact search
    suffix: str | None = None
    suffix_tokens: int = 64
    fim_order: str = "psm-line"
    # Document words that begin with the typed word (see engine.core.word_choice); () leaves it out.
    candidates: tuple[str, ...] = ()
    lexicon_prior: float = 1.0  # nats added to a document word's score
    lexicon_decodes: int = 8  # extra decodes the scoring may spend
    alternatives: int = 0  # other first words to return (decodes bounded by max_cover_decodes)
    # Answer first: the alternatives only from rows the call computed anyway (no decodes of their
    # own); `DecodeStats.alternatives_deferred` says when the caller should ask again for the rest.
    # Without it the alternatives may cost up to `max_cover_decodes` decodes (the user asked for them).
    alternatives_later: bool = False
    # Multi-line only (sampling.single_line False): generation ends before the first later line
    # indented less than this many spaces/tabs (the end of the block being written); None: no such end.
    indent_floor: int | None = None
    # Single-line only: when the line ends at once (nothing but spaces after the required prefix
    # before its line break), generation goes on to the end of the next line with something on
    # it, so a suggestion at a line's end is the next line (llama.vim's and Copilot's behaviour).
    next_line: bool = False
    # The document's language (an LSP languageId such as "python"): a hint for whoever picks the
    # model (lsp_server.routing); the engine itself does not read it.
    language: str | None = None
    # Text from other files of the workspace, laid out before the current file; None: the current
    # file alone (the prompt is then exactly what it was without this feature).
    context: RepoContext | None = None
    # What names the document (the LSP URI): only its salted hash leaves the engine
    # (engine.remote.servers.affinity_key), as the key that keeps a document on one model server; None:
    # the start of the prompt names it. Never sent, never logged.
    document: str | None = field(default=None, repr=False)
    # First contact: when more than twice this many of the prompt's tokens are not decoded (a
    # freshly opened long file, a new window), the answer comes from the last `first_window` to
    # 1.5x `first_window` tokens before the cursor, without other files' text, while the whole
    # prompt decodes behind it in another sequence (engine.Engine.first_prompt, which also
    # answers a short file within COLD_EXTRA_MS of other files' text). 0: never (a caller that
    # does not decode the whole prompt afterwards must leave it so; the server sets 256).
    first_window: int = 0
    # Called at each word end generation confirms (engine.core.generation): True stops it there,
    # with stop reason "hidden" (the rest could not be shown; the same request without it goes on).
    hidden: HiddenCheck | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class DecodeStats:
    """Diagnostics without text: what the KV cache held and what this request cost."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    decoded_tokens: int = 0  # prompt tokens decoded for this request (0 when reused whole)
    cover_decodes: int = 0  # extra decodes spent by the covering search
    generated_tokens: int = 0
    kv_tokens: int = 0
    ms: float = 0.0
    prompt_ms: float = 0.0  # of `ms`: up to the prompt decoded and the typed prefix covered (before generating)
    lexicon_decodes: int = 0  # extra decodes spent scoring document words
    lexicon_changed: bool = False  # a document word won over the model's own word
    round_trips: int = 0  # HTTP requests to a model server for this call
    bytes_sent: int = 0
    bytes_received: int = 0
    fallback: str | None = None  # e.g. "mask" when per-step masking on the server had to be used
    alternative_decodes: int = 0  # extra decodes spent finishing the alternatives' words
    alternatives_deferred: bool = False  # `alternatives_later` left some out: the same request without it has them
    server: str | None = None  # the model server that answered (its URL; behind a balancer, its upstream)
    fim: bool = False  # the prompt held the text after the cursor (FIM layout): where it ends moves the answer
    fim_line: bool = False  # ... with the cursor's line in the middle (psm-line): only a new line moves it
    first_prompt: str | None = (
        None  # a first answer's prompt ("near", "lean": engine.Engine.first_prompt); None: the whole one
    )


@dataclass(frozen=True)
class Prefetched:
    """What a prefetch did: the prompt's length, the tokens it decoded, whether it finished."""

    prompt_tokens: int
    decoded_tokens: int
    finished: bool
    ms: float


NO_RIVAL = math.inf  # the margin when the search knows no other word
MIN_PROMPT_TOKENS = 64  # below this a context cannot hold a useful prompt beside the budget
# Other files' text takes at most this share of the current file's tokens before the cursor's line
# (until they fill 2/3 of the window): a cold request then costs at most 1.5x what it costs without
# them. The engine holds it by its tokenizer's count (engine.prompt_window.cold_cap); the server sizes its
# choice by an estimate of the same bound (lsp_server.context.budget_for).
COLD_SHARE = 0.5
# ...or COLD_EXTRA_TOKENS, whatever the file's length: a short or new file (the one that most
# needs another file's names) would get nothing from a share of its few tokens. Its first answer
# waits for at most COLD_EXTRA_MS of them (engine.Engine.first_prompt, engine.prompt_window.cold_extra)
# while the rest decodes behind it.
COLD_EXTRA_MS = 300.0
COLD_EXTRA_TOKENS = 256
# At least this many (a definition or two: a prompt timed on a busy machine must not leave none),
# and this many before the backend has timed a prompt: ~280 ms on the default code model, 2 threads.
LEAN_MIN_TOKENS = 64


@dataclass(frozen=True)
class WordEnd:
    """A place in `Completion.text` where a word ends, and log P(text[:chars], then a word end | typed)."""

    chars: int  # code points of Completion.text up to the word's end
    log_prob: float


@dataclass(frozen=True)
class Signals:
    """Confidence signals of one completion (see the module docstring); computed without a decode."""

    word_log_prob: float  # log P(first word | typed prefix)
    margin: float  # nats from the first word to the best other word known (NO_RIVAL: none known)
    word_ends: tuple[WordEnd, ...]  # every confirmed word end after the typed prefix, in order
    typed_log_prob: float = 0.0  # log p(typed prefix | prompt): the normaliser (0: nothing typed)
    token_log_probs: tuple[float, ...] = ()  # the generated tokens', as the model gave them (raw)
    # (code points decoded, log P(text so far | typed)) after each step (the covering, then each
    # token): the probability of a longer typed prefix, so the text can be judged again, without
    # the model, once some of it is typed (lsp_server.rejudge)
    step_ends: tuple[WordEnd, ...] = ()

    @property
    def word_prob(self) -> float:
        return math.exp(self.word_log_prob)

    def log_prob_at(self, chars: int) -> float | None:
        """log P(the text up to `chars` and a word end there | typed); None when no confirmed word
        ends there."""
        for end in self.word_ends:
            if end.chars == chars:
                return end.log_prob
        return None


@dataclass(frozen=True)
class Alternative:
    """Another way to finish the typed word: `text` begins with the required prefix and ends at
    that word's end; its signals are on the same footing as the completion's."""

    text: str
    signals: Signals


@dataclass(frozen=True)
class Completion:
    """The generated text (beginning with the required prefix unless the constraint was dropped)."""

    text: str
    stop_reason: str  # "eos" | "stop" | "line" (also next_line's) | "block" (indent_floor) | "length" | "hidden" | "cancelled" | "empty" (no prompt token)
    stats: DecodeStats
    required_satisfied: bool = True
    logprobs: tuple[float, ...] = ()
    signals: Signals | None = None  # None: cancelled, or the constraint was dropped
    alternatives: tuple[Alternative, ...] = ()  # other first words, most probable first

    @property
    def cancelled(self) -> bool:
        return self.stop_reason == "cancelled"


class ModelLoadError(RuntimeError):
    """The model could not be loaded. The message names the path and what to do about it."""

    def __init__(self, path: Path | str | None, problem: str, remedy: str) -> None:
        self.path = None if path is None else str(path)
        self.problem = problem
        self.remedy = remedy
        where = f" ({self.path})" if self.path else ""
        super().__init__(f"cannot load model{where}: {problem}. {remedy}")


class ModelServerError(ModelLoadError):
    """The model server failed: at first contact (`Engine.load`) or mid-request. `kind` is one of
    KINDS; the message says what to do and never holds the API key or document text. It names the
    server, not a failed load: mid-request the model is loaded and only that request failed (the
    scheduler says "cannot load model" when a load is what failed)."""

    KINDS = ("unreachable", "auth", "model", "protocol", "timeout", "url", "tls")

    def __init__(self, kind: str, url: str | None, problem: str, remedy: str) -> None:
        self.kind = kind
        super().__init__(url, problem, remedy)
        where = f" ({self.path})" if self.path else ""
        self.args = (f"the model server{where}: {problem}. {remedy}",)


class BudgetError(ValueError):
    """The request's token budget does not fit in the context. The message says what to change."""
