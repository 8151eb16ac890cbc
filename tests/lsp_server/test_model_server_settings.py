"""The model server's settings, the scheduler's retry and health reports, and what the user is
told, with a fake engine (the real llama-server runs in test_model_server_faults.py)."""

from __future__ import annotations

import threading
import time

import pytest

from engine import EngineConfig, ModelServerError
from lsp_server import status
from lsp_server.loading import LoadResult, ServerHealth
from lsp_server.model_messages import clear_text_warning, is_loopback
from lsp_server.scheduler import RETRY_FIRST_S, Scheduler
from lsp_server.settings import API_KEY_ENV, Settings, apply
from tests.fixtures import DRAFT, WORDS, Editor, FakeEngine, InProcessServer

KEY = "k3y-that-must-never-show"


# --- settings -----------------------------------------------------------------------------------


def test_the_settings_map_onto_the_engine_config():
    settings, problems = apply(
        Settings(), {"modelServer": "http://10.0.0.5:8080/", "modelServerApiKey": KEY, "modelServerTimeoutMs": 750}
    )
    assert problems == []
    config = settings.engine_config()
    assert config.model_server == "http://10.0.0.5:8080"
    assert config.model_server_api_key == KEY and config.model_server_timeout_s == 0.75
    assert KEY not in repr(config) and KEY not in repr(settings)
    assert Settings().engine_config().model_server is None


def test_the_key_comes_from_the_environment_when_the_setting_is_empty(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, KEY)
    remote, _ = apply(Settings(), {"modelServer": "http://127.0.0.1:8080"})
    assert remote.engine_config().model_server_api_key == KEY
    assert Settings().engine_config().model_server_api_key is None  # in-process: no key at all
    given, _ = apply(remote, {"modelServerApiKey": "from-the-setting"})
    assert given.engine_config().model_server_api_key == "from-the-setting"


def test_the_timeout_does_not_reload_an_in_process_model():
    changed, _ = apply(Settings(), {"modelServerTimeoutMs": 1234})
    assert changed.engine_config() == Settings().engine_config()


@pytest.mark.parametrize(
    "url",
    [
        "ftp://host:1",
        "127.0.0.1:8080",
        "http://",
        "http://user:pw@host:8080",
        "http://host:99999",
        "http://h:1/?q=1",
        5,
    ],
)
def test_a_bad_url_is_refused_with_what_would_fit(url):
    settings, problems = apply(Settings(), {"modelServer": url})
    assert settings.model_server is None and len(problems) == 1 and "modelServer" in problems[0]
    assert "pw" not in problems[0]


def test_an_invalid_key_value_never_echoes_the_previous_key():
    keyed, _ = apply(Settings(), {"modelServerApiKey": KEY})
    _, problems = apply(keyed, {"modelServerApiKey": 42})
    assert problems and KEY not in problems[0] and "the previous value" in problems[0]


def test_plain_http_to_another_machine_gets_a_warning_loopback_does_not():
    for url in ("http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080", None, "https://gpu:8443"):
        assert clear_text_warning(url) is None, url
    warning = clear_text_warning("http://gpu-box.lan:8080")
    assert warning is not None and "in clear" in warning and "ssh" in warning
    assert is_loopback("127.8.9.1") and not is_loopback("10.0.0.1") and not is_loopback("localhost.example")


# --- the scheduler: retry with back-off, health ----------------------------------------------


class FlakyLoader:
    """Fails with ModelServerError(kind) `failures` times, then loads a FakeEngine."""

    def __init__(self, failures: int, kind: str = "unreachable") -> None:
        self.failures, self.kind = failures, kind
        self.attempts: list[float] = []
        self.engine = FakeEngine(words=WORDS)

    def __call__(self, config: EngineConfig) -> FakeEngine:
        self.attempts.append(time.monotonic())
        if len(self.attempts) <= self.failures:
            raise ModelServerError(self.kind, config.model_server, "no answer", "Start llama-server")
        return self.engine


def test_an_unreachable_server_is_retried_with_backoff_until_it_answers():
    events: list = []
    loader = FlakyLoader(failures=2)
    scheduler = Scheduler(loader, on_event=events.append)
    first = scheduler.load(EngineConfig(model_server="http://127.0.0.1:9")).result(5)
    assert first.kind == "unreachable" and first.retry_in == RETRY_FIRST_S and not first.retry
    # meanwhile a request answers at once, with no suggestion
    from engine import CompletionRequest

    assert scheduler.submit(CompletionRequest(DRAFT)).future.result(1).reason == "no-model"
    deadline = time.monotonic() + 10
    while not any(isinstance(e, LoadResult) and e.ok for e in events) and time.monotonic() < deadline:
        time.sleep(0.05)
    results = [e for e in events if isinstance(e, LoadResult)]
    assert [r.ok for r in results] == [False, True] and all(r.retry for r in results)
    assert results[0].retry_in == 2 * RETRY_FIRST_S  # doubled
    gaps = [b - a for a, b in zip(loader.attempts, loader.attempts[1:])]
    assert gaps[0] >= RETRY_FIRST_S * 0.9 and gaps[1] >= 2 * RETRY_FIRST_S * 0.9
    assert scheduler.submit(CompletionRequest(DRAFT)).future.result(5).reason == "done"
    scheduler.close()


