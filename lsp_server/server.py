"""The language server: thin handlers over documents, settings, the pipeline and the scheduler.

A completion request goes: document + position → offset (negotiated encoding) → the pipeline's
`begin` (an answer now, or an engine request) → scheduler (newest wins) → the pipeline's `finish`
→ items in client units. The pipeline (lsp_server.pipeline) knows nothing of LSP.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any, BinaryIO
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import FeatureRequestError
from pygls.lsp.server import LanguageServer

from engine import EngineConfig, Signals
from lsp_server import __version__, routing, status
from lsp_server.context import Background
from lsp_server.documents import UTF16, Document, Range
from lsp_server.loading import EngineLike, Event, LoadResult, ModelLoading, ServerHealth
from lsp_server.logs import TextGuard, frames, installed
from lsp_server.model_messages import clear_text_warning, model_name
from lsp_server.pipeline import Ask, Now, Pipeline, Selected
from lsp_server.protocol import CpcProtocol, serve_stdio, serve_tcp
from lsp_server.routing import load_engine
from lsp_server.scheduler import Answer, Job, Scheduler
from lsp_server.schema import camel
from lsp_server.settings import API_KEY_ENV, SECTION, Settings, apply
from lsp_server.split import Split
from lsp_server.suggestion import Suggestion

logger = logging.getLogger(__name__)

STATS_METHOD = "cpcLsp/stats"
LOAD_WAIT_SECONDS = 60.0  # how long a request waits for a model that is still loading
# How long a just-opened file's request waits for its first choice of other files' context (made
# off the loop): tens of ms on a local disk; a slow one answers without, and takes it after.
FIRST_CONTEXT_WAIT_SECONDS = 0.5
PROGRESS_WAIT_SECONDS = 5.0  # how long a load's progress bar waits for the client to accept it
TELL_AGAIN_SECONDS = 300.0  # a model server failure's message is shown again only after this long


def capability(server: LanguageServer, path: str) -> Any:
    """The client's capability at a dotted path (`text_document.inline_completion`); None if absent."""
    node: Any = getattr(server.protocol, "client_capabilities", None)
    for name in path.split("."):
        node = getattr(node, name, None)
    return node


