"""The completion pipeline: from a document and a cursor to the suggestions to show, without LSP.

    Pipeline.begin   a snapshot at a cursor -> `Now` (the rest of a suggestion already shown, or
                     one the gate cut judged again: no engine work) or `Ask` (the engine request:
                     split, block, document words, other files' context)
    Pipeline.finish  the engine's answer to an `Ask` -> the suggestions to show (the gate, block
                     shaping, alternatives), remembered for carrying and judging again

The language server (lsp_server.server) only converts LSP positions to offsets around it and runs
the engine on its scheduler; `python -m lsp_server complete` and the benchmarks take the same
steps, so they show what the editor shows. `snapshot`, `ask` and `shape` are the stateless steps
(a benchmark that measures one case at a time calls them with the stages it leaves out turned off
in its settings); `Pipeline` adds what lives across keystrokes: the carry, the gate last used and
the counts the stats report.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from urllib.parse import unquote

from engine import Completion, CompletionRequest, RepoContext
from lsp_server import block as blocks
from lsp_server import confidence_gate as gates
from lsp_server import rejudge
from lsp_server.block import Block
from lsp_server.carry import Carry, Computed
from lsp_server.context import ContextChooser
from lsp_server.document_words import Lexicon
from lsp_server.documents import Document, Documents
from lsp_server.logs import frames
from lsp_server.settings import Settings
from lsp_server.split import Split, split
from lsp_server.suggestion import Suggestion, request_for, shaping_block, suggestion_for, suggestions_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Selected:
    """The item highlighted in an open completion menu: its `text` replaces the offsets
    [start, end) of the document (the request reads the text as if it were accepted)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Snapshot:
    """A document at a cursor, as the pipeline reads it."""

    uri: str
    doc: Document
    cursor: int  # in doc.text
    text: str  # doc.text, or with the selected item in place
    at: int  # the cursor in `text`
    start: int | None  # where the selected item's range starts; None: no item selected
    parts: Split


@dataclass(frozen=True)
class Now:
    """An answer with no engine work: the rest of what was shown (`carried`), or a completion the
    gate cut judged again (`suggestions` empty when the gate still hides it)."""

    suggestions: list[Suggestion]
    carried: bool


@dataclass(frozen=True)
class Ask:
    """The engine request for a snapshot, and what shaping its answer needs."""

    request: CompletionRequest
    snapshot: Snapshot
    settings: Settings
    block: Block | None
    next_line: bool


def with_selected(text: str, cursor: int, selected: Selected) -> tuple[str, int, int]:
    """(`text` with the selected item's text in place of its range, the cursor in that text,
    where the range starts). A range past the cursor ends at it; one after it is ignored."""
    start = min(selected.start, cursor)
    end = max(start, min(selected.end, cursor))
    return text[:start] + selected.text + text[end:], cursor + len(selected.text) - (end - start), start


def snapshot(uri: str, doc: Document, cursor: int, settings: Settings, selected: Selected | None = None) -> Snapshot:
    """`doc` at `cursor`, split as the request will be (`settings.fim_suffix_lines`)."""
    text, at, start = doc.text, cursor, None
    if selected is not None:
        text, at, start = with_selected(doc.text, cursor, selected)
    return Snapshot(uri, doc, cursor, text, at, start, split(text, at, settings.fim_suffix_lines or None))


def ask(
    snap: Snapshot, settings: Settings, candidates: tuple[str, ...] = (), context: RepoContext | None = None
) -> Ask:
    """The engine request at `snap`: the block the suggestion may write (settings.line_mode), the
    document words beginning with the typed word (`candidates`), other files' `context`."""
    block = blocks.at(snap.text, snap.at, settings.line_mode())
    next_line = blocks.next_line_at(snap.text, snap.at, settings.line_mode())
    request = request_for(
        snap.parts, settings, candidates, block, alternatives=settings.alternatives, context=context,
        language=snap.doc.language_id, document=snap.uri, next_line=next_line,
    )  # fmt: skip
    if block is None and settings.method == "exact" and settings.min_confidence != 0:
        request = replace(request, hidden=gates.hidden_check(snap.parts, settings.min_confidence))
    return Ask(request, snap, settings, block, next_line)


def gate_of(settings: Settings, model: str | None) -> tuple[gates.ModelGate, float]:
    """The gate of the model with identity `model` (lsp_server.confidence_gate) and the threshold in force."""
    gate = gates.gate_for(model)
    return gate, gates.threshold(gate, settings.min_confidence)