def test_a_refused_key_is_not_retried():
    loader = FlakyLoader(failures=99, kind="auth")
    scheduler = Scheduler(loader)
    result = scheduler.load(EngineConfig(model_server="http://127.0.0.1:9")).result(5)
    assert result.kind == "auth" and result.retry_in is None
    time.sleep(RETRY_FIRST_S * 1.5)
    assert len(loader.attempts) == 1
    scheduler.close()


def test_a_new_load_cancels_the_retry_of_the_old_one():
    loader = FlakyLoader(failures=1)
    scheduler = Scheduler(loader)
    scheduler.load(EngineConfig(model_server="http://127.0.0.1:9")).result(5)
    assert scheduler.load(EngineConfig(model_server="http://127.0.0.1:10")).result(5).ok
    time.sleep(RETRY_FIRST_S * 1.5)
    assert len(loader.attempts) == 2
    scheduler.close()


class FailingEngine(FakeEngine):
    """Raises ModelServerError(kind) while `failing` is set."""

    def __init__(self) -> None:
        super().__init__(words=WORDS)
        self.failing: str | None = None

    def complete(self, request, cancel: threading.Event):
        if self.failing:
            raise ModelServerError(self.failing, "http://127.0.0.1:9", "the server went away", "Check it")
        return super().complete(request, cancel)

    def prefetch(self, request, cancel: threading.Event):
        if self.failing:
            raise ModelServerError(self.failing, "http://127.0.0.1:9", "the server went away", "Check it")
        return super().prefetch(request, cancel)


def test_a_mid_request_server_error_answers_without_a_suggestion_and_reports_once():
    from engine import CompletionRequest

    events: list = []
    engine = FailingEngine()
    scheduler = Scheduler(lambda config: engine, on_event=events.append)
    assert scheduler.load(EngineConfig()).result(5).ok
    engine.failing = "unreachable"
    answers = [scheduler.submit(CompletionRequest(DRAFT, required="yest")).future.result(5) for _ in range(3)]
    assert [a.reason for a in answers] == ["server"] * 3 and "went away" in (answers[0].detail or "")
    engine.failing = None
    assert scheduler.submit(CompletionRequest(DRAFT, required="yest")).future.result(5).reason == "done"
    assert [(e.kind if isinstance(e, ServerHealth) else e) for e in events] == ["unreachable", None]
    scheduler.close()


class SlowOnceEngine(FakeEngine):
    """Its first `complete` misses the budget (a timeout); its prefetches then finish the prompt."""

    def __init__(self) -> None:
        super().__init__(words=WORDS)
        self.slow = 1

    def complete(self, request, cancel: threading.Event):
        if self.slow:
            self.slow -= 1
            raise ModelServerError(
                "timeout", "http://127.0.0.1:9", "the model server did not answer within 5 s", "Raise it"
            )
        return super().complete(request, cancel)


def test_a_slow_request_goes_on_as_a_prefetch_and_the_next_answer_clears_slow():
    from engine import CompletionRequest

    events: list = []
    engine = SlowOnceEngine()
    scheduler = Scheduler(lambda config: engine, on_event=events.append)
    assert scheduler.load(EngineConfig(model_server="http://127.0.0.1:9", model_server_timeout_s=5.0)).result(5).ok
    assert scheduler.submit(CompletionRequest(DRAFT, required="yest")).future.result(5).reason == "server"
    deadline = time.monotonic() + 5
    while not engine.prefetched and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.prefetched == [DRAFT]  # the slow request's prompt, as a prefetch of its own
    while len(events) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    slow, caught = events[:2]
    assert (slow.kind, slow.caught_up, slow.budget_s) == ("timeout", False, 5.0) and slow.seconds is not None
    assert (caught.kind, caught.caught_up) == ("timeout", True) and caught.seconds >= slow.seconds
    assert scheduler.submit(CompletionRequest(DRAFT, required="yest")).future.result(5).reason == "done"
    assert events[-1].kind is None  # answered in time: no longer slow
    assert status.serving(slow, "the model server X").message.startswith("slow (")
    assert "decoded now" in status.serving(caught, "the model server X").message
    scheduler.close()


