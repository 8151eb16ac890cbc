"""From a request's text to the prompt's tokens within the model's window: tokenizing (reused
while the text is unchanged), clipping and windowing in large steps (so the kept tokens stay a
common prefix from one keystroke to the next), the FIM layout with the text after the cursor, and
other files' context within its budget (engine.core.prompt lays the tokens out)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from engine.backend import PromptSpeed, Window
from engine.core.prompt import (
    FIM_EXTRA_TOKENS,
    PSM_LINE,
    FimTokens,
    RepoTokens,
    context_tokens,
    layout,
)
from engine.core.vocab import VocabIndex
from engine.local.llama import LlamaModel
from engine.local.load import MAX_REMEMBERED
from engine.types import (
    COLD_EXTRA_MS,
    COLD_EXTRA_TOKENS,
    COLD_SHARE,
    LEAN_MIN_TOKENS,
    MIN_PROMPT_TOKENS,
    BudgetError,
    CompletionRequest,
    RepoContext,
)

Cut = Literal["whole", "near", "lean"]  # a request's prompt, or a first answer's (PromptWindow.prompt_tokens)
CHARS_PER_CONTEXT_TOKEN = 8  # text kept before tokenizing: generous, the token window trims the rest
CONTEXT_SHARE = 2  # other files' text takes at most 1/CONTEXT_SHARE of the context window (and cold_cap)


def cold_cap(file_tokens: int, n_ctx: int, extra_tokens: int = COLD_EXTRA_TOKENS) -> int | None:
    """The most tokens of other files' text beside `file_tokens` of the current file's text, so
    that a cold request costs at most 1 + COLD_SHARE times what it costs without them, or
    `extra_tokens` more (a short file's bound is the wait, not a ratio of its few tokens:
    `cold_extra`): None (no cap beyond CONTEXT_SHARE) once the file's tokens fill
    1 / (1 + COLD_SHARE) of the window (the prompt is then at most the window either way)."""
    if file_tokens * (1 + COLD_SHARE) >= n_ctx:
        return None
    return max(int(file_tokens * COLD_SHARE), extra_tokens)


def cold_extra(ms_per_token: float | None) -> int:
    """The tokens a short file's context may add to a first answer's cold request (the "lean"
    prompt of engine.Engine.first_prompt): what COLD_EXTRA_MS evaluates at the backend's fastest
    timed prompt speed (engine.backend.PromptSpeed), between LEAN_MIN_TOKENS and COLD_EXTRA_TOKENS;
    LEAN_MIN_TOKENS before it has timed one."""
    if ms_per_token is None:
        return LEAN_MIN_TOKENS
    return max(LEAN_MIN_TOKENS, min(COLD_EXTRA_TOKENS, int(COLD_EXTRA_MS / ms_per_token)))


def kept_budget(budgets: OrderedDict[RepoContext, int], context: RepoContext, allowed: int) -> int:
    """The budget `context` was first laid out with while it stays within `allowed`, else `allowed`
    (kept in `budgets`, the MAX_REMEMBERED + 1 latest contexts): a bound that grows as the user types
    (the file's tokens, a faster timed speed) never lays a context out again; one that falls (the
    cursor moved up) does."""
    kept = budgets.get(context)
    if kept is None or kept > allowed:
        kept = budgets[context] = allowed
    budgets.move_to_end(context)
    while len(budgets) > MAX_REMEMBERED + 1:
        budgets.popitem(last=False)
    return kept


@dataclass
class _TokenizedPrompt:
    text: str = ""
    tokens: tuple[int, ...] = ()


class PromptWindow:
    """The prompt's tokens for a request (`prompt_tokens`), for the Engine (engine.engine) that
    is one. Its state is the last tokenizations and the budgets other files' context was laid
    out with."""

    def __init__(self, model: LlamaModel, context: Window, vocab: VocabIndex, speed: PromptSpeed) -> None:
        """`speed`: the backend's timed prompt speed, which bounds a short file's context (`cold_extra`)."""
        self._model = model
        self._speed = speed
        # What sets the window (n_ctx): the llama context in-process, the backend for a server.
        # "context" alone means other files' text here (`request.context`, `context_tokens`).
        self._context = context
        self.vocab = vocab
        self._bos = list(model.tokenize(b"", add_bos=True))
        self._last_prompt = _TokenizedPrompt()
        self._last_suffix = _TokenizedPrompt()
        self.fim = FimTokens.of(*model.fim_ids())  # None: the model has no FIM tokens
        self.repo = RepoTokens.of(*model.repo_ids())  # None: no repository-level tokens (plain layout)
        self._laid_out: OrderedDict[tuple[RepoContext, int], tuple[int, ...]] = (
            OrderedDict()
        )  # (context, budget) -> tokens
        # the budget each recent context was laid out with (context_budget): kept while it stays within the bound
        self._context_budgets: OrderedDict[RepoContext, int] = OrderedDict()
        self._lean_budgets: OrderedDict[RepoContext, int] = (
            OrderedDict()
        )  # the same for a first answer (`_lean_budget`)
        # set by prompt_tokens: the prompt names other files in comment lines (a line like them ends a suggestion)
        self.headers = False

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

    def first_window(self, tokens: tuple[int, ...], size: int) -> tuple[int, ...]:
        """The BOS and the last `size` to 1.5x `size` of `tokens` after it: a first answer's text
        (`CompletionRequest.first_window`). Its start moves in steps of half `size`, so the
        keystrokes that follow keep it as their prefix (and decode nothing again)."""
        head = len(self._bos)
        step = max(1, size // 2)
        drop = max(0, (len(tokens) - head - size) // step * step)
        return tokens[:head] + tokens[head + drop :]

    def prompt_tokens(self, request: CompletionRequest, reserve: int, cut: Cut = "whole") -> tuple[int, ...]:
        """The tokens to decode: the plain prompt, or (when the model has FIM tokens and the request
        carries a suffix) the FIM layout of engine.core.prompt with the suffix's first tokens; other
        files' text (`request.context`) first, in the layout of engine.core.prompt. `cut`: a first
        answer's prompt instead (engine.Engine.first_prompt): "near", the text near the cursor
        alone (`first_window`); "lean", other files' text within what 300 ms evaluate (`cold_extra`)."""
        clipped = self.clip(request.prompt)
        plain = self.tokenize(clipped)
        head = len(self._bos)
        before_line = self._before_line(clipped, plain)
        context = () if cut == "near" else self.context_tokens(request, before_line, lean=cut == "lean")
        reserve += len(context)
        self.headers = bool(context) and self.repo is None
        near = self.first_window(plain, request.first_window) if cut == "near" else plain
        if self.fim is None or request.suffix is None:
            kept = self.window(near, reserve)
            return layout(kept[:head], context, kept[head:], None, None, self.repo)
        if request.suffix != self._last_suffix.text or not self._last_suffix.tokens:
            self._last_suffix = _TokenizedPrompt(request.suffix, self.suffix_tokens(request.suffix))
        # The suffix never takes the room the text before the cursor needs: at most half of what
        # the context has left, and never so much that the prefix drops below MIN_PROMPT_TOKENS
        # (a `fimSuffixTokens` near the context size would otherwise fail every request).
        room = self.n_ctx - reserve - FIM_EXTRA_TOKENS
        fits = max(0, min(room // 2, room - MIN_PROMPT_TOKENS))
        suffix = self._last_suffix.tokens[: min(request.suffix_tokens, fits)]
        kept = self.window(near, reserve + len(suffix) + FIM_EXTRA_TOKENS)
        split = len(kept)
        if request.fim_order == PSM_LINE:  # the cursor's line goes after MID (the window dropped from the front)
            split = max(head, head + before_line - (len(plain) - len(kept)))
        prefix, line = kept[head:split], kept[split:]
        return layout(kept[:head], context, prefix, suffix, self.fim, self.repo, request.fim_order, line)

    def context_tokens(
        self, request: CompletionRequest, file_tokens: int | None = None, lean: bool = False
    ) -> tuple[int, ...]:
        """The tokens of the other files' text (engine.core.prompt.context_tokens), remembered for an
        unchanged context. The budget does not depend on the keystroke (the reserve grows with
        each letter typed): `maxTokens` of the context, at most half of the context window
        (CONTEXT_SHARE), so the current file keeps half or more, and at most cold_cap of
        `file_tokens`, the current file's tokens before the cursor's line (the same for every
        keystroke of a line): a cold request costs at most 1.5x, by this tokenizer's count. The
        caller (lsp_server.context) sizes its choice by an estimate of the same bound; when the
        estimate runs over (prose counts more characters a token than code), the worst-ranked
        lines are left out here (engine.core.prompt.context_tokens). None: no such bound (a caller that
        has no current file). `lean`: a short file's first answer, within what COLD_EXTRA_MS evaluate
        (`cold_extra`), the best-ranked lines."""
        context = request.context
        if context is None:
            return ()
        budget = self.context_budget(context, file_tokens)
        if lean and file_tokens is not None:
            budget = min(budget, self._lean_budget(context, file_tokens))
        key = (context, budget)
        laid_out = self._laid_out.get(key)
        if laid_out is None:
            laid_out = self._laid_out[key] = context_tokens(context, self._context_text_tokens, self.repo, budget)
            while len(self._laid_out) > 2:  # the whole prompt's and a first answer's
                self._laid_out.popitem(last=False)
        self._laid_out.move_to_end(key)
        return laid_out

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
        return kept_budget(self._context_budgets, context, budget if cap is None else min(budget, cap))

    def _lean_budget(self, context: RepoContext, file_tokens: int) -> int:
        """A first answer's budget for `context` (`cold_extra` at the timed speed), kept the same way
        (`kept_budget`): a faster speed timed later must not lay it out again while the keystrokes
        before the whole prompt is decoded reuse it."""
        cap = cold_cap(file_tokens, self.n_ctx, cold_extra(self._speed.ms_per_token))
        return kept_budget(self._lean_budgets, context, self.n_ctx if cap is None else cap)

    _last_before_line: tuple[str | None, int] = (None, 0)  # (text, `_before_line`'s count) of the last call

    def _before_line(self, text: str, tokens: tuple[int, ...]) -> int:
        """How many of `tokens` (the prompt `text` tokenized, BOS first) spell only text before the
        start of its last line: a token that crosses the line's start is not counted (a count
        that errs low, and that every keystroke of the line shares). Remembered for the last text."""
        if self._last_before_line[0] == text:
            return self._last_before_line[1]
        line_start = max(text.rfind("\n"), text.rfind("\r")) + 1
        room = len(text[:line_start].encode("utf-8", "replace"))
        count = spelled = 0
        pieces = self.vocab.pieces
        body = tokens[len(self._bos) :]
        if body and pieces[body[0]].startswith(b" ") and not text.startswith(" "):
            room += 1  # a SentencePiece tokenizer's space prefix
        for t in body:
            spelled += len(pieces[t])
            if spelled > room:
                break
            count += 1
        self._last_before_line = (text, count)
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