def shape(ask: Ask, completion: Completion, model: str | None) -> tuple[Block | None, list[Suggestion]]:
    """The engine's answer to `ask` as suggestions (most probable first; offsets in the
    snapshot's text) and the block that shaped them: cut by the gate of `model`."""
    snap, settings = ask.snapshot, ask.settings
    gate, min_confidence = gate_of(settings, model)
    naive = settings.method == "naive"
    block = shaping_block(ask.block, ask.next_line, snap.text, snap.at, snap.parts, completion, naive)
    found = suggestions_for(
        snap.parts, completion, block=block, naive=naive,
        min_confidence=min_confidence, calibration=gate.calibration,
    )  # fmt: skip
    return block, found


class Pipeline:
    """The completion path of one language server (or one command-line run): the documents and
    their words, other files' context, and what was shown per document (lsp_server.carry)."""

    def __init__(self, documents: Documents, lexicon: Lexicon, context: ContextChooser) -> None:
        self.documents = documents
        self.lexicon = lexicon
        self.context = context
        self.carry = Carry()  # the last suggestions shown per document, for what is left after an accept
        self.carried = 0  # requests answered from a shown suggestion, with no engine work
        self.judged_again = 0  # requests answered from a suggestion the gate cut, judged again (no engine work)
        self.engine_answers = 0  # requests the engine answered
        self.made_later = 0  # answers whose left-out part (`more`) was made after them and kept
        self.last_gate: tuple[gates.ModelGate, float] | None = None  # the gate and threshold used last, for stats

    @classmethod
    def fresh(cls, settings: Settings, context: ContextChooser | None = None) -> Pipeline:
        """A pipeline with no document open yet (the document words counted if `settings.lexicon`);
        other files' context chosen by `context` (on the caller's thread when None)."""
        lexicon = Lexicon(settings.lexicon)  # the words of the open documents, kept by `documents`
        return cls(Documents(lexicon), lexicon, context or ContextChooser())

    def begin(
        self,
        uri: str,
        doc: Document,
        cursor: int,
        settings: Settings,
        selected: Selected | None = None,
        invoked: bool = False,
    ) -> Now | Ask:
        """What to do for a request at `cursor` of `doc`: answer now, or ask the engine. With
        `selected`, the text is read as if that item replaced its range (nothing is carried).
        `invoked` (the user asked, e.g. for the next item) where what is shown has no
        alternatives (not yet made, `more`, or not carried along): the engine is asked for them."""
        snap = snapshot(uri, doc, cursor, settings, selected)
        text, parts = snap.text, snap.parts
        rest = self.carry.rest(uri, text, cursor) if selected is None else None
        if rest is not None and not (invoked and settings.alternatives > 0 and len(rest) < 2):
            self.carried += 1
            self.carry.moved(uri, text, cursor, rest)
            return Now([Suggestion(parts.word_start, cursor, parts.word + added) for added in rest], carried=True)
        if selected is None and (again := self._judge_again(uri, text, cursor, parts, settings)) is not None:
            return Now(again, carried=False)
        self.carry.forget(uri)
        candidates = self.lexicon.candidates(parts.word) if settings.lexicon else ()
        context = self.context_for(uri, doc, cursor, settings)
        return ask(snap, settings, candidates, context)

    def finish(self, asked: Ask, completion: Completion | None, model_id: str | None) -> list[Suggestion]:
        """The suggestions to show for the engine's answer to `asked` (None: it gave none), in the
        document's own offsets; remembered for the next keystrokes."""
        if completion is None:
            return []
        self.engine_answers += 1
        snap = asked.snapshot
        model = gates.identity(model_id)
        self.last_gate = gate_of(asked.settings, model)
        naive = asked.settings.method == "naive"
        block, found = shape(asked, completion, model)
        if snap.start is None and not naive:
            self._keep_if_cut(snap.uri, snap.text, snap.cursor, snap.parts, completion, block, found, model)
        if not found:
            return []
        if snap.start is not None:  # back to the document's own text: each item replaces the selected range too
            start, text = snap.start, snap.text
            return [
                Suggestion(
                    min(start, f.word_start), snap.cursor, text[min(start, f.word_start) : f.word_start] + f.insert_text
                )
                for f in found
            ]
        self._remember(snap, completion, found)
        return found

    def _remember(self, snap: Snapshot, completion: Completion, found: list[Suggestion]) -> None:
        """What is shown at the snapshot's cursor, for carrying (lsp_server.carry)."""
        added = tuple(f.insert_text[len(snap.parts.word) :] for f in found)
        made = completion.stats
        complete = completion.stop_reason != "length"  # a gate's cut ("hidden") is judged again, not carried further
        self.carry.remember(snap.uri, snap.text, snap.cursor, added, complete, made.fim, made.fim_line)

    def more(self, asked: Ask, completion: Completion, model_id: str | None) -> None:
        """The answer to `asked` made again with what its first making left for later (the
        alternatives: CompletionRequest.alternatives_later; the text past what the gate could show:
        CompletionRequest.hidden), after it was sent: kept for the next keystrokes (cycling to an
        alternative, typing along either, judged again) while what the document shows is still
        that answer's first item, or while the user types along what the gate cut of it (the
        completion kept then is still that answer's). The item shown is never changed by it."""
        snap = asked.snapshot
        if snap.start is not None or asked.settings.method == "naive":
            return
        model = gates.identity(model_id)
        block, found = shape(asked, completion, model)
        first = found[0].insert_text[len(snap.parts.word) :] if found else None
        shown = self.carry.shown(snap.uri, snap.text, snap.cursor)
        showing = (shown[0] if shown else None) == first
        if not (showing or self.carry.kept_at(snap.uri, snap.text, snap.cursor)):
            return
        self._keep_if_cut(snap.uri, snap.text, snap.cursor, snap.parts, completion, block, found, model)
        if found and showing:
            self._remember(snap, completion, found)
        self.made_later += 1

    def needs_rest(self, uri: str, text: str, cursor: int) -> bool:
        """A request at `cursor` of `text` types along what the gate cut of the last answer (not
        along what it shows: that is carried): judged again, it reads that answer's rest."""
        return self.carry.rest(uri, text, cursor) is None and self.carry.typed_along(uri, text, cursor) is not None

    def prefetch_request(self, uri: str, doc: Document, cursor: int, settings: Settings) -> CompletionRequest | None:
        """The prompt a request at `cursor` will likely need, for the idle engine to decode; None
        while the document's first context is being chosen (lsp_server.context.Background)."""
        parts = split(doc.text, cursor, settings.fim_suffix_lines or None)
        context = self.context_for(uri, doc, cursor, settings, carried=False)
        if self.context.waiting(unquote(uri)):
            return None
        return request_for(parts, settings, context=context, language=doc.language_id, document=uri)

    def forget(self, uri: str | None = None) -> None:
        """What was shown and computed in one document (closed), or in all (new settings)."""
        self.carry.forget(uri)

    def context_for(
        self, uri: str, doc: Document, cursor: int, settings: Settings, carried: bool = True
    ) -> RepoContext | None:
        """Other files' chunks for `doc`'s prompt (lsp_server.context); None when the setting is
        off. `carried`: a request carries it (not a prefetch). A failure there costs the context,
        never the suggestion."""
        budget = min(settings.extra_context_tokens, settings.context_tokens // 2)  # the engine's cap (CONTEXT_SHARE)
        if not settings.extra_context or budget <= 0:
            return None
        try:
            return self.context.context_for(
                unquote(uri), doc, cursor, self.documents.items(), budget, settings.context_tokens, carried
            )
        except Exception as exc:
            logger.error("choosing context failed: %s", frames(exc))
            return None

    def gate(self, settings: Settings, model: str | None) -> tuple[gates.ModelGate, float]:
        """The gate of the model with identity `model` (lsp_server.confidence_gate) and the threshold in force."""
        self.last_gate = gate_of(settings, model)
        return self.last_gate

    def _keep_if_cut(
        self,
        uri: str,
        text: str,
        cursor: int,
        parts: Split,
        completion: Completion,
        block: Block | None,
        found: list[Suggestion],
        model: str | None,
    ) -> None:
        """Keep the whole completion when the gate hid it or part of it, or when it has
        alternatives (carry.Computed): typing along either is judged again, not shown unjudged."""
        whole = suggestion_for(parts, completion, block=block)
        cut = whole is not None and (not found or found[0].insert_text != whole.insert_text)
        kept = cut or bool(completion.alternatives)
        self.carry.keep(uri, Computed(text, cursor, parts.required, completion, model, cut) if kept else None)

    def _judge_again(
        self, uri: str, text: str, cursor: int, parts: Split, settings: Settings
    ) -> list[Suggestion] | None:
        """What to show when the user typed along a completion the gate cut (or one of its
        alternatives), judged again from what was computed (lsp_server.rejudge): the items ([]
        when the gate still hides it), or None when there is no such completion or nothing of it
        is left (the engine answers)."""
        found = self.carry.typed_along(uri, text, cursor)
        if found is None:
            return None
        kept, typed, along = found
        completion = rejudge.along(along, kept.required, typed, parts)
        if completion is None:
            return None
        block = blocks.at(text, cursor, settings.line_mode())
        if suggestion_for(parts, completion, block=block) is None:
            return None  # nothing left of it to show: the engine goes on from here
        gate, min_confidence = self.gate(settings, kept.model)
        shown = suggestions_for(
            parts, completion, block=block, min_confidence=min_confidence, calibration=gate.calibration
        )
        self.judged_again += 1
        added = tuple(f.insert_text[len(parts.word) :] for f in shown)
        made = kept.completion.stats
        self.carry.remember(uri, text, cursor, added, completion.stop_reason != "length", made.fim, made.fim_line)
        return shown