def test_status_for_each_cause():
    config = EngineConfig(model_server="http://127.0.0.1:9")
    down = status.loaded(LoadResult(config, "cannot reach it", 0.1, kind="unreachable", retry_in=2.0), "x")
    assert down == status.Status("unreachable", "cannot reach it (trying again in 2 s)")
    assert status.loaded(LoadResult(config, "refused", 0.1, kind="auth"), "x").state == "error"
    assert status.serving(ServerHealth("timeout", "too slow"), "x") == status.Status("slow", "too slow")
    assert status.serving(ServerHealth(None, ""), "x").state == "ready"


# --- through the server: status and messages, once per cause ---------------------------------


def test_the_editor_sees_unreachable_then_ready_and_one_message_per_cause():
    loader = FlakyLoader(failures=2)
    server = InProcessServer(load=loader)
    try:
        client = server.client
        client.initialize({"cpcLsp": {"modelServer": "http://127.0.0.1:9"}}, wait_loaded=True, timeout=10)
        ready = client.wait_notification(
            lambda n: n["method"] == "cpcLsp/status" and n["params"]["state"] == "ready", 15
        )
        assert "answers" not in ready["params"]["message"]
        states = [n["params"]["state"] for n in client.notifications if n["method"] == "cpcLsp/status"]
        assert states == ["loading", "unreachable", "unreachable", "ready"]
        shown = [n for n in client.notifications if n["method"] == "window/showMessage"]
        assert len(shown) == 1 and "cannot load model" in shown[0]["params"]["message"]
        editor = Editor(client)
        editor.open("file:///a.txt", DRAFT)
        assert editor.suggestion("file:///a.txt", timeout=10) == "yesterday done"
    finally:
        server.close()


def test_a_server_failing_mid_request_is_shown_once_not_per_keystroke():
    engine = FailingEngine()
    server = InProcessServer(load=lambda config: engine)
    try:
        client = server.client
        client.initialize({"cpcLsp": {"modelServer": "http://127.0.0.1:9"}}, wait_loaded=True, timeout=10)
        editor = Editor(client)
        editor.open("file:///a.txt", DRAFT)
        engine.failing = "timeout"
        for _ in range(4):
            editor.type("file:///a.txt", "e")
            assert editor.suggestion("file:///a.txt", timeout=10) is None
        engine.failing = None
        editor.change("file:///a.txt", DRAFT)
        assert editor.suggestion("file:///a.txt", timeout=10) == "yesterday done"
        client.wait_notification(lambda n: n["method"] == "cpcLsp/status" and "again" in n["params"]["message"], 5)
        states = [n["params"]["state"] for n in client.notifications if n["method"] == "cpcLsp/status"]
        assert states[-2:] == ["slow", "ready"]
        # it fails again: the status says so at once, the message is not repeated
        engine.failing, mark = "timeout", len(client.notifications)
        editor.type("file:///a.txt", "x")  # off the suggestion shown (a letter along it is answered from it)
        assert editor.suggestion("file:///a.txt", timeout=10) is None
        client.wait_notification(lambda n: n["method"] == "cpcLsp/status" and n["params"]["state"] == "slow", 5, mark)
        shown = [n["params"]["message"] for n in client.notifications if n["method"] == "window/showMessage"]
        # A slow answer is not a failure of the server: the message says "slow (N s)" and why.
        assert len(shown) == 1 and "slow (" in shown[0] and "modelServerTimeoutMs" in shown[0]
    finally:
        server.close()


def test_plain_http_to_another_host_warns_in_the_editor():
    server = InProcessServer()
    try:
        server.client.initialize({"cpcLsp": {"modelServer": "http://192.0.2.7:8080"}}, wait_loaded=True, timeout=10)
        shown = [n["params"] for n in server.client.notifications if n["method"] == "window/showMessage"]
        assert any(m["type"] == 2 and "in clear" in m["message"] for m in shown)
    finally:
        server.close()


@pytest.mark.parametrize("allowed", [False, True])
def test_the_key_is_hidden_from_pygls_logs_even_with_log_document_text(allowed):
    import logging

    from lsp_server.logs import TextGuard

    guard = TextGuard(allowed)
    guard.secrets = frozenset({KEY})
    record = logging.LogRecord(
        "pygls.protocol", logging.WARNING, __file__, 1, "Received result %s", ({"modelServerApiKey": KEY},), None
    )
    assert guard.filter(record)
    assert KEY not in record.getMessage() and "<hidden>" in record.getMessage()
    plain = logging.LogRecord("pygls.protocol", logging.WARNING, __file__, 1, "nothing %s", ("here",), None)
    assert guard.filter(plain) and plain.getMessage() == "nothing here"
