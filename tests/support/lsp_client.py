"""A raw JSON-RPC client for the real server (`python -m lsp_server`) over stdio: the one used by
the benchmarks and by the tests.

pytest-lsp validates what it sends; a benchmark must time answers precisely and a hostile test must
be able to send anything. This client writes whatever bytes it is given and frames dicts with
Content-Length. One reader thread sorts what comes back: responses by id (each stamped with the
`perf_counter` time it arrived, so latencies exclude this process's scheduling), notifications in
order, and requests from the server, answered with null. The server's stderr goes to a file, so a
caller can read it at any time.
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
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER = [sys.executable, "-m", "lsp_server"]


class ServerError(RuntimeError):
    def __init__(self, error: dict[str, Any]) -> None:
        self.code = error.get("code")
        super().__init__(f"{error.get('code')}: {error.get('message')}")


@dataclass(frozen=True)
class Reply:
    message: dict[str, Any]  # the response as it came
    sent: float  # perf_counter when the request was written (when it arrived, for a response to raw bytes)
    received: float  # perf_counter when the reader thread read the answer

    @property
    def result(self) -> Any:
        return self.message.get("result")

    @property
    def error(self) -> dict[str, Any] | None:
        return self.message.get("error")

    @property
    def code(self) -> int | None:
        """The error code; None for a result."""
        return None if self.error is None else self.error.get("code")

    @property
    def ms(self) -> float:
        return (self.received - self.sent) * 1000


def frame(message: Any) -> bytes:
    """One framed message; ASCII JSON, so lone surrogates travel as \\uXXXX escapes."""
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class LspClient:
    """`LspClient(args)` starts `python -m lsp_server *args`; `LspClient.over(reader, writer)`
    talks to a server already running elsewhere (the tests' in-process server, over pipes).
    `code`: run the server's code from that folder (an earlier checkout, for a benchmark's
    baseline): `python -m` puts its working folder first on the import path, before PYTHONPATH,
    so the folder is where it starts (a PYTHONPATH alone ran this checkout's code)."""

    def __init__(
        self,
        args: list[str] | tuple[str, ...] = (),
        stderr_path: Path | None = None,
        env: dict[str, str] | None = None,
        code: Path | None = None,
    ) -> None:
        self._own_stderr = stderr_path is None
        if stderr_path is None:
            handle, name = tempfile.mkstemp(prefix="cpc-lsp-stderr-")
            os.close(handle)
            stderr_path = Path(name)
        self.stderr_path: Path | None = Path(stderr_path)
        self._stderr = open(self.stderr_path, "wb")
        self.process: subprocess.Popen | None = subprocess.Popen(
            [*SERVER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=None if env is None else {**os.environ, **env},
            cwd=None if code is None else Path(code).resolve(),
        )
        self._start(self.process.stdout, self.process.stdin)

    @classmethod
    def over(cls, reader: Any, writer: Any) -> LspClient:
        """A client on two binary streams: the server's output and its input."""
        client = cls.__new__(cls)
        client._own_stderr, client.stderr_path, client._stderr, client.process = False, None, None, None
        client._start(reader, writer)
        return client

    def _start(self, reader: Any, writer: Any) -> None:
        self._in, self._out = reader, writer
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._pending: dict[Any, tuple[float, Future[Reply]]] = {}
        self.responses: dict[Any, Reply] = {}  # every response, by id (None: a frame with no readable id)
        self.notifications: list[dict[str, Any]] = []
        self.closed = False  # the server closed its output
        threading.Thread(target=self._read, name="lsp-client-reader", daemon=True).start()

    @property
    def pid(self) -> int:
        assert self.process is not None, "an in-process server has no pid of its own"
        return self.process.pid

    # --- wire --------------------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> float:
        """Write raw bytes (framed or not); returns when they left."""
        with self._write_lock:
            sent = time.perf_counter()
            self._out.write(data)
            self._out.flush()
        return sent

    def send_message(self, message: dict[str, Any], pending: Future[Reply] | None = None) -> float:
        """Frame and write one JSON-RPC message (``"jsonrpc": "2.0"`` is added)."""
        data = frame({"jsonrpc": "2.0", **message})
        with self._write_lock:
            sent = time.perf_counter()
            if pending is not None:  # registered before the bytes leave, so the answer finds it
                with self._cond:
                    self._pending[message["id"]] = (sent, pending)
            self._out.write(data)
            self._out.flush()
        return sent

    def _read(self) -> None:
        stream = self._in
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    self._end()
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
                self.send_message({"id": message["id"], "result": None})
                continue
            with self._cond:
                if "method" in message:
                    self.notifications.append(message)
                    future = None
                else:
                    msg_id = message.get("id")
                    sent, future = self._pending.pop(msg_id, (received, None))
                    self.responses[msg_id] = reply = Reply(message, sent, received)
                self._cond.notify_all()
            if future is not None:
                future.set_result(reply)

    def _end(self) -> None:
        with self._cond:
            self.closed = True
            pending, self._pending = self._pending, {}
            self._cond.notify_all()
        for _, future in pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the server closed its output"))

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

    def send(self, method: str, params: Any = None, msg_id: Any = None) -> tuple[Any, Future[Reply]]:
        """Write a request without waiting; returns its id and a future of its Reply."""
        msg_id = next(self._ids) if msg_id is None else msg_id
        future: Future[Reply] = Future()
        self.send_message({"id": msg_id, "method": method, "params": params}, pending=future)
        return msg_id, future

    def request(self, method: str, params: Any = None, timeout: float = 120.0) -> Reply:
        return self.send(method, params)[1].result(timeout)

    def call(self, method: str, params: Any = None, timeout: float = 120.0) -> Any:
        """The result of a request; raises ServerError for an error answer."""
        reply = self.request(method, params, timeout)
        if reply.error is not None:
            raise ServerError(reply.error)
        return reply.result

    def response(self, msg_id: Any, timeout: float = 120.0) -> Reply:
        """The response with `msg_id`, also for requests written as raw bytes (None: no readable id)."""
        return self._wait(lambda: self.responses.get(msg_id), timeout, f"response to {msg_id!r}")

    def notify(self, method: str, params: Any = None) -> float:
        return self.send_message({"method": method, "params": params})

    def wait_notification(self, match: Callable[[dict], bool], timeout: float = 120.0, after: int = 0) -> dict:
        def found():
            return next((n for n in self.notifications[after:] if match(n)), None)

        return self._wait(found, timeout, "matching notification")

    def messages(self, method: str) -> list[str]:
        """Texts of window/showMessage or window/logMessage notifications so far."""
        with self._cond:
            return [n["params"]["message"] for n in self.notifications if n["method"] == method]

    def stderr(self) -> str:
        """What a server started by this client wrote to stderr so far."""
        assert self.stderr_path is not None, "an in-process server logs to this process"
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def wait_stderr(self, text: str, count: int = 1, timeout: float = 60.0) -> None:
        """Wait until `text` has been logged `count` times by a server started by this client
        (e.g. "context chosen": other files' context is chosen on a worker, after a document opens)."""
        deadline = time.monotonic() + timeout
        while self.stderr().count(text) < count:
            if time.monotonic() > deadline or not self.alive():
                raise AssertionError(f"{text!r} logged fewer than {count} times:\n{self.stderr()[-2000:]}")
            time.sleep(0.02)

    # --- an LSP session ---------------------------------------------------------------------

    def initialize(
        self,
        options: Any = None,
        encoding: str = "utf-16",
        wait_loaded: bool = False,
        timeout: float = 180.0,
        capabilities: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """initialize + initialized; with `wait_loaded`, also wait for the model's load to end.
        The capabilities are an editor with inline completion unless given."""
        if capabilities is None:
            capabilities = {
                "general": {"positionEncodings": [encoding]},
                "textDocument": {"inlineCompletion": {}, "synchronization": {}},
            }
        params = {"processId": None, "rootUri": None, "capabilities": capabilities, "initializationOptions": options}
        result = self.call("initialize", params)
        self.notify("initialized", {})
        if wait_loaded:
            self.wait_loaded(timeout=timeout)
        return result

    def wait_loaded(self, after: int = 0, timeout: float = 180.0) -> str:
        """The text of the next log line saying the model loaded or failed to."""

        def done(n: dict) -> bool:
            text = n["params"].get("message", "") if n["method"] == "window/logMessage" else ""
            return text.startswith("loaded") or "cpc-lsp: cannot" in text

        return self.wait_notification(done, timeout, after)["params"]["message"]

    def alive(self) -> bool:
        return not self.closed if self.process is None else self.process.poll() is None

    def shutdown(self, timeout: float = 30.0) -> int | None:
        """shutdown + exit; kills a server process that does not go. Returns its exit code (None
        for a server that is not a process of this client's)."""
        try:
            if self.alive() and not self.closed:
                self.request("shutdown", None, timeout)
                self.notify("exit")
            if self.process is None:
                self._out.close()  # end of input: the server's read loop ends
                return None
            return self.process.wait(timeout)
        except Exception:
            if self.process is None:
                return None
            self.process.kill()
            return self.process.wait()
        finally:
            # An in-process server's output is closed by whoever runs it (closing a stream another
            # thread is reading from would wait for that read).
            for stream in (self._out,) if self.process is None else (self._out, self._in):
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass
            if self._stderr is not None:
                self._stderr.close()
            if self._own_stderr and self.stderr_path is not None:
                self.stderr_path.unlink(missing_ok=True)

    close = shutdown

    def __enter__(self) -> LspClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def end_position(text: str, encoding: str = "utf-16") -> tuple[int, int]:
    """LSP (line, character) of the end of `text`, computed independently of the server."""
    last = text[text.rfind("\n") + 1 :]
    if encoding == "utf-8":
        return text.count("\n"), len(last.encode("utf-8", "surrogatepass"))
    return text.count("\n"), len(last.encode("utf-16-le", "surrogatepass")) // 2


def _pos(line: int, character: int) -> dict[str, int]:
    return {"line": line, "character": character}


class Editor:
    """Document bookkeeping on top of the client: open, edit, ask for a suggestion."""

    def __init__(self, client: LspClient, encoding: str = "utf-16") -> None:
        self.client = client
        self.encoding = encoding
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

    def text(self, uri: str) -> str:
        return self._texts[uri]

    def end(self, uri: str) -> dict[str, int]:
        """The LSP position of the end of the document."""
        return _pos(*end_position(self._texts[uri], self.encoding))

    def type(self, uri: str, chars: str) -> None:
        """Insert `chars` at the end of the document (one didChange)."""
        at = self.end(uri)
        self._texts[uri] += chars
        self.change(uri, chars, (at["line"], at["character"]))

    def change(
        self, uri: str, text: str, start: tuple[int, int] | None = None, end: tuple[int, int] | None = None
    ) -> None:
        """One didChange replacing start..end (the whole document when start is None) with `text`.
        The text kept here is updated only by `type` and a whole-document change."""
        self._versions[uri] = self._versions.get(uri, 1) + 1
        change: dict[str, Any] = {"text": text}
        if start is None:
            self._texts[uri] = text
        else:
            change["range"] = {"start": _pos(*start), "end": _pos(*(end or start))}
        params = {"textDocument": {"uri": uri, "version": self._versions[uri]}, "contentChanges": [change]}
        self.client.notify("textDocument/didChange", params)

    def inline_params(self, uri: str, position: tuple[int, int] | None = None, invoked: bool = False) -> dict[str, Any]:
        """Asked as an editor asks while the user types (trigger Automatic), or as when the user
        asks for a suggestion or the next one (`invoked`: trigger Invoked)."""
        at = self.end(uri) if position is None else _pos(*position)
        return {"textDocument": {"uri": uri}, "position": at, "context": {"triggerKind": 1 if invoked else 2}}

    def send_inline(self, uri: str, position: tuple[int, int] | None = None, msg_id: Any = None) -> Any:
        """Send `textDocument/inlineCompletion` (at the end of the document by default); returns its id."""
        return self.client.send("textDocument/inlineCompletion", self.inline_params(uri, position), msg_id)[0]

    def inline(
        self, uri: str, position: tuple[int, int] | None = None, timeout: float = 120.0, invoked: bool = False
    ) -> Reply:
        """`textDocument/inlineCompletion`, at the end of the document by default."""
        params = self.inline_params(uri, position, invoked)
        return self.client.request("textDocument/inlineCompletion", params, timeout)

    def suggestion(self, uri: str, position: tuple[int, int] | None = None, timeout: float = 120.0) -> str | None:
        """The first suggested insertText (None for an empty answer); an error answer fails."""
        reply = self.inline(uri, position, timeout)
        assert reply.error is None, reply.message
        return insert_text(reply)

    def stats(self) -> dict[str, Any] | None:
        return self.client.call("cpcLsp/stats", None)


def insert_text(reply: Reply) -> str | None:
    """The first item's insertText, or None for an empty answer or an error."""
    if reply.error is not None or not reply.result:
        return None
    items = reply.result["items"] if isinstance(reply.result, dict) else reply.result
    return items[0]["insertText"] if items else None


def insert_texts(reply: Reply) -> list[str]:
    """Every item's insertText, in the order sent ([] for an empty answer or an error)."""
    if reply.error is not None or not reply.result:
        return []
    items = reply.result["items"] if isinstance(reply.result, dict) else reply.result
    return [item["insertText"] for item in items]


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MiB; None where /proc is missing."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