class CpcServer(LanguageServer):
    """Holds the state the handlers share; the handlers themselves are in `build_server`."""

    def __init__(
        self,
        settings: Settings | None = None,
        load: Callable[[EngineConfig], EngineLike] = load_engine,
    ) -> None:
        super().__init__(
            "cpc-lsp",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=CpcProtocol,
        )
        self.defaults = settings or Settings()
        self.settings = self.defaults
        # from a cursor to suggestions, without LSP; other files' context chosen off the event loop
        self.background = Background(on_ready=self._context_ready)  # other files' context, chosen off the loop
        self.pipeline = Pipeline.fresh(self.settings, self.background)
        self.lexicon = self.pipeline.lexicon  # the words of the open documents, kept by `documents`
        self.documents = self.pipeline.documents
        self.context = self.pipeline.context  # other files' chunks per document (lsp_server.context)
        self.scheduler = Scheduler(load, on_event=self._engine_event)
        self._loop: asyncio.AbstractEventLoop | None = None  # the server's loop, set at initialize
        self._told: dict[str, float] = {}  # failure cause -> when it was last shown (monotonic)
        self._first_use_told = False  # a model of the routed default said "loading" since the last load began
        self.encoding = UTF16
        self.initialized = False
        self.requests = 0  # completion requests seen, for log lines and stats
        self._tasks: set[asyncio.Future] = set()
        self._budget_warned: Settings | None = None  # the settings a budget problem was shown for
        self._rests: dict[str, asyncio.Future[None]] = {}  # per document: the last answer's rest, being made
        self.log_guard = TextGuard(self.settings.log_document_text)  # on pygls's loggers while serving
        assert isinstance(self.protocol, CpcProtocol)  # protocol_cls above
        self.protocol.on_unreadable = self.unreadable_notification

    # --- running: the read loops are in `protocol`, with the other pygls overrides -------------

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        with installed(self.log_guard):
            serve_stdio(self, stdin, stdout)

    def start_tcp(self, host: str, port: int) -> None:
        with installed(self.log_guard):
            serve_tcp(self, host, port)

    def on_initialize(self, params: types.InitializeParams, loop: asyncio.AbstractEventLoop) -> None:
        """The session's start: the loop engine events go to, the position encoding pygls
        negotiated, the workspace folders, the client's settings."""
        self._loop = loop
        self.encoding = str(getattr(self.workspace.position_encoding, "value", self.workspace.position_encoding))
        folders = [f.uri for f in params.workspace_folders or ()]
        if not folders and (root := params.root_uri or params.root_path):
            folders = [root]
        self.context.set_folders(folders)
        self.apply_settings(params.initialization_options)
        logger.info("position encoding %s", self.encoding)

    # --- settings and model ----------------------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        updated, problems = apply(self.settings, raw, self.defaults)
        for problem in problems:
            logger.warning("%s", problem)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))
        previous, self.settings = self.settings, updated
        self.pipeline.forget()  # what was shown was made under the old settings
        self.log_guard.allowed = updated.log_document_text
        keys = (updated.model_server_api_key, os.environ.get(API_KEY_ENV, "").strip())
        self.log_guard.secrets = frozenset(key for key in keys if key)
        self.lexicon.enable(updated.lexicon, self.documents.texts())
        if self.initialized and updated.engine_config() != previous.engine_config():
            task = asyncio.ensure_future(self.load_model())
            self._tasks.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._tasks.discard)

    async def load_model(self) -> LoadResult:
        """Load (or reload) the model in the background, with progress if the client shows it."""
        config = self.settings.engine_config()
        name = model_name(config)
        loading = self.scheduler.load(config)
        if (warning := clear_text_warning(config.model_server)) is not None:
            self.tell(types.MessageType.Warning, warning)
        self.log(types.MessageType.Info, f"loading {name} ({config.context_tokens} context tokens)")
        status.send(self.protocol, status.loading(name))
        self._first_use_told = False
        token = await self._begin_progress(f"Loading {name}")
        result = await asyncio.wrap_future(loading)
        if token is not None:
            done = "model loaded" if result.ok else "model failed to load"
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=done))
        # The routed default's first-use load can start on the worker before this line runs (a
        # prefetch right after the load): its own loading/loaded status is then the newer truth.
        if not (result.ok and self._first_use_told):
            status.send(self.protocol, status.loaded(result, name))
        self._told.clear()  # a load the user asked for: its failure is always shown
        self._report_load(result, name)
        return result

    def _report_load(self, result: LoadResult, name: str) -> None:
        """Log a load's outcome; a failure is shown to the user, a retry's only when its cause is
        new (a server that stays down says so once, not every few seconds)."""
        if result.ok:
            model = self.scheduler.model_id
            named = f"{name} ({model})" if model and model != name else name
            if routing.routes(result.config):  # the routed default: each model loads on first use (told then)
                self.log(
                    types.MessageType.Info,
                    f"loaded {named}: their files checked in {result.seconds:.1f} s; each one's weights load with the first document of its kind",
                )
            else:
                self.log(types.MessageType.Info, f"loaded {named} in {result.seconds:.1f} s")
            return
        message = f"cpc-lsp: {result.error}"
        if result.kept is not None:
            kept = model_name(result.kept)
            message = message.rstrip(". ") + ". "
            message += f"Keeping the previous model ({kept}, {result.kept.context_tokens} context tokens)."
        if result.retry_in is not None:
            message += f" Trying again in {result.retry_in:.0f} s."
        self._tell_once(result.kind or "load", message)

    def _tell_once(self, cause: str, message: str) -> None:
        """Show `message` unless the same cause was shown within TELL_AGAIN_SECONDS (a server that
        stays down, or flaps, says so once, not on every keystroke or retry); else only log it."""
        now = time.monotonic()
        if now - self._told.get(cause, -TELL_AGAIN_SECONDS) >= TELL_AGAIN_SECONDS:
            self._told[cause] = now
            self.tell(types.MessageType.Error, message)
        else:
            self.log(types.MessageType.Info, message)

    def _engine_event(self, event: Event) -> None:
        """From the engine's thread: a retried load's result, or the model server's health."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._on_engine_event, event)

    def _on_engine_event(self, event: Event) -> None:
        if isinstance(event, ModelLoading):  # the routed default loads a kind's model on first use
            self._first_use_told = True
            name = model_name(event.config)
            self.log(types.MessageType.Info, f"loading {name} ({event.config.context_tokens} context tokens)")
            status.send(self.protocol, status.loading(name))
            return
        if isinstance(event, LoadResult):
            name = model_name(event.config)
            status.send(self.protocol, status.loaded(event, name))
            self._report_load(event, name)
            return
        now = status.serving(event, model_name(self.settings.engine_config()))
        status.send(self.protocol, now)
        self._report_health(event, now)

    def _report_health(self, health: ServerHealth, now: status.Status) -> None:
        """A model server failing mid-request is shown once per cause; its recovery is logged,
        and so is a slow prompt that has caught up."""
        if health.kind is None:
            self.log(types.MessageType.Info, "the model server answers again")
        elif health.kind == "timeout" and health.seconds is not None:
            if health.caught_up:
                self.log(types.MessageType.Info, f"cpc-lsp: {now.message}")
            else:
                self._tell_once(health.kind, f"cpc-lsp: {now.message}")
        else:
            self._tell_once(health.kind, f"cpc-lsp: {health.message}")

    async def _begin_progress(self, title: str) -> str | None:
        if not capability(self, "window.work_done_progress"):
            return None
        token = f"cpc-lsp/load/{uuid.uuid4()}"
        try:  # bounded: a client that never answers would hold back the "ready" status for good
            await asyncio.wait_for(self.work_done_progress.create_async(token), PROGRESS_WAIT_SECONDS)
        except Exception:  # the client refused or did not answer: go on without a progress bar
            logger.info("client declined a progress token")
            return None
        self.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title))
        return token

    def log(self, kind: types.MessageType, message: str) -> None:
        """To the client's log (`window/logMessage`) and to stderr."""
        level = {types.MessageType.Error: logging.ERROR, types.MessageType.Warning: logging.WARNING}
        logger.log(level.get(kind, logging.INFO), "%s", message)
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def tell(self, kind: types.MessageType, message: str) -> None:
        """Something the user must act on: shown (`window/showMessage`) and logged."""
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))
        self.log(kind, message)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls shows "Error in server: <the exception's text>" for a failed notification; that
        text can quote a document. Say what kind of failure it was and where to look instead."""
        if source is FeatureRequestError:  # the request's error answer already says it
            return
        logger.error("internal error: %s", frames(error))
        self.tell(types.MessageType.Error, f"cpc-lsp: internal error ({type(error).__name__}); see the server log")

    def unreadable_notification(self, method: str, params: Any) -> None:
        """A notification whose params could not be read. A lost didChange means our copy of the
        document no longer matches the editor's: stop suggesting there until its whole text comes
        again (didOpen, or a didChange without a range)."""
        if method != types.TEXT_DOCUMENT_DID_CHANGE:
            return
        document = params.get("textDocument") if isinstance(params, dict) else None
        uri = document.get("uri") if isinstance(document, dict) else None
        if not isinstance(uri, str) or self.documents.get(uri) is None:
            return
        self.scheduler.cancel_tag(unquote(uri))
        self.documents.mark_stale(uri)
        self.log(
            types.MessageType.Warning,
            "a change to an open document could not be read; no suggestions there until it is "
            "reopened or its whole text is sent again",
        )

    # --- completion ------------------------------------------------------------------------

    def prefetch(self, uri: str, edit: tuple[Range, int] | None) -> None:
        """Let the idle engine decode the prompt the next request here will likely need: the
        one for a cursor after the last edit (`edit`: its range and inserted length), or at the
        document's end when there is no edit position (just opened, whole text replaced). For a
        document that fits the context, the end's prompt covers any cursor's prompt as a prefix."""
        doc = self.documents.get(uri)
        if doc is None or doc.stale or not self.settings.prefetch:
            return
        cursor = len(doc.text)
        if edit is not None:
            cursor = doc.offset_at(edit[0].start_line, edit[0].start_character, self.encoding) + edit[1]
        request = self.pipeline.prefetch_request(uri, doc, cursor, self.settings)
        if request is not None:  # None: the document's first context is being chosen (_context_ready)
            self.scheduler.prefetch(request, tag=unquote(uri))

    def _context_ready(self, uri: str) -> None:
        """On the context worker: a document's first context is chosen; prefetch with it."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.prefetch, uri, None)

    async def suggest(
        self,
        uri: str,
        position: types.Position,
        selected: types.SelectedCompletionInfo | None = None,
        invoked: bool = False,
    ) -> tuple[Document, list[Suggestion]] | None:
        """The suggestions at `position` (most probable first) and the document they were made
        from; None when there is none. With `selected` (the item highlighted in an open completion
        menu), the text is read as if that item replaced its range: each suggestion begins with it.
        Answer first: unless the user asked (`invoked`), the alternatives that cost decodes of
        their own are made after the answer is sent (`_rest_later`)."""
        doc = self.documents.get(uri)
        if doc is None or doc.stale:
            return None
        self.requests += 1
        number = self.requests
        settings = self.settings
        cursor = doc.offset_at(position.line, position.character, self.encoding)
        chosen = None if selected is None else selected_in(doc, selected, self.encoding)
        if not await self._first_context(uri, doc, cursor, settings):
            logger.info("#%d superseded while the file's first context was chosen", number)
            return None
        if chosen is None and not await self._rest_of(uri, doc, cursor):
            logger.info("#%d superseded while the rest of the last answer was made", number)
            return None
        step = self.pipeline.begin(uri, doc, cursor, settings, chosen, invoked)
        if isinstance(step, Now):
            if step.carried:
                logger.info("#%d shown: the rest of the suggestion already shown (no engine work)", number)
            else:
                logger.info("#%d %s: typed along a suggestion the gate cut, judged again (no engine work)",
                            number, "shown" if step.suggestions else "hidden")  # fmt: skip
            return (doc, step.suggestions) if step.suggestions else None
        job = self.scheduler.submit(replace(step.request, alternatives_later=not invoked), tag=unquote(uri))
        try:
            answer = await self._wait(job)
        except asyncio.CancelledError:  # $/cancelRequest: re-raised, pygls answers -32800
            self.scheduler.cancel(job)
            logger.info("#%d cancelled by the client", number)
            raise
        if self.documents.get(uri) is not doc:  # edited while we worked: the answer is stale
            answer = Answer(None, "superseded")
        found = self.pipeline.finish(step, answer.completion, answer.model_id)
        made = answer.completion
        if made is not None and made.stats.first_prompt:  # the whole prompt, while the user reads
            self.scheduler.prefetch(step.request, tag=unquote(uri))
        elif made is not None and (made.stats.alternatives_deferred or made.stop_reason == "hidden"):
            self._rest_later(uri, step, made.stats.alternatives_deferred)
        if answer.completion is None and answer.reason == "budget" and self._budget_warned is not settings:
            self._budget_warned = settings  # once per settings, not on every keystroke
            self.tell(types.MessageType.Warning, f"cpc-lsp: {answer.detail}")
        parts = step.snapshot.parts
        log_answer(number, answer, parts, found[0] if found else None, settings.log_document_text, len(found))
        return (doc, found) if found else None

    def _rest_later(self, uri: str, step: Ask, alternatives: bool) -> None:
        """Make what an answer left out while the user is idle: its alternatives, for cycling to
        them, and the text past what the gate could show, for typing along it (Pipeline.more). A
        request off that answer stops it; one typing along what the gate cut waits for it
        (`_rest_of`), as it would have waited for the answer made whole. `alternatives`: the answer
        left them out (else they stay for later, as the answer had them: no decodes of their own)."""
        request = replace(step.request, hidden=None, alternatives_later=not alternatives)
        job = asyncio.wrap_future(self.scheduler.later(request, tag=unquote(uri)).future)
        rest: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._rests[uri] = rest

        def done(future: asyncio.Future[Answer]) -> None:
            answer = future.result()
            if answer.completion is not None and self.documents.get(uri) is not None:  # still open
                self.pipeline.more(step, answer.completion, answer.model_id)
            rest.set_result(None)
            if self._rests.get(uri) is rest:
                del self._rests[uri]

        job.add_done_callback(done)

    async def _rest_of(self, uri: str, doc: Document, cursor: int) -> bool:
        """Before a request that types along what the gate cut of the last answer (judged again,
        Pipeline.needs_rest): wait for that answer's rest if it is still being made. False: the
        document was edited meanwhile (a newer request follows)."""
        rest = self._rests.get(uri)
        if rest is None or rest.done() or not self.pipeline.needs_rest(uri, doc.text, cursor):
            return True
        await asyncio.shield(rest)
        return self.documents.get(uri) is doc

    async def _first_context(self, uri: str, doc: Document, cursor: int, settings: Settings) -> bool:
        """A just-opened file's request waits (off the loop, FIRST_CONTEXT_WAIT_SECONDS at most)
        for its first choice of other files' context, so it carries it from the first keystroke
        (the prefetch that would have asked for it may be off or not yet run). False: the
        document was edited meanwhile (a newer request follows)."""
        if not settings.extra_context:
            return True
        self.pipeline.context_for(uri, doc, cursor, settings, carried=False)  # asks for it if not yet asked
        key = unquote(uri)
        if not self.background.choosing_first(key):
            return True
        await asyncio.get_running_loop().run_in_executor(
            None, self.background.first_choice, key, FIRST_CONTEXT_WAIT_SECONDS
        )
        return self.documents.get(uri) is doc

    async def _wait(self, job: Job) -> Answer:
        """The job's answer. Waiting for a model to load is bounded; a running completion is
        bounded by its token budget (and by newer requests), so it is awaited to the end."""
        answer = asyncio.wrap_future(job.future)
        try:
            return await asyncio.wait_for(asyncio.shield(answer), LOAD_WAIT_SECONDS)
        except asyncio.TimeoutError:
            if job.started.is_set():
                return await answer
            self.scheduler.cancel(job, "timeout")
            return Answer(None, "timeout: no model after waiting")

    def stats(self) -> dict[str, Any] | None:
        """The last engine call's diagnostics, without text."""
        last = self.scheduler.last
        if last is None:
            return None
        numbers = {camel(k): v for k, v in asdict(last.stats).items()}
        return {
            **numbers,
            "model": self.scheduler.model_id,
            "stopReason": last.stop_reason,
            "requiredSatisfied": last.required_satisfied,
            "requests": self.requests,
            "engineAnswers": self.pipeline.engine_answers,
            "carried": self.pipeline.carried,
            "contextChoices": self.context.choices,
            "judgedAgain": self.pipeline.judged_again,
            "madeLater": self.pipeline.made_later,
            "prefetchesFinished": self.scheduler.prefetches_finished,
            "signals": signals_json(last.signals),
            "alternatives": [signals_json(a.signals) for a in last.alternatives],  # in the items' order after the first
            "gate": gate_json(self.pipeline),
        }


