"""The one path from a cursor to a suggestion, shared by the server and `python -m lsp_server complete`.

`request_for` turns a split document into what the engine is asked; `suggestion_for` turns the
engine's answer back into the text that replaces the partial word. Neither knows about LSP
positions or threads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine import Completion, CompletionRequest, RepoContext
from lsp_server import block as blocks
from lsp_server import line_end
from lsp_server.block import Block
from lsp_server.confidence_gate import CALIBRATION, Calibration, at_line_start, confident_length, cursor_class
from lsp_server.settings import Settings
from lsp_server.split import LINE_BREAKS, Split


@dataclass(frozen=True)
class Suggestion:
    """Replace ``document[word_start:cursor]`` (the partial word) with `insert_text`."""

    word_start: int
    cursor: int
    insert_text: str  # the partial word followed by what the model adds


# The last character of a finished line: after it at the line's end, what comes next is a new line.
LINE_FINISHERS = frozenset(";{}:)],")


def fim_order_at(split: Split, order: str) -> str:
    """The FIM layout for a request at `split`. `psm-line` keeps the cursor's line in the middle,
    where the model goes on with that line: right for a line being written (a new word decodes
    only itself), wrong at the end of a finished one (the cursor right after `;`, `{`, `:`, `)`...,
    nothing after it on its line), where on the 0.5B it added a comment to the line instead of
    starting the next one or the block's body (tests/lsp_server/test_block_code_model.py). There
    the middle begins at the cursor (`psm`), as the model was trained; the next keystroke is
    usually a new line, which decodes the text after the cursor again in either layout. With
    nothing after the cursor (typing at a file's end) `psm` too: no suffix to decode again, and
    the 0.5B wrote fewer of the names other files define with the line in the middle (held-out
    cross-file replay, docs/decisions.md)."""
    if order != "psm-line":
        return order
    if not (split.after or "").strip():
        return "psm"
    if split.required or split.prompt[-1:] not in LINE_FINISHERS:
        return order
    return "psm" if not split.suffix.strip() else order


def request_for(
    split: Split,
    settings: Settings,
    candidates: tuple[str, ...] = (),
    block: Block | None = None,
    alternatives: int = 0,
    context: RepoContext | None = None,
    language: str | None = None,
    document: str | None = None,
    next_line: bool = False,
) -> CompletionRequest:
    """The engine request for `settings.method`: "exact" (the covering search), "mask" (per-step
    masking, kept for comparison) or "naive" (the partial word left in the prompt, no constraint; with a
    FIM model it ends the prefix, before the text after the cursor, as llama.vim, Continue and
    Tabby send it).
    `candidates` (document words beginning with the typed word) go with "exact" and `lexicon` only.
    With `block` the suggestion may span lines (`multiLineTokens`), ending where the block does.
    `alternatives`: other first words to ask for (engine.alternatives; they may cost decodes).
    `context`: other files' chunks (lsp_server.context) laid out before the current file.
    `language`: the document's languageId, which picks the default model (lsp_server.routing).
    `document`: its URI, which keeps it on one model server (the engine sends only a salted hash).
    `next_line` (the cursor ends a line, no block expected; lsp_server.block.ends_line): a model
    that ends the line at once goes on to the next line (`shaping_block` then shapes it)."""
    naive = settings.method == "naive"
    sampling = settings.sampling()
    max_tokens = settings.max_tokens
    if block is not None:
        sampling = replace(sampling, single_line=False)
        max_tokens = max(1, min(settings.multi_line_tokens, settings.context_tokens // 2))
    return CompletionRequest(
        prompt=split.prompt + split.required if naive else split.prompt,
        required="" if naive else split.required,
        max_tokens=max_tokens,
        stop=settings.stop,
        sampling=sampling,
        max_cover_decodes=settings.max_cover_decodes,
        exact=settings.method == "exact",
        suffix=split.after,
        suffix_tokens=settings.fim_suffix_tokens,
        first_window=settings.first_window_tokens if settings.prefetch else 0,  # the prefetch decodes the rest
        fim_order=fim_order_at(split, settings.fim_order),
        candidates=candidates if settings.lexicon and settings.method == "exact" else (),
        lexicon_prior=settings.lexicon_prior,
        lexicon_decodes=settings.lexicon_decodes,
        indent_floor=None if block is None else block.floor,
        next_line=next_line and block is None,
        alternatives=alternatives,
        language=language,
        context=context,
        document=document,
    )


def shaping_block(
    block: Block | None,
    next_line: bool,
    text: str,
    cursor: int,
    split: Split,
    completion: Completion,
    naive: bool = False,
) -> Block | None:
    """What shapes the answer to a request made with `block` and `next_line` (`request_for`) at
    `cursor` of `text`: the request's block, or, when the model ended the cursor's line at once
    and went on, the next line's (lsp_server.block.below)."""
    if block is not None or not next_line:
        return block
    added = completion.text if naive else completion.text[len(split.required) :]
    first = _first_line(added)
    return blocks.below(text, cursor) if len(first) < len(added) and not first.strip() else None


def suggestion_for(
    split: Split,
    completion: Completion,
    *,
    block: Block | None = None,
    naive: bool = False,
    min_confidence: float = 0.0,
    calibration: Calibration = CALIBRATION,
) -> Suggestion | None:
    """What to show, or None when the completion adds nothing usable.

    A completion that does not begin with the required prefix (the engine dropped the
    constraint) would not finish the user's word, so it is not shown. With `naive`, the
    completion continues the text at the cursor (the required prefix was left in the prompt).
    Without `block` the suggestion is one line; with it, lines cut by `lsp_server.block.shape`.
    With `min_confidence` > 0 the confidence gate (lsp_server.confidence_gate) cuts it at the last word it
    trusts (`calibration`: another fit, for the bench), and a multi-line one after the last whole
    line it trusts; a completion without signals is not gated.
    """
    text = split.required + completion.text if naive else completion.text
    if completion.cancelled or not text.startswith(split.required):
        return None
    added = text[len(split.required) :]
    first = _first_line(added)
    cut = stop_before_suffix(first, split.suffix, _line_before(split))
    multi = block is not None and cut == first  # cut short on its first line: it ends there
    if not multi:
        added = cut
    kept = None
    if min_confidence > 0 and completion.signals is not None:
        offset = 0 if naive else len(split.required)  # where `added` starts in completion.text
        keep = confident_length(
            completion.text, offset, completion.signals, cursor_class(split),
            min_confidence, offset + len(added), calibration, at_line_start(split),
        )  # fmt: skip
        kept = line_end.through_closers(added, max(0, keep - offset), split.suffix)
    if multi and block is not None:
        added = blocks.shape(added, block, kept)
    elif kept is not None:
        added = added[:kept]
    if not added.strip():
        return None
    return Suggestion(split.word_start, split.cursor, split.word + added)


def suggestions_for(
    split: Split,
    completion: Completion,
    *,
    block: Block | None = None,
    naive: bool = False,
    min_confidence: float = 0.0,
    calibration: Calibration = CALIBRATION,
) -> list[Suggestion]:
    """The suggestion and the engine's alternatives (other ways to finish the typed word, each to
    its word's end), most probable first, distinct: the items to cycle through. Each is made as
    `suggestion_for` makes one (an alternative on one line). The confidence gate judges the first
    item, the one shown unasked: when it hides that, nothing is shown; the alternatives, seen only
    when the user cycles to them, are not gated (they are less probable by nature)."""
    gate: dict = {"naive": naive, "calibration": calibration}
    found = [suggestion_for(split, completion, block=block, min_confidence=min_confidence, **gate)]
    if found[0] is None:
        return []
    for alternative in completion.alternatives:
        other = replace(completion, text=alternative.text, signals=alternative.signals, alternatives=())
        found.append(suggestion_for(split, other, **gate))
    distinct: dict[str, Suggestion] = {}
    for suggestion in found:
        if suggestion is not None and suggestion.insert_text not in distinct:
            distinct[suggestion.insert_text] = suggestion
    return list(distinct.values())


def _first_line(text: str) -> str:
    for i, ch in enumerate(text):
        if ch in LINE_BREAKS:
            return text[:i]
    return text


def stop_before_suffix(added: str, suffix: str, line_before: str = "") -> str:
    """Cut `added` where it starts to retype the rest of the line, so accepting it duplicates
    nothing and leaves out nothing the line needs (`lsp_server.line_end.meet`); `line_before`: the
    line up to the cursor, for the pairs."""
    return line_end.meet(line_before, added, suffix)


def _line_before(split: Split) -> str:
    """The cursor's line up to the cursor (the prompt may be the whole document before it)."""
    return split.prompt[split.prompt.rfind("\n") + 1 :] + split.required
