"""A minimal JSON-RPC client that drives the real server (`python -m lsp_server`) over stdio.

One reader thread frames messages (Content-Length headers) and stamps each response with the
`perf_counter` time it arrived, so latencies do not include this process's scheduling. Requests
from the server (none are expected with the capabilities announced here) get a null answer.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ServerError(RuntimeError):
    def __init__(self, error: dict[str, Any]) -> None:
        self.code = error.get("code")
        super().__init__(f"{error.get('code')}: {error.get('message')}")


@dataclass(frozen=True)
class Reply:
    result: Any
    error: dict[str, Any] | None
    sent: float  # perf_counter when the request was written
    received: float  # perf_counter when the reader thread read the answer

    @property
    def ms(self) -> float:
        return (self.received - self.sent) * 1000


class LspClient:
    def __init__(self, args: list[str] | None = None, stderr_path: Path | None = None) -> None:
        command = [sys.executable, "-m", "lsp_server", *(args or [])]
        self._stderr = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[float, Future[Reply]]] = {}
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self.notifications: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, name="lsp-client-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    # --- wire --------------------------------------------------------------------------------

    def _write(self, message: dict[str, Any], pending: Future[Reply] | None = None) -> float:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        with self._write_lock:
            sent = time.perf_counter()
            if pending is not None:  # registered before the bytes leave, so the answer finds it
                with self._lock:
                    self._pending[message["id"]] = (sent, pending)
            self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.process.stdin.flush()
        return sent

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    self._fail_all()
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if length is None:
                continue
            message = json.loads(stream.read(length))
            received = time.perf_counter()
            if "id" in message and "method" in message:  # a request from the server
                self._write({"id": message["id"], "result": None})
            elif "id" in message:
                with self._lock:
                    sent, future = self._pending.pop(message["id"], (received, None))
                if future is not None:
                    future.set_result(Reply(message.get("result"), message.get("error"), sent, received))
            else:
                self.notifications.append(message)

    def _fail_all(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for _, future in pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the server closed its output"))

    # --- API ---------------------------------------------------------------------------------

    def send(self, method: str, params: Any = None) -> tuple[int, Future[Reply]]:
        """Write a request; returns its id and a future of its Reply."""
        msg_id = next(self._ids)
        future: Future[Reply] = Future()
        self._write({"id": msg_id, "method": method, "params": params}, pending=future)
        return msg_id, future

    def request(self, method: str, params: Any = None, timeout: float = 120.0) -> Reply:
        return self.send(method, params)[1].result(timeout)

    def call(self, method: str, params: Any = None, timeout: float = 120.0) -> Any:
        reply = self.request(method, params, timeout)
        if reply.error is not None:
            raise ServerError(reply.error)
        return reply.result

    def notify(self, method: str, params: Any = None) -> float:
        return self._write({"method": method, "params": params})

    def initialize(self, options: dict[str, Any] | None = None, encoding: str = "utf-16") -> dict[str, Any]:
        capabilities = {
            "general": {"positionEncodings": [encoding]},
            "textDocument": {"inlineCompletion": {}, "synchronization": {}},
        }
        result = self.call(
            "initialize",
            {"processId": None, "rootUri": None, "capabilities": capabilities, "initializationOptions": options or {}},
        )
        self.notify("initialized", {})
        return result

    def shutdown(self, timeout: float = 30.0) -> None:
        try:
            if self.process.poll() is None:
                self.call("shutdown", None, timeout)
                self.notify("exit", None)
                self.process.wait(timeout)
        except Exception:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        finally:
            if self._stderr is not subprocess.DEVNULL:
                self._stderr.close()

    def __enter__(self) -> LspClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class Editor:
    """Document bookkeeping on top of the client: open, type at the end, ask at the end."""

    def __init__(self, client: LspClient) -> None:
        self.client = client
        self._versions: dict[str, int] = {}
        self._texts: dict[str, str] = {}

    def open(self, uri: str, text: str, language: str = "plaintext") -> None:
        self._versions[uri] = 1
        self._texts[uri] = text
        item = {"uri": uri, "languageId": language, "version": 1, "text": text}
        self.client.notify("textDocument/didOpen", {"textDocument": item})

    def close(self, uri: str) -> None:
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        self._texts.pop(uri, None)

    def end(self, uri: str) -> dict[str, int]:
        """The LSP position (UTF-16) of the end of the document."""
        text = self._texts[uri]
        line = text.count("\n")
        last = text[text.rfind("\n") + 1 :]
        return {"line": line, "character": len(last.encode("utf-16-le")) // 2}

    def type(self, uri: str, chars: str) -> None:
        """Insert `chars` at the end of the document (one didChange)."""
        at = self.end(uri)
        self._versions[uri] += 1
        self._texts[uri] += chars
        change = {"range": {"start": at, "end": at}, "text": chars}
        self.client.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": self._versions[uri]}, "contentChanges": [change]},
        )

    def inline_params(self, uri: str) -> dict[str, Any]:
        return {"textDocument": {"uri": uri}, "position": self.end(uri), "context": {"triggerKind": 2}}

    def inline(self, uri: str, timeout: float = 120.0) -> Reply:
        """`textDocument/inlineCompletion` at the end of the document."""
        return self.client.request("textDocument/inlineCompletion", self.inline_params(uri), timeout)

    def stats(self) -> dict[str, Any] | None:
        return self.client.call("cpcLsp/stats", None)


def insert_text(reply: Reply) -> str | None:
    """The first item's insertText, or None for an empty answer or an error."""
    if reply.error is not None or not reply.result:
        return None
    items = reply.result["items"] if isinstance(reply.result, dict) else reply.result
    return items[0]["insertText"] if items else None


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MiB; None where /proc is missing."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
