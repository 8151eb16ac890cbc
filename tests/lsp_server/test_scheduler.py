"""Newest request wins, on one worker thread. A fake engine stands in: this tests scheduling logic only."""

import threading
import time

from engine import CompletionRequest, EngineConfig, ModelLoadError
from lsp_server.scheduler import Scheduler
from tests.fixtures import FakeEngine
from tests.fixtures import loaded_scheduler as loaded

WAIT = 5.0


def test_a_job_runs_on_the_dedicated_thread():
    engine = FakeEngine()
    scheduler = loaded(engine)
    answer = scheduler.submit(CompletionRequest("p", "r")).future.result(WAIT)
    assert answer.reason == "done" and answer.completion.text == "r done"
    assert engine.threads == {"cpc-engine"}
    assert scheduler.last is answer.completion
    scheduler.close()
    assert engine.closed


def test_a_new_request_supersedes_the_running_one_at_once():
    engine = FakeEngine(block=True)
    scheduler = loaded(engine)
    first = scheduler.submit(CompletionRequest("first"))
    assert engine.started.wait(WAIT)
    engine.block = False
    second = scheduler.submit(CompletionRequest("second"))
    assert first.future.result(WAIT).reason == "superseded"
    assert first.cancel_flag.is_set()
    assert second.future.result(WAIT).reason == "done"
    scheduler.close()


def test_a_queued_request_is_replaced_and_never_runs():
    engine = FakeEngine(block=True)
    scheduler = loaded(engine)
    running = scheduler.submit(CompletionRequest("running"))
    assert engine.started.wait(WAIT)
    queued = scheduler.submit(CompletionRequest("queued"))
    engine.block = False
    newest = scheduler.submit(CompletionRequest("newest"))
    assert running.future.result(WAIT).reason == "superseded"
    assert queued.future.result(WAIT).reason == "superseded"
    assert newest.future.result(WAIT).reason == "done"
    assert "queued" not in engine.calls
    scheduler.close()


def test_cancel_by_document_and_by_job():
    engine = FakeEngine(block=True)
    scheduler = loaded(engine)
    job = scheduler.submit(CompletionRequest("p"), tag="file:///a")
    assert engine.started.wait(WAIT)
    scheduler.cancel_tag("file:///b")
    assert not job.future.done()
    scheduler.cancel_tag("file:///a")
    assert job.future.result(WAIT).reason == "superseded"
    other = scheduler.submit(CompletionRequest("q"))
    scheduler.cancel(other)
    assert other.future.result(WAIT).reason == "cancelled"
    scheduler.close()


def test_requests_wait_for_the_load():
    gate = threading.Event()
    engine = FakeEngine()

    def slow_load(config):
        assert gate.wait(WAIT)
        return engine

    scheduler = Scheduler(slow_load)
    early = scheduler.submit(CompletionRequest("before any load"))
    loading = scheduler.load(EngineConfig())
    time.sleep(0.05)
    assert not early.future.done()
    gate.set()
    assert loading.result(WAIT).ok
    assert early.future.result(WAIT).reason == "done"
    scheduler.close()


def test_a_failed_load_answers_no_model_and_never_hangs():
    def broken(config):
        raise ModelLoadError("/nope.gguf", "file not found", "Set cpcLsp.model to a GGUF file")

    scheduler = Scheduler(broken)
    result = scheduler.load(EngineConfig()).result(WAIT)
    assert not result.ok and "/nope.gguf" in result.error and "Set cpcLsp.model" in result.error
    assert scheduler.submit(CompletionRequest("p")).future.result(WAIT).reason == "no-model"
    scheduler.close()


def test_reload_closes_the_old_engine_and_engine_errors_do_not_kill_the_worker():
    engines = [FakeEngine(), FakeEngine()]
    scheduler = Scheduler(lambda config: engines.pop(0))
    first = engines[0]
    scheduler.load(EngineConfig()).result(WAIT)
    scheduler.load(EngineConfig(context_tokens=1024)).result(WAIT)
    assert first.closed
    second = scheduler._engine
    second.complete = lambda request, cancel: 1 / 0
    assert scheduler.submit(CompletionRequest("p")).future.result(WAIT).reason == "failed"
    second.complete = FakeEngine().complete
    assert scheduler.submit(CompletionRequest("p")).future.result(WAIT).reason == "done"
    scheduler.close()


def test_close_answers_everything():
    engine = FakeEngine(block=True)
    scheduler = loaded(engine)
    job = scheduler.submit(CompletionRequest("p"))
    assert engine.started.wait(WAIT)
    scheduler.close()
    assert job.future.result(WAIT).reason == "closed"
    assert scheduler.submit(CompletionRequest("late")).future.result(WAIT).reason == "closed"
    assert not scheduler.load(EngineConfig()).result(WAIT).ok


def test_a_later_completion_waits_for_requests_and_only_a_request_stops_it():
    """`later` (what an answer sent left out) runs when no request waits, before a prefetch: an
    edit (`cancel_tag(later=False)`) and its prefetch leave it (the next keystroke may type along
    that answer), a request or the document's closing stops it; stats report the client's answer."""
    engine = FakeEngine(block=True)
    scheduler = loaded(engine)
    answered = scheduler.submit(CompletionRequest("p", "r"))
    assert engine.started.wait(WAIT)
    later = scheduler.later(CompletionRequest("later"), tag="doc")
    assert not later.future.done() and engine.calls == ["p"]  # it waits for the request
    engine.block = False
    assert answered.future.result(WAIT).reason == "done"
    assert later.future.result(WAIT).reason == "done" and engine.calls == ["p", "later"]
    assert scheduler.last is answered.future.result().completion

    engine.block = True
    engine.started.clear()
    job = scheduler.later(CompletionRequest("later"), tag="doc")
    assert engine.started.wait(WAIT)
    scheduler.cancel_tag("doc", later=False)  # an edit
    edit = scheduler.prefetch(CompletionRequest("edit"), tag="doc")
    assert not job.cancel_flag.is_set() and not edit.future.done()
    engine.block = False
    assert job.future.result(WAIT).reason == "done"
    assert edit.future.result(WAIT).reason == "done" and engine.prefetched[-1:] == ["edit"]  # the prefetch after it

    engine.block = True
    for stop in (
        lambda: scheduler.submit(CompletionRequest("q")),
        lambda: scheduler.cancel_tag("doc"),  # closed
    ):
        engine.started.clear()
        job = scheduler.later(CompletionRequest("later"), tag="doc")
        assert engine.started.wait(WAIT)
        stop()
        assert job.future.result(WAIT).reason == "superseded" and job.cancel_flag.is_set()
    engine.block = False
    scheduler.close()
