"""lsp_server.status: what the status bar is told around a model load."""

from __future__ import annotations

from pathlib import Path

from engine import EngineConfig
from lsp_server import status
from lsp_server.loading import LoadResult


class _Protocol:
    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def notify(self, method: str, params: object = None) -> None:
        self.sent.append((method, params))


def test_states_around_a_load():
    config = EngineConfig(model_path=Path("x.gguf"))
    assert status.loading("x.gguf") == status.Status("loading", "loading x.gguf")
    ok = status.loaded(LoadResult(config, None, 1.5), "x.gguf")
    assert ok == status.Status("ready", "x.gguf loaded in 1.5 s")
    routed = status.loaded(LoadResult(EngineConfig(), None, 0.01), "the default models")
    assert (
        routed.state == "ready" and "loaded in" not in routed.message
    )  # nothing is loaded yet: each model says so on first use
    failed = status.loaded(LoadResult(config, "cannot load model (x.gguf): no such file", 0.1), "x.gguf")
    assert failed == status.Status("error", "cannot load model (x.gguf): no such file")
    kept = status.loaded(LoadResult(config, "cannot load model (x.gguf)", 0.1, kept=config), "x.gguf")
    assert kept.state == "ready" and "kept the previous model" in kept.message


def test_sent_as_a_notification():
    protocol = _Protocol()
    status.send(protocol, status.Status("error", "why"))
    assert protocol.sent == [(status.STATUS_METHOD, {"state": "error", "message": "why"})]
    assert status.STATUS_METHOD == "cpcLsp/status"  # editors/vscode/extension.js listens for this name


def test_a_client_that_never_answers_the_progress_request_still_gets_ready(monkeypatch):
    """window/workDoneProgress/create is a request: a client that never answers it must not hold
    the "ready" status (and the "loaded" log line) back for good."""
    import lsp_server.server as server_module
    from tests.fixtures import FakeLoader, InProcessServer

    monkeypatch.setattr(server_module, "PROGRESS_WAIT_SECONDS", 0.2)
    server = InProcessServer(load=FakeLoader())
    try:
        client = server.client
        send = client.send_message

        def send_unless_an_answer(message, *args, **kwargs):
            return None if "result" in message and "method" not in message else send(message, *args, **kwargs)

        client.send_message = send_unless_an_answer
        capabilities = {"textDocument": {"inlineCompletion": {}}, "window": {"workDoneProgress": True}}
        client.initialize(capabilities=capabilities, wait_loaded=True, timeout=10)
        ready = client.wait_notification(
            lambda n: n["method"] == "cpcLsp/status" and n["params"]["state"] == "ready", 10
        )
        assert ready["params"]["state"] == "ready"
    finally:
        server.close()