def selected_in(doc: Document, selected: types.SelectedCompletionInfo, encoding: str) -> Selected:
    """The selected completion item in the document's offsets (lsp_server.pipeline.with_selected)."""
    r = selected.range
    start = doc.offset_at(r.start.line, r.start.character, encoding)
    end = doc.offset_at(r.end.line, r.end.character, encoding)
    return Selected(start, end, selected.text)


def range_of(doc: Document, found: Suggestion, encoding: str) -> types.Range:
    """The item's range in client units: from the partial word's start to the cursor."""
    start = doc.position_at(found.word_start, encoding)
    end = doc.position_at(found.cursor, encoding)
    return types.Range(types.Position(*start), types.Position(*end))


def log_answer(
    number: int, answer: Answer, parts: Split, found: Suggestion | None, with_text: bool, items: int = 1
) -> None:
    """One line per request: what the engine did, in numbers; text only when asked for."""
    if answer.completion is None:
        logger.info("#%d %s", number, answer.reason)
        return
    s = answer.completion.stats
    logger.info(
        "#%d %s: stop=%s required=%d chars prompt=%d reused=%d decoded=%d cover=%d "
        "generated=%d alternatives=%d ms=%.0f",
        number, "shown" if found else "nothing to add", answer.completion.stop_reason,
        len(parts.required), s.prompt_tokens, s.reused_tokens, s.decoded_tokens,
        s.cover_decodes, s.generated_tokens, max(0, items - 1), s.ms,
    )  # fmt: skip
    if with_text:
        logger.debug("#%d required=%r suggestion=%r", number, parts.required, found)


