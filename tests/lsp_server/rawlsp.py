"""A tiny JSON-RPC client over the real server's stdio, for tests that need raw frames.

pytest-lsp validates what it sends; a hostile client must be able to send anything. This one
writes whatever bytes it is given, frames dicts with Content-Length, and a reader thread sorts
what comes back: responses by id, notifications in order, and requests from the server (answered
with null). The server's stderr goes to a file so a test can read it at any time.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

SERVER = [sys.executable, "-m", "lsp_server"]
DRAFT = "Thanks for sending over the draft yest"


def frame(message: Any) -> bytes:
    """One framed message; ASCII JSON, so lone surrogates travel as \\uXXXX escapes."""
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawServer:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self._stderr_file = tempfile.NamedTemporaryFile(prefix="cpc-lsp-stderr-", delete=False)
        self.stderr_path = Path(self._stderr_file.name)
        self.process = subprocess.Popen(
            [*SERVER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=None if env is None else {**os.environ, **env},
        )
        self.pid = self.process.pid
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self.responses: dict[Any, dict] = {}
        self.notifications: list[dict] = []
        self.closed = False  # the server closed its stdout
        threading.Thread(target=self._read, name="rawlsp-reader", daemon=True).start()

    # --- wire --------------------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        with self._write_lock:
            self.process.stdin.write(data)
            self.process.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_bytes(frame({"jsonrpc": "2.0", **message}))

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while (line := stream.readline()) not in (b"\r\n", b"\n"):
                if not line:
                    with self._cond:
                        self.closed = True
                        self._cond.notify_all()
                    return
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            message = json.loads(stream.read(length))
            if "method" in message and "id" in message:  # a request from the server
                self.send({"id": message["id"], "result": None})
            with self._cond:
                if "method" in message:
                    self.notifications.append(message)
                else:
                    self.responses[message.get("id")] = message
                self._cond.notify_all()

    def _wait(self, ready: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not (found := ready()):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise AssertionError(f"no {what} (server {'closed' if self.closed else 'silent'})")
                self._cond.wait(left)
            return found

    # --- requests and notifications ---------------------------------------------------------

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        """Send a request without waiting; returns its id."""
        msg_id = next(self._ids) if msg_id is None else msg_id
        self.send({"id": msg_id, "method": method, "params": params})
        return msg_id

    def response(self, msg_id: Any, timeout: float = 120) -> dict:
        return self._wait(lambda: self.responses.get(msg_id), timeout, f"response to {msg_id!r}")

    def call(self, method: str, params: Any = None, timeout: float = 120) -> dict:
        return self.response(self.request(method, params), timeout)

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"method": method, "params": params})

    def wait_notification(self, match: Callable[[dict], bool], timeout: float = 120, after: int = 0) -> dict:
        def found():
            return next((n for n in self.notifications[after:] if match(n)), None)

        return self._wait(found, timeout, "matching notification")

    def messages(self, method: str) -> list[str]:
        """Texts of window/showMessage or window/logMessage notifications so far."""
        with self._cond:
            return [n["params"]["message"] for n in self.notifications if n["method"] == method]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    # --- an LSP session ---------------------------------------------------------------------

    def initialize(self, options: Any = None, encoding: str = "utf-16", wait_loaded: bool = True) -> dict:
        capabilities = {
            "general": {"positionEncodings": [encoding]},
            "textDocument": {"inlineCompletion": {}, "synchronization": {}},
        }
        params = {"processId": None, "rootUri": None, "capabilities": capabilities, "initializationOptions": options}
        result = self.call("initialize", params)
        self.notify("initialized", {})
        if wait_loaded:
            self.wait_loaded()
        return result

    def wait_loaded(self, after: int = 0, timeout: float = 180) -> str:
        """The text of the next log line saying the model loaded or failed to."""

        def done(n: dict) -> bool:
            text = n["params"].get("message", "") if n["method"] == "window/logMessage" else ""
            return text.startswith("loaded") or "cpc-lsp: cannot" in text

        return self.wait_notification(done, timeout, after)["params"]["message"]

    def open(self, uri: str, text: str, version: int = 1) -> None:
        item = {"uri": uri, "languageId": "plaintext", "version": version, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": item})

    def change(self, uri: str, version: int, text: str, start: tuple[int, int] | None = None,
               end: tuple[int, int] | None = None) -> None:  # fmt: skip
        """Replace the range start..end (the whole document when start is None) with `text`."""
        change: dict[str, Any] = {"text": text}
        if start is not None:
            end = end or start
            change["range"] = {"start": _pos(*start), "end": _pos(*end)}
        params = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}
        self.notify("textDocument/didChange", params)

    def inline(self, uri: str, line: int, character: int, msg_id: Any = None) -> Any:
        """Send an inline completion request; returns its id."""
        params = {"textDocument": {"uri": uri}, "position": _pos(line, character), "context": {"triggerKind": 2}}
        return self.request("textDocument/inlineCompletion", params, msg_id)

    def suggestion(self, uri: str, line: int, character: int, timeout: float = 120) -> str | None:
        """The first suggested insertText at a position, None for an empty answer."""
        reply = self.response(self.inline(uri, line, character), timeout)
        assert "error" not in reply, reply
        return reply["result"][0]["insertText"] if reply["result"] else None

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, timeout: float = 30) -> int:
        """shutdown + exit; kills the server if it does not go. Returns its exit code."""
        try:
            if self.alive() and not self.closed:
                self.call("shutdown", None, timeout)
                self.notify("exit")
            return self.process.wait(timeout)
        except Exception:
            self.process.kill()
            return self.process.wait()
        finally:
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._stderr_file.close()
            self.stderr_path.unlink(missing_ok=True)


def _pos(line: int, character: int) -> dict[str, int]:
    return {"line": line, "character": character}


def end_position(text: str, encoding: str = "utf-16") -> tuple[int, int]:
    """LSP position of the end of `text`, computed independently of the server."""
    last = text[text.rfind("\n") + 1 :]
    units = len(last.encode("utf-8")) if encoding == "utf-8" else len(last.encode("utf-16-le", "surrogatepass")) // 2
    return text.count("\n"), units
