"""Generation: sample a sequence's pieces into text until the end, a stop sequence, a line break,
the end of a block, the token budget or a cancel (the stop rules of one completion)."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.core.prompt import header_line
from engine.core.sequence import Sequence
from engine.core.stops import first_stop
from engine.types import CompletionRequest

LINE_BREAKS = ("\n", "\r")


@dataclass
class Generated:
    """What `generate` made: the text, why it stopped, and per sampled token (bytes, log-prob)."""

    text: str = ""
    reason: str = "cancelled"
    generated: int = 0
    logprobs: list[float] = field(default_factory=list)  # every token's, when the request asks
    steps: list[tuple[bytes, float]] = field(default_factory=list)  # sampled (not forced) tokens
    first_token: tuple[int, ...] = ()  # the first sampled token (the "covering" when none is required)


def generate(
    seq: Sequence,
    request: CompletionRequest,
    required_bytes: int,
    headers: bool = False,
    hidden: Callable[[Generated], bool] | None = None,
) -> Generated:
    """Sample until end, stop sequence, line break, budget or cancel. A token counts against
    `max_tokens` when it adds bytes beyond the required prefix (what the user already typed).
    `headers`: the prompt names other files in comment lines, and a line like them ends it too.
    `hidden`: asked after a token that may confirm a word end (its text has a non-word character);
    True ends generation there ("hidden": nothing more of it could be shown)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    produced = 0
    gen = Generated()
    text = ""
    counted = 0
    while counted < request.max_tokens:
        result = seq.sample_next(request.sampling.logprobs, horizon=request.max_tokens - counted, free_logprob=True)
        if result.was_cancelled:
            return replace(gen, text=text, reason="cancelled")
        if not result.forced and not gen.first_token and result.token is not None:
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
        cut = cut_text(text, free_from, request, headers)
        if cut is not None:
            return replace(gen, text=cut[0], reason=cut[1])
        if (
            hidden is not None
            and seq.required_satisfied
            and _may_end_word(result.piece)
            and hidden(replace(gen, text=text))
        ):
            return replace(gen, text=text, reason="hidden")
    return replace(gen, text=text, reason="length")


def cut_text(text: str, free_from: int, request: CompletionRequest, headers: bool = False) -> tuple[str, str] | None:
    """Where generated text ends early: a stop sequence, a file's header line (with `headers`,
    engine.core.prompt.header_line) or, in single-line mode, a line break (multi-line: a line
    indented below `indent_floor`, the end of the block)."""
    free = text[free_from:]
    found = first_stop(free, request.stop) if request.stop else None
    ends = []
    if found is not None:
        ends.append((found[0], "stop"))
    if headers and (header := header_line(free)) is not None:
        ends.append((header, "stop"))
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


def _may_end_word(piece: bytes) -> bool:
    """A piece with a byte that is not a word character's may confirm a word end."""
    return any(not (chr(b).isalnum() or b == 0x5F or b >= 0x80) for b in piece)


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
