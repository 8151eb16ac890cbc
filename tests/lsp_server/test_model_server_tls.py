"""https:// to a model server, against a real TLS proxy (Debian's stunnel, scripts/tls-proxy.sh) in
front of a real llama-server on 127.0.0.1, with a CA and certificates made by the test
(tests/support/tls_proxy.py). A certificate from our CA passes with `modelServerCaFile`; one the checks
refuse (no CA given, expired, another host) is refused at first contact with the reason named.
Closing a superseded stream over TLS still stops the server decoding (GET /slots).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.remote.http import ModelServerClient
from tests.fixtures import DRAFT, Editor, LspClient
from tests.support.tls_proxy import Authority, TlsProxy

pytestmark = pytest.mark.model

URI = "file:///tls.txt"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Authority]:
    folder = tmp_path_factory.mktemp("pki")
    return folder, Authority(folder)


@pytest.fixture
def lsp() -> Iterator[list[LspClient]]:
    made: list[LspClient] = []
    yield made
    for client in made:
        assert client.alive(), client.stderr()[-3000:]
        assert client.shutdown() == 0


def connect(lsp: list[LspClient], url: str, **settings: object) -> LspClient:
    client = LspClient(["--log-level", "info"])
    lsp.append(client)
    options = {
        "modelServer": url,
        "modelServerTimeoutMs": 30000,
        "maxTokens": 4,
        "threads": 1,
        "minConfidence": 0,
        **settings,
    }
    client.initialize({"cpcLsp": options}, wait_loaded=True, timeout=60)
    return client


def last_status(client: LspClient) -> dict:
    return [n["params"] for n in client.notifications if n["method"] == "cpcLsp/status"][-1]


def test_https_with_our_ca_gives_suggestions_and_sends_no_clear_text_warning(llama_server, pki, lsp):
    folder, ca = pki
    with TlsProxy(llama_server.url, ca.issue("good"), folder) as proxy:
        client = connect(lsp, proxy.url, modelServerCaFile=str(ca.cert))
        assert last_status(client)["state"] == "ready", last_status(client)
        editor = Editor(client)
        editor.open(URI, DRAFT)
        assert "yesterday" in (editor.suggestion(URI, timeout=60) or "")
        assert not [m for m in client.messages("window/showMessage") if "in clear" in m]


@pytest.mark.parametrize(
    "case,reason",
    [
        ("no-ca", "certificate"),  # our CA is not one the system trusts
        ("expired", "expired"),
        ("other-host", "not valid for '127.0.0.1'"),
    ],
)
def test_a_certificate_the_checks_refuse_is_refused_and_the_reason_named(llama_server, pki, lsp, case, reason):
    folder, ca = pki
    issued = ca.issue(
        f"cert-{case}",
        hosts=("gpu.example",) if case == "other-host" else ("127.0.0.1", "localhost"),
        expired=case == "expired",
    )
    with TlsProxy(llama_server.url, issued, folder) as proxy:
        settings = {} if case == "no-ca" else {"modelServerCaFile": str(ca.cert)}
        client = connect(lsp, proxy.url, **settings)
        state = last_status(client)
        assert state["state"] == "error", state
        assert "certificate was refused" in state["message"] and reason in state["message"].lower(), state["message"]
        assert "modelServerCaFile" in state["message"]
        editor = Editor(client)
        editor.open(URI, DRAFT)
        assert editor.suggestion(URI, timeout=60) is None


def test_closing_a_stream_over_tls_stops_the_server_decoding(llama_server, pki):
    folder, ca = pki
    with TlsProxy(llama_server.url, ca.issue("cancel"), folder) as proxy:
        client = ModelServerClient(proxy.url, None, 30.0, ca.cert)
        stream = client.stream(
            "/completion", {"prompt": "Once upon a time", "n_predict": 400, "stream": True, "ignore_eos": True}
        )
        assert stream.next_event() is not None
        assert any(s.get("is_processing") for s in llama_server.slot_states())
        stream.close()
        deadline = time.monotonic() + 10
        while any(s.get("is_processing") for s in llama_server.slot_states()):
            assert time.monotonic() < deadline, "the server went on decoding a closed stream"
            time.sleep(0.05)
        client.close()
