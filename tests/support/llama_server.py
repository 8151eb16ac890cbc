"""A real llama-server (llama.cpp's HTTP server) on 127.0.0.1, for the tests and the benchmarks.

The binary comes from `scripts/llama-server.sh` (built once from the pinned sdist's llama.cpp with
the wheel's CPU flags, cached). The server runs the default model (or `model`) with the engine's
own context layout, so its numbers match the in-process engine's: `slots` sequences of `ctx`
tokens each, no unified KV, full-size sliding-window cache, batch 512 in ubatches of 64 (the engine's
decode chunks: a new document's prompt then goes through the same chunks, so the same numbers), flash attention
off (`--flash-attn off`, as the engine's context: llama.cpp's CPU flash attention computes other
numbers at another thread count, engine.local.llama.FLASH_ATTN), and `--slot-prompt-similarity 0`: a request that names no slot (a new
document's first prefill) goes to the least recently used idle slot, not to the idle slot whose
prompt is most like it, which is another user's when their documents share a header or imports
(seen: under load, the second user's first prompt took the first user's slot at 0.79 similarity,
and both then decoded their prompts again on every turn). The engine names the slot of every
later request itself (engine.remote), so the server's similarity pass only ever picks wrongly
for it. That holds without the RAM prompt cache (the tests and bench.remote_engine run
`--cache-ram 0`, as the in-process engine has none); a team's server runs 0.1 with the cache,
which repairs such a pick (docs/shared-server.md, "A team on one server"; bench.team passes its
own flags). Its stdout and stderr go to a file (`log()`), so a test can read what it
logged. On Linux the child gets SIGKILL when this process dies (PR_SET_PDEATHSIG), so even a
killed test run leaves no server behind.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "llama-server.sh"


@functools.cache
def llama_server_binary() -> Path:
    """The cached llama-server, built by scripts/llama-server.sh on first use (minutes, once)."""
    done = subprocess.run([str(BUILD_SCRIPT), sys.executable], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/llama-server.sh failed (exit {done.returncode}); its messages are above")
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class LlamaServer:
    """One llama-server process; `start()` waits until /health says the model is loaded.

    `stop()` ends it gently (SIGTERM, then SIGKILL), `kill()` at once, `restart()` starts it again
    on the same port (a client reconnecting to the same URL). All three may be called in any
    order and more than once."""

    def __init__(
        self,
        slots: int = 4,
        api_key: str | None = None,
        ctx: int = 2048,
        model: Path | str | None = None,
        threads: int = 1,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        log_path: Path | None = None,
        ubatch: int = 64,
    ) -> None:
        from engine.model_files import resolve_model

        self.binary = llama_server_binary()
        self.model = resolve_model(model)
        self.slots, self.api_key, self.ctx, self.threads, self.ubatch = slots, api_key, ctx, threads, ubatch
        self.port = port or free_port()
        self.extra_args = tuple(extra_args)
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The exact command line (the README shows the same flags)."""
        args = [
            str(self.binary), "--model", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
            "--parallel", str(self.slots), "--ctx-size", str(self.ctx * self.slots), "--no-kv-unified",
            "--swa-full", "--batch-size", "512", "--ubatch-size", str(self.ubatch), "--threads", str(self.threads),
            "--threads-batch", str(self.threads), "--flash-attn", "off", "--no-webui", "--slot-prompt-similarity", "0",
        ]  # fmt: skip
        if self.api_key:
            args += ["--api-key", self.api_key]
        return args + list(self.extra_args)

    def start(self, timeout: float = 120.0) -> LlamaServer:
        """Start the process (if it is not running) and wait until it serves."""
        if self.running():
            return self
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent if sys.platform == "linux" else None,
            )  # fmt: skip
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """Until GET /health answers 200 (it is 503 while the model loads); a process that exits
        meanwhile is an error that quotes the end of its log."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise RuntimeError(f"llama-server exited ({code}) before serving:\n{self.log()[-3000:]}")
            try:
                if self.get("/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"llama-server did not serve within {timeout:.0f} s:\n{self.log()[-3000:]}")
            time.sleep(0.05)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not ended within `timeout`."""
        if self.running():
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reap()

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-request, as a crashed or unplugged machine would."""
        if self.running():
            assert self.process is not None
            self.process.kill()
        self._reap()

    def _reap(self) -> None:
        if self.process is not None:
            self.process.wait(30)

    def restart(self, timeout: float = 120.0) -> LlamaServer:
        """Stop (if running) and start again on the same port."""
        self.stop()
        return self.start(timeout)

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, timeout: float = 10.0, api_key: str | None = None) -> tuple[int, Any]:
        """GET `path` with this server's key (or `api_key`): (status, parsed JSON or text)."""
        return self.request("GET", path, None, timeout, api_key)

    def post(self, path: str, body: Any, timeout: float = 60.0, api_key: str | None = None) -> tuple[int, Any]:
        return self.request("POST", path, body, timeout, api_key)

    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 60.0, api_key: str | None = None
    ) -> tuple[int, Any]:
        key = api_key if api_key is not None else self.api_key
        headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def slot_states(self) -> list[dict[str, Any]]:
        """GET /slots: each slot's id, whether it is processing, and its last prompt's tokens."""
        status, body = self.get("/slots")
        if status != 200:
            raise RuntimeError(f"GET /slots answered {status}: {body}")
        return body

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_llama_server(slots: int = 4, api_key: str | None = None, ctx: int = 2048, **options: Any) -> LlamaServer:
    """A started llama-server on 127.0.0.1 and a free port (the tests' and benchmarks' one way)."""
    return LlamaServer(slots=slots, api_key=api_key, ctx=ctx, **options).start()
