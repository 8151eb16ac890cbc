"""Prefetch is the lowest priority: it runs only when idle, and any request stops it at once.
A fake engine stands in (scheduling logic only; the real model's side is in tests/engine)."""

import threading
import time

from engine import CompletionRequest, Prefetched
from tests.fixtures import Editor, FakeEngine
from tests.fixtures import loaded_scheduler as loaded

WAIT = 5.0


class SlowPrefetch(FakeEngine):
    """A prefetch that decodes until cancelled while `hold` is set, like a long cold prompt."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.hold.set()
        self.prefetch_started = threading.Event()
        self.prefetch_stopped = threading.Event()

    def prefetch(self, request: CompletionRequest, cancel: threading.Event) -> Prefetched:
        self.prefetched.append(request.prompt)
        self.prefetch_started.set()
        while self.hold.is_set() and not cancel.is_set():
            time.sleep(0.001)
        self.prefetch_stopped.set()
        return Prefetched(10, 5, not cancel.is_set(), 1.0)


def test_an_idle_engine_prefetches_and_the_next_request_is_warm():
    engine = FakeEngine()
    scheduler = loaded(engine)
    assert scheduler.prefetch(CompletionRequest("doc"), tag="a").future.result(WAIT).reason == "done"
    answer = scheduler.submit(CompletionRequest("doc", " x"), tag="a").future.result(WAIT)
    assert engine.prefetched == ["doc"] and answer.completion.stats.decoded_tokens == 0
    assert scheduler.last is answer.completion  # stats show requests, not prefetches
    scheduler.close()


def test_a_request_stops_a_running_prefetch_and_runs_at_once():
    engine = SlowPrefetch()
    scheduler = loaded(engine)
    prefetch = scheduler.prefetch(CompletionRequest("doc"), tag="a")
    assert engine.prefetch_started.wait(WAIT)
    request = scheduler.submit(CompletionRequest("doc", " x"), tag="a")
    assert prefetch.future.result(WAIT).reason == "superseded"
    assert request.future.result(WAIT).reason == "done"
    assert engine.prefetch_stopped.is_set()
    scheduler.close()


def busy_with_a_prefetch_queued():
    """A scheduler whose engine is running a request (blocked) with a prefetch waiting behind it."""
    engine = FakeEngine(block=True)
    scheduler = loaded(engine)
    running = scheduler.submit(CompletionRequest("b", " x"), tag="b")
    assert engine.started.wait(WAIT)
    queued = scheduler.prefetch(CompletionRequest("a"), tag="a")
    return engine, scheduler, running, queued


def test_a_prefetch_never_stops_a_request_and_waits_for_it():
    engine, scheduler, running, queued = busy_with_a_prefetch_queued()
    time.sleep(0.05)  # a prefetch that stopped the request would have done so by now
    assert not running.cancel_flag.is_set() and engine.prefetched == []
    engine.block = False
    assert running.future.result(WAIT).reason == "done"
    assert queued.future.result(WAIT).reason == "done" and engine.prefetched == ["a"]
    scheduler.close()


def test_a_newer_prefetch_replaces_the_older_and_an_edit_stops_its_own():
    engine = SlowPrefetch()
    scheduler = loaded(engine)
    first = scheduler.prefetch(CompletionRequest("v1"), tag="a")
    assert engine.prefetch_started.wait(WAIT)
    second = scheduler.prefetch(CompletionRequest("v2"), tag="a")
    assert first.future.result(WAIT).reason == "superseded"
    scheduler.cancel_tag("a")
    assert second.future.result(WAIT).reason == "superseded"
    engine.hold.clear()
    scheduler.close()


def test_a_prefetch_waiting_for_a_request_is_dropped_by_the_next_request():
    engine, scheduler, running, queued = busy_with_a_prefetch_queued()
    newest = scheduler.submit(CompletionRequest("b", " xy"), tag="b")
    engine.block = False  # only now: unblocked earlier, the worker could run the prefetch first
    assert running.future.result(WAIT).reason == "superseded"
    assert queued.future.result(WAIT).reason == "superseded"
    assert newest.future.result(WAIT).reason == "done"
    assert engine.prefetched == []
    scheduler.close()


# --- the server's hooks, in process with the fake engine ----------------------------------------


def wait_for(predicate, timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def test_open_and_edit_prefetch_the_prompt_a_request_there_would_use(fake_server):
    fake_server.client.initialize({"cpcLsp": {}}, wait_loaded=True, timeout=30)
    editor = Editor(fake_server.client)
    engine = fake_server.loader.engine
    uri = "file:///tmp/prefetch/notes.txt"
    editor.open(uri, "first line\nThanks for sending over the draft yest")
    assert wait_for(lambda: engine.prefetched == ["first line\nThanks for sending over the draft"])
    editor.change(uri, "Dear team, ", (0, 0), (0, 0))  # an edit at the top: its cursor's prompt
    assert wait_for(lambda: engine.prefetched[-1] == "Dear team,")
    items = editor.inline(uri).result
    assert items and items[0]["insertText"].startswith("yesterday")


def test_the_prefetch_setting_turns_it_off(fake_server):
    fake_server.client.initialize({"cpcLsp": {"prefetch": False}}, wait_loaded=True, timeout=30)
    editor = Editor(fake_server.client)
    editor.open("file:///tmp/prefetch/off.txt", "Thanks for sending over the draft yest")
    fake_server.client.call("cpcLsp/stats")  # the didOpen has been handled (messages go in order)
    # With prefetch on, the idle engine would have prefetched within milliseconds (the test above).
    assert not wait_for(lambda: fake_server.loader.engine.prefetched, timeout=0.5)
    assert editor.inline("file:///tmp/prefetch/off.txt").result
