"""One engine worker thread where the newest request wins.

The engine may be used from one thread only, and a completion can take a second on a small
machine, so it runs on a dedicated thread (not pygls's pool, which also reads stdin). At most one
job waits: a new one replaces it, and the one running is told to stop (the engine checks the
cancel flag between decode steps). A replaced job's future resolves at once with no completion,
so the request it belongs to answers immediately and never with a stale suggestion.

A prefetch (`prefetch`) is the lowest priority: it runs only when no request waits, decodes the
prompt a request on that document would need, and any request stops it at once (within one
decode chunk). What it decoded stays in the engine's KV cache, so the request continues from it.
A completion made after an answer was sent (`later`: its alternatives, the text past the gate's
cut) runs before a prefetch, and only a request (`submit`) or the document's closing stops it: an
edit and its prefetch do not, since the next keystroke may type along that answer and need it
(lsp_server.server waits for it then, and a request off it stops it).

Loading runs on the same thread, so completions submitted before or while a model loads simply
wait for it; once a load has failed they answer "no-model" at once. An engine that loads more on
first use (the routed default: each kind's model with its first document) reports those loads
through `on_event` too, if it has a `listen` method: `ModelLoading`, then a `LoadResult`. A failed *re*load puts the
previous model back (loaded again rather than kept beside the new one, so memory never holds
two models), and the result says so.

A model server (`modelServer`) can be down for a while and come back: a load that fails as
unreachable or timed out is tried again after a back-off (doubling, capped), and each retry's
result goes to `on_event`. A request that fails mid-way with a `ModelServerError` answers
"server" (no suggestion) and `on_event` hears a `ServerHealth` with its kind; the next request
that succeeds reports the server healthy again. `on_event` runs on the worker thread.

A request that misses its time budget ("timeout") is not a failure of the server: its keystroke
gets no suggestion, and its prompt goes on as a prefetch (with the engine's longer prefetch
budget), so the next keystroke finds it decoded. Each slow answer, and the end of such a
prefetch, is reported with how long it took (the status says "slow (N s)").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field

from engine import (
    BudgetError,
    Completion,
    CompletionRequest,
    EngineConfig,
    ModelLoadError,
    ModelServerError,
    Prefetched,
)
from lsp_server.loading import EngineLike, Event, LoadResult, ServerHealth
from lsp_server.logs import frames
from lsp_server.routing import RoutedEngine, load_engine

logger = logging.getLogger(__name__)

RETRY_KINDS = ("unreachable", "timeout")  # a load failing so is tried again: the server may come back
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 8.0


@dataclass(frozen=True)
class Answer:
    """How a job ended. `completion` is set only for a request (not a prefetch) that is "done"."""

    completion: Completion | None
    reason: str  # "done" | "superseded" | "cancelled" | "no-model" | "budget" | "server" | "failed" | "closed"
    detail: str | None = None  # for "budget" and "server": what went wrong and what to do (no text)
    model_id: str | None = None  # the identity of the model that made `completion` (Engine.model_id)


@dataclass(eq=False)
class Job:
    """One completion request on its way through the worker."""

    request: CompletionRequest
    tag: str | None = None  # the document it belongs to, so an edit can cancel it
    prefetch: bool = False  # decode the prompt only, at the lowest priority
    later: bool = False  # a completion at the lowest priority (what an answer already sent left out)
    cancel_flag: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)  # the engine has it
    future: Future[Answer] = field(default_factory=Future)
    slow_since: float | None = None  # a prefetch that goes on with a slow request sent then (monotonic)


def _resolve(future: Future, value: object) -> None:
    """Set a result unless someone (a cancelled asyncio wrapper, an earlier answer) got there first."""
    try:
        if not future.done():
            future.set_result(value)
    except InvalidStateError:
        pass


class Scheduler:
    def __init__(
        self, load: Callable[[EngineConfig], EngineLike] = load_engine, on_event: Callable[[Event], None] | None = None
    ) -> None:
        self._load_engine = load
        self.on_event = on_event
        self._cond = threading.Condition()
        self._pending: Job | None = None
        self._idle: Job | None = None  # a prefetch: runs only when nothing else waits
        self._later: Job | None = None  # a later completion: runs when no request is pending
        self._running: Job | None = None
        self._wanted: tuple[EngineConfig, list[Future[LoadResult]]] | None = None
        self._engine: EngineLike | None = None
        self._config: EngineConfig | None = None  # what `_engine` was loaded with
        self._closed = False
        self.last: Completion | None = None  # what the engine last returned, for stats
        self.last_prefetch: Prefetched | None = None
        self.prefetches_finished = 0  # prefetches that decoded their whole prompt (stats)
        self.load_error: str | None = None  # why the current model is missing, if it is
        self._retry: tuple[EngineConfig, float, float] | None = None  # config, when (monotonic), back-off
        self.server_trouble: str | None = None  # the kind of the last mid-request ModelServerError
        self._slow_since: float | None = None  # when the first of the current run of slow answers began
        self._thread = threading.Thread(target=self._work, name="cpc-engine", daemon=True)
        self._thread.start()

    # --- called from any thread -----------------------------------------------------------

    def load(self, config: EngineConfig) -> Future[LoadResult]:
        """Replace the engine. Running work stops; waiting work runs on the new model."""
        future: Future[LoadResult] = Future()
        with self._cond:
            if self._closed:
                _resolve(future, LoadResult(config, "the server is shutting down", 0.0))
                return future
            waiting = self._wanted[1] if self._wanted else []
            self._wanted = (config, [*waiting, future])
            self._retry = None  # a new load replaces any retry of an older one
            if self._running is not None:
                self._stop(self._running, "superseded")
            self._cond.notify()
        return future

    def submit(self, request: CompletionRequest, tag: str | None = None) -> Job:
        """Queue `request` as the only job; every older job stops and answers "superseded"."""
        job = Job(request, tag)
        with self._cond:
            if self._closed:
                _resolve(job.future, Answer(None, "closed"))
                return job
            for old in (self._pending, self._running, self._idle, self._later):
                if old is not None:
                    self._stop(old, "superseded")
            self._pending = job
            self._cond.notify()
        return job

    def prefetch(self, request: CompletionRequest, tag: str | None = None) -> Job:
        """Decode `request`'s prompt when the engine has nothing else to do. Replaces an older
        prefetch; never stops a request or a later completion, and any request stops it."""
        return self._when_idle(Job(request, tag, prefetch=True))

    def later(self, request: CompletionRequest, tag: str | None = None) -> Job:
        """Complete `request` when no request waits, before any prefetch: a request stops it (not
        an edit, `cancel_tag`), and it replaces an older one and a prefetch."""
        return self._when_idle(Job(request, tag, later=True))

    def _when_idle(self, job: Job) -> Job:
        with self._cond:
            if self._closed:
                _resolve(job.future, Answer(None, "closed"))
                return job
            for old in (self._idle, self._later, self._running):
                if old is not None and (old.prefetch or (old.later and job.later)):
                    self._stop(old, "superseded")
            if job.later:
                self._later = job
            else:
                self._idle = job
            self._cond.notify()
        return job

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        with self._cond:
            self._stop(job, reason)

    def cancel_tag(self, tag: str, reason: str = "superseded", later: bool = True) -> None:
        """Stop whatever work belongs to `tag` (a document that just changed, or closed); `later`
        False leaves a later completion (what an answer left out) to the next request."""
        with self._cond:
            for job in (self._pending, self._running, self._idle, self._later):
                if job is not None and job.tag == tag and (later or not job.later):
                    self._stop(job, reason)

    def close(self, timeout: float = 10.0) -> None:
        """Stop all work, close the engine, end the thread."""
        with self._cond:
            self._closed = True
            for job in (self._pending, self._running, self._idle, self._later):
                if job is not None:
                    self._stop(job, "closed")
            if self._wanted:
                for future in self._wanted[1]:
                    _resolve(future, LoadResult(self._wanted[0], "the server is shutting down", 0.0))
                self._wanted = None
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # --- the worker -------------------------------------------------------------------------

    def _stop(self, job: Job, reason: str) -> None:
        """Caller holds the lock."""
        job.cancel_flag.set()
        if self._pending is job:
            self._pending = None
        if self._idle is job:
            self._idle = None
        if self._later is job:
            self._later = None
        _resolve(job.future, Answer(None, reason))

    def _work(self) -> None:
        while True:
            with self._cond:
                while not (
                    self._closed or self._wanted or self._retry_due()
                    or ((self._pending or self._later or self._idle) and self._ready())
                ):  # fmt: skip
                    self._cond.wait(self._retry_wait())
                if self._closed:
                    break
                wanted, job, retry = self._wanted, None, None
                if wanted is not None:
                    self._wanted = None
                elif self._retry_due():
                    retry, self._retry = self._retry, None
                elif self._pending is not None:
                    job, self._pending = self._pending, None
                elif self._later is not None:
                    job, self._later = self._later, None
                else:
                    job, self._idle = self._idle, None
                self._running = job
            if wanted is not None:
                self._load(*wanted)
            elif retry is not None:
                self._load(retry[0], [], backoff=retry[2])
            elif job is not None:
                self._complete(job)
                with self._cond:
                    self._running = None
        self._close_engine()

    def _retry_due(self) -> bool:
        return self._retry is not None and time.monotonic() >= self._retry[1]

    @property
    def model_id(self) -> str | None:
        """The loaded model's identity (engine.Engine.model_id: a catalogue name or "sha256:<hex>");
        None while no model is loaded."""
        return self._engine.model_id if self._engine is not None else None

    def _retry_wait(self) -> float | None:
        """How long the worker may sleep: until the next retry, or until woken (None)."""
        return None if self._retry is None else max(0.0, self._retry[1] - time.monotonic())

    def _ready(self) -> bool:
        """A job can run (or be told there is no model) once a load has been attempted."""
        return self._engine is not None or self.load_error is not None

    def _close_engine(self) -> None:
        engine, self._engine, self._config = self._engine, None, None
        if engine is not None:
            try:
                engine.close()
            except Exception as exc:
                logger.error("closing the engine failed: %s", frames(exc))

    def _load(self, config: EngineConfig, futures: list[Future[LoadResult]], backoff: float | None = None) -> None:
        """Load `config`; `backoff` is set for a retry (the delay that preceded it)."""
        previous = self._config
        self._close_engine()
        started = time.perf_counter()
        error, kind = self._try_load(config)
        kept = None
        if error is not None and previous is not None and previous != config:
            if self._try_load(previous)[0] is None:
                kept = previous
                logger.info("the previous model is back in service")
        self.load_error = None if error is None or kept is not None else error
        self.server_trouble = None
        retry_in = None
        if error is not None and kept is None and kind in RETRY_KINDS:
            retry_in = RETRY_FIRST_S if backoff is None else min(2 * backoff, RETRY_MAX_S)
            with self._cond:
                if self._wanted is None and not self._closed:
                    self._retry = (config, time.monotonic() + retry_in, retry_in)
            logger.info("the model server is %s; trying again in %.0f s", kind, retry_in)
        result = LoadResult(config, error, time.perf_counter() - started, kept, kind, retry_in, backoff is not None)
        for future in futures:
            _resolve(future, result)
        if backoff is not None:
            self._emit(result)

    def _try_load(self, config: EngineConfig) -> tuple[str | None, str | None]:
        """Load `config` as the engine: (None, None) on success, else what went wrong and what to
        do, and the ModelServerError kind if it was one."""
        try:
            self._engine, self._config = self._load_engine(config), config
            if isinstance(self._engine, RoutedEngine):  # it loads a model per kind on first use
                self._engine.listen(self._emit)
            return None, None
        except ModelServerError as exc:
            return f"cannot load model: {exc}", exc.kind
        except ModelLoadError as exc:
            return str(exc), None
        except Exception as exc:  # a bug or an unexpected library failure: report, keep serving
            logger.error("loading the model failed: %s", frames(exc))
            return f"cannot load model: {type(exc).__name__}: {exc}", None

    def _emit(self, event: Event) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception as exc:  # a listener's bug must not end the worker
            logger.error("status listener failed: %s", frames(exc))

    def _server_health(self, kind: str | None, message: str = "") -> None:
        """Report a change of the model server's health (once per change, not per request)."""
        if kind != self.server_trouble:
            self.server_trouble = kind
            self._slow_since = None
            self._emit(ServerHealth(kind, message))

    def _budget(self) -> float | None:
        return self._config.model_server_timeout_s if self._config is not None else None

    def _slow(self, job: Job, error: ModelServerError, began: float) -> None:
        """A request (or prefetch) missed its budget: say so with the time, and let a request's
        prompt go on as a prefetch unless newer work already waits (it would carry on from there)."""
        if self.server_trouble != "timeout" or self._slow_since is None:
            self._slow_since = began  # the first slow answer since the server last answered in time
        since = self._slow_since
        self.server_trouble = "timeout"
        self._emit(ServerHealth("timeout", str(error), time.monotonic() - since, self._budget()))
        if job.prefetch or job.later:
            return
        with self._cond:
            if (
                self._pending is None
                and self._later is None
                and self._idle is None
                and not self._closed
                and not job.cancel_flag.is_set()
            ):
                self._idle = Job(job.request, job.tag, prefetch=True, slow_since=since)
                self._cond.notify()

    def _complete(self, job: Job) -> None:
        """Run a request or a prefetch; its future always resolves (a prefetch's answer carries
        no completion: what it decoded stays in the engine's KV cache)."""
        if job.cancel_flag.is_set():
            return
        if self._engine is None:
            _resolve(job.future, Answer(None, "no-model"))
            return
        job.started.set()
        completion = None
        began = time.monotonic()
        try:
            if job.prefetch:
                self.last_prefetch = self._engine.prefetch(job.request, job.cancel_flag)
                stopped = not self.last_prefetch.finished
                self.prefetches_finished += not stopped
            else:
                completion = self._engine.complete(job.request, cancel=job.cancel_flag)
                if not job.later:
                    self.last = completion  # what stats report: the answer the client got
                stopped = completion.cancelled
        except BudgetError as exc:  # a setting, not a bug: the server tells the user
            _resolve(job.future, Answer(None, "budget", str(exc)))
            return
        except ModelServerError as exc:  # the server failed mid-way; the engine reconnects next time
            logger.warning("%s: model server %s", "prefetch" if job.prefetch else "completion", exc.kind)
            if exc.kind == "timeout":
                self._slow(job, exc, began)
            else:
                self._server_health(exc.kind, str(exc))
            _resolve(job.future, Answer(None, "server", str(exc)))
            return
        except (
            ModelLoadError
        ) as exc:  # a model loaded on first use failed (a ModelServerError is caught above; reported by its LoadResult)
            _resolve(job.future, Answer(None, "no-model", str(exc)))
            return
        except Exception as exc:
            logger.error("%s failed: %s", "prefetch" if job.prefetch else "completion", frames(exc))
            _resolve(job.future, Answer(None, "failed"))
            return
        if stopped or job.cancel_flag.is_set():
            _resolve(job.future, Answer(None, "cancelled"))
            return
        if job.prefetch:
            if job.slow_since is not None and self.server_trouble == "timeout" and self._slow_since is not None:
                self._emit(
                    ServerHealth("timeout", "", time.monotonic() - self._slow_since, self._budget(), caught_up=True)
                )
        elif self.server_trouble is not None:
            self._server_health(None)
        # read right after the call, on this thread: a routed engine says which of its models answered
        _resolve(job.future, Answer(completion, "done", model_id=self.model_id))
