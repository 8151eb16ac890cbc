"""Failures inside the scheduler, with fake engines: a reload that fails puts the previous model
back (never two loaded at once), a budget that does not fit is an answer that says what to change,
an engine that throws leaves the worker serving, and an unreadable change of any shape only makes
its document stale."""

from __future__ import annotations

from pathlib import Path

from engine import BudgetError, CompletionRequest, EngineConfig
from lsp_server.scheduler import Scheduler
from tests.fixtures import FakeEngine, FakeLoader

WAIT = 5.0
GOOD, OTHER, BAD = EngineConfig(), EngineConfig(context_tokens=1024), EngineConfig(model_path=Path("/bad.gguf"))


def test_a_failed_reload_puts_the_previous_model_back():
    loader = FakeLoader()
    scheduler = Scheduler(loader)
    assert scheduler.load(GOOD).result(WAIT).ok
    result = scheduler.load(BAD).result(WAIT)
    assert not result.ok and "/bad.gguf" in result.error
    assert result.kept == GOOD and scheduler.load_error is None
    answer = scheduler.submit(CompletionRequest("p", "r")).future.result(WAIT)
    assert answer.reason == "done"
    assert [config for config, _ in loader.engines] == [GOOD, GOOD]  # closed, then loaded again
    scheduler.close()


def test_a_failed_first_load_leaves_no_model_and_requests_answer_at_once():
    scheduler = Scheduler(FakeLoader())
    result = scheduler.load(BAD).result(WAIT)
    assert not result.ok and result.kept is None and scheduler.load_error == result.error
    assert scheduler.submit(CompletionRequest("p")).future.result(WAIT).reason == "no-model"
    scheduler.close()


def test_when_the_previous_model_fails_too_there_is_no_model():
    loader = FakeLoader()
    scheduler = Scheduler(loader)
    assert scheduler.load(GOOD).result(WAIT).ok
    loader.broken.add(GOOD)  # its file went away meanwhile
    result = scheduler.load(BAD).result(WAIT)
    assert result.kept is None and scheduler.load_error
    assert scheduler.submit(CompletionRequest("p")).future.result(WAIT).reason == "no-model"
    loader.broken.clear()
    assert scheduler.load(OTHER).result(WAIT).ok  # a good setting recovers
    assert scheduler.submit(CompletionRequest("p")).future.result(WAIT).reason == "done"
    scheduler.close()


class Throws(FakeEngine):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def complete(self, request, cancel):
        if request.prompt == "raise":
            raise self.error
        return super().complete(request, cancel)


def test_a_budget_that_does_not_fit_is_an_answer_with_the_remedy():
    engine = Throws(BudgetError("the context of 256 tokens cannot hold 300 generated tokens; raise `contextTokens`"))
    scheduler = Scheduler(lambda config: engine)
    scheduler.load(GOOD).result(WAIT)
    answer = scheduler.submit(CompletionRequest("raise")).future.result(WAIT)
    assert answer.reason == "budget" and "contextTokens" in answer.detail
    assert scheduler.submit(CompletionRequest("fine")).future.result(WAIT).reason == "done"
    scheduler.close()


def test_an_engine_that_throws_leaves_the_worker_serving():
    engine = Throws(RuntimeError("llama_decode failed"))
    scheduler = Scheduler(lambda config: engine)
    scheduler.load(GOOD).result(WAIT)
    assert scheduler.submit(CompletionRequest("raise")).future.result(WAIT).reason == "failed"
    assert scheduler.submit(CompletionRequest("fine")).future.result(WAIT).reason == "done"
    scheduler.close()


def test_notifications_leave_no_futures_behind():
    """pygls keeps every generator-handled notification's future; the protocol drops finished ones,
    or a day of typing would leak a kilobyte per keystroke."""
    from lsp_server.server import build_server

    class Discard:
        def write(self, data: bytes) -> None:
            pass

    server = build_server(load=lambda config: FakeEngine())
    protocol = server.protocol
    protocol.set_writer(Discard())
    uri = "file:///leak.txt"

    def notify(method: str, params: dict) -> None:
        protocol.handle_message(protocol.structure_message({"jsonrpc": "2.0", "method": method, "params": params}))

    notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "plaintext", "version": 1, "text": ""}})
    for version in range(2, 502):
        change = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "x"}
        notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]})
    notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert server.documents.get(uri) is None
    assert protocol.pending_futures() <= 1
    server.scheduler.close()


def test_an_unreadable_change_of_any_shape_only_marks_an_open_document_stale():
    from lsp_server.server import build_server

    server = build_server(load=FakeLoader())
    try:
        server.documents.open("file:///open.txt", "text", 1)
        for params in (
            None,
            5,
            [],
            {"textDocument": 5},
            {"textDocument": {"uri": 7}},
            {"textDocument": {"uri": "file:///closed.txt"}},
        ):
            server.unreadable_notification("textDocument/didChange", params)
        assert not server.documents.get("file:///open.txt").stale
        server.unreadable_notification("textDocument/didChange", {"textDocument": {"uri": "file:///open.txt"}})
        assert server.documents.get("file:///open.txt").stale
    finally:
        server.scheduler.close()