def gate_json(pipeline: Pipeline) -> dict[str, Any] | None:
    """Which calibration the gate used last and the threshold in force then."""
    if pipeline.last_gate is None:
        return None
    gate, min_confidence = pipeline.last_gate
    return {"model": gate.model, "fitted": gate.fitted, "minConfidence": min_confidence}


def signals_json(signals: Signals | None) -> dict[str, Any] | None:
    """The confidence signals as JSON numbers (no text: offsets and log-probabilities); a margin
    with no rival known is null."""
    if signals is None:
        return None
    return {
        "wordLogProb": signals.word_log_prob,
        "margin": None if math.isinf(signals.margin) else signals.margin,
        "typedLogProb": signals.typed_log_prob,
        "wordEnds": [[end.chars, end.log_prob] for end in signals.word_ends],
        "stepEnds": [[end.chars, end.log_prob] for end in signals.step_ends],
    }


def _change_range(change: Any) -> Range | None:
    if isinstance(change, types.TextDocumentContentChangePartial):
        r = change.range
        return Range(r.start.line, r.start.character, r.end.line, r.end.character)
    return None


def build_server(
    settings: Settings | None = None,
    load: Callable[[EngineConfig], EngineLike] = load_engine,
) -> CpcServer:
    server = CpcServer(settings, load)

    @server.feature(types.INITIALIZE)
    def initialize(ls: CpcServer, params: types.InitializeParams) -> None:
        ls.on_initialize(params, asyncio.get_running_loop())

    @server.feature(types.INITIALIZED)
    async def initialized(ls: CpcServer, params: types.InitializedParams) -> None:
        if ls.initialized:  # once per session: a repeated notification must not reload the model
            logger.warning("ignoring a repeated initialized notification")
            return
        ls.initialized = True
        await ls.load_model()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: CpcServer, params: None) -> None:
        # Closing waits for the engine's thread (a completion in flight stops at its next step):
        # wait on another thread, so the event loop keeps answering meanwhile.
        await asyncio.get_running_loop().run_in_executor(None, ls.scheduler.close)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: CpcServer, params: types.DidChangeConfigurationParams) -> None:
        raw = params.settings
        if raw is None and capability(ls, "workspace.configuration"):
            query = types.ConfigurationParams([types.ConfigurationItem(section=SECTION)])
            raw = (await ls.workspace_configuration_async(query) or [None])[0]
        ls.apply_settings(raw)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: CpcServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        ls.documents.open(doc.uri, doc.text, doc.version, doc.language_id or "")
        ls.prefetch(doc.uri, None)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: CpcServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.scheduler.cancel_tag(unquote(uri), later=False)  # work on the old text is stale; an answer's rest is not
        changes = [(_change_range(c), c.text) for c in params.content_changes]
        if not ls.documents.change(uri, params.text_document.version, changes, ls.encoding):
            logger.warning("didChange for a document that is not open")
        elif changes:
            last_range, last_text = changes[-1]
            if last_range is not None:
                ls.context.workspace.edited(unquote(uri), last_range.start_line)
            ls.prefetch(uri, None if last_range is None else (last_range, len(last_text)))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: CpcServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.scheduler.cancel_tag(unquote(params.text_document.uri))
        ls.pipeline.forget(params.text_document.uri)
        key = unquote(params.text_document.uri)
        if (doc := ls.documents.get(params.text_document.uri)) is not None:
            ls.context.closed(key, doc.uri, doc.text)
        ls.context.forget(key)
        ls.documents.close(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: CpcServer, params: types.InlineCompletionParams
    ) -> list[types.InlineCompletionItem]:
        selected = params.context.selected_completion_info if params.context else None
        invoked = (
            params.context is not None and params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        )
        result = await ls.suggest(params.text_document.uri, params.position, selected, invoked)
        if result is None:
            return []
        doc, found = result
        return [
            types.InlineCompletionItem(insert_text=f.insert_text, range=range_of(doc, f, ls.encoding)) for f in found
        ]

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions())
    async def completion(ls: CpcServer, params: types.CompletionParams) -> types.CompletionList:
        """The fallback for clients without inline completion (Neovim 0.11).

        A client that has inline completion gets nothing here: answering both would make each
        keystroke's two requests supersede each other.
        """
        result = None
        if capability(ls, "text_document.inline_completion") is None:  # a menu lists the alternatives with it
            result = await ls.suggest(params.text_document.uri, params.position, invoked=True)
        if result is None:
            return types.CompletionList(is_incomplete=True, items=[])
        doc, found = result
        items = [
            types.CompletionItem(
                label=f.insert_text,
                kind=types.CompletionItemKind.Text,
                detail="cpc-lsp",
                sort_text=f"{n:02d}",  # most probable first, also past ten items
                insert_text_format=types.InsertTextFormat.PlainText,
                text_edit=types.TextEdit(range_of(doc, f, ls.encoding), f.insert_text),
            )
            for n, f in enumerate(found)
        ]
        return types.CompletionList(is_incomplete=True, items=items)

    @server.feature(STATS_METHOD)
    def stats(ls: CpcServer, params: Any) -> dict[str, Any] | None:
        return ls.stats()

    return server
