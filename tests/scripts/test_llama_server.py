"""The real llama-server the remote tests run against: scripts/llama-server.sh builds it from the
pinned sdist's llama.cpp, and tests.support.llama_server starts it on 127.0.0.1 with the default model,
stops, kills and restarts it, and never leaves a process behind."""

import os
import subprocess
import sys

import pytest

from tests.support.llama_server import BUILD_SCRIPT, llama_server_binary, start_llama_server

pytestmark = pytest.mark.model


def test_the_script_prints_the_cached_binary_at_once():
    out = subprocess.run([str(BUILD_SCRIPT), sys.executable], capture_output=True, text=True, check=True, timeout=60)
    path = out.stdout.strip()
    assert path == str(llama_server_binary()) and os.access(path, os.X_OK)
    flags = subprocess.run([str(BUILD_SCRIPT.with_name("llama-wheel.sh")), "--flags"], capture_output=True, text=True)
    level = flags.stdout.split()[0]
    assert f"/llama-server/{level}-" in path  # keyed like the wheelhouse: level + hash


def test_it_serves_the_default_model_on_loopback_with_the_slots_asked_for(llama_server):
    assert llama_server.url.startswith("http://127.0.0.1:")
    status, props = llama_server.get("/props")
    assert status == 200 and props["total_slots"] == 4
    assert props["model_path"] == str(llama_server.model)
    assert [slot["n_ctx"] for slot in llama_server.slot_states()] == [2048] * 4
    status, body = llama_server.post("/completion", {"prompt": "Thanks for sending over the", "n_predict": 2})
    assert status == 200 and body["tokens_predicted"] >= 1


def test_an_api_key_is_required_when_set_and_health_stays_public():
    with start_llama_server(slots=1, api_key="sekrit-test-key") as server:
        assert server.get("/health", api_key="")[0] == 200
        assert server.get("/props", api_key="")[0] == 401
        assert server.get("/props", api_key="wrong")[0] == 401
        assert server.get("/props")[0] == 200


def test_kill_stop_and_restart_leave_no_process_behind(llama_server):
    first = llama_server.process.pid
    llama_server.kill()
    assert not llama_server.running()
    with pytest.raises(OSError):
        llama_server.get("/health", timeout=2)
    llama_server.restart()
    assert llama_server.running() and llama_server.process.pid != first
    assert llama_server.get("/health")[0] == 200
    second = llama_server.process.pid
    llama_server.stop()
    llama_server.stop()  # idempotent
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)
    llama_server.start()  # the module's server serves again for the tests after this one
    assert llama_server.get("/health")[0] == 200


def test_a_server_that_cannot_start_is_an_error_quoting_its_log(tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(RuntimeError, match="exited"):
        start_llama_server(slots=1, model=bad)
