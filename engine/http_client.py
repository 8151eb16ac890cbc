"""A small HTTP/1.1 client for llama-server: JSON requests and server-sent-event streams.

Why not http.client: its reads can be neither interrupted by a cancel from another thread nor
resumed after a timeout (a timed-out socket file refuses every later read), and a superseded
completion must close its connection at once, since closing it is what stops the server decoding.
So this reads the socket itself, in short `select` waits that check the request's deadline and
cancel flag between them. Plain `http://` only (see engine.remote for why).

Every failure becomes a `ModelServerError` whose message names the URL and what to do, and never
the API key or any request body (which holds document text). After a failure, calls fail fast
with the same error for a back-off window that doubles up to BACKOFF_MAX_S; a success resets it.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.types import ModelServerError

WAIT_S = 0.02  # longest wait between checks of the cancel flag
BACKOFF_START_S, BACKOFF_MAX_S = 0.25, 4.0
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024


class StreamCancelled(Exception):
    """The caller's cancel flag was set while waiting for the server (the connection is closed)."""


@dataclass
class Traffic:
    """Requests and bytes since the client was made (per-request figures are differences)."""

    round_trips: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


def parse_url(url: str) -> tuple[str, int, str]:
    """(host, port, base path) of a plain-http URL; ModelServerError(kind="url") otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise ModelServerError("url", url, f"the model server URL is not valid ({error})", "Set `modelServer` to a URL like http://127.0.0.1:8080") from None
    if parts.scheme == "https":
        raise ModelServerError(
            "url", url, "https:// model server URLs are not supported",
            "Use plain http:// on a trusted network, or a TLS-terminating proxy (e.g. an SSH tunnel or stunnel) listening on 127.0.0.1 and point `modelServer` at it",
        )
    if parts.scheme != "http" or not parts.hostname:
        raise ModelServerError("url", url, "the model server URL must start with http:// and name a host", "Set `modelServer` to a URL like http://127.0.0.1:8080")
    return parts.hostname, port or 80, parts.path.rstrip("/")


class ModelServerClient:
    """One server's URL, key and time budget. Thread-safe for the counters; one request at a time
    per call (the engine runs on one worker)."""

    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 5.0) -> None:
        self.url = url.strip().rstrip("/")
        self.host, self.port, self._base = parse_url(self.url)
        self._key = api_key or None
        self.timeout_s = timeout_s
        self.traffic = Traffic()
        self._lock = threading.Lock()
        self._backoff_s = 0.0
        self._blocked_until = 0.0
        self._last_error: ModelServerError | None = None

    def __repr__(self) -> str:  # never the key
        return f"ModelServerClient({self.url!r})"

    # --- requests --------------------------------------------------------------------------

    def get_json(self, path: str, deadline: float | None = None, cancel: Callable[[], bool] | None = None):
        return self._json("GET", path, None, deadline, cancel)

    def post_json(self, path: str, body: dict, deadline: float | None = None, cancel: Callable[[], bool] | None = None):
        return self._json("POST", path, body, deadline, cancel)

    def stream(self, path: str, body: dict, deadline: float | None = None, cancel: Callable[[], bool] | None = None) -> EventStream:
        """POST `body` and return its server-sent events (opened: status and headers read)."""
        conn = self._open("POST", path, body, deadline, cancel)
        try:
            status, headers = conn.read_head()
            if status != 200:
                raise self._status_error(status, conn.read_body(headers))
            if "text/event-stream" not in headers.get("content-type", ""):
                # The server answers a stream whose first result is an error as plain JSON.
                raise self._status_error(status, conn.read_body(headers), unexpected=True)
        except BaseException as error:
            conn.close()
            self._failed(error)
            raise
        return EventStream(self, conn, headers)

    def _json(self, method: str, path: str, body: dict | None, deadline: float | None, cancel):
        conn = self._open(method, path, body, deadline, cancel)
        try:
            status, headers = conn.read_head()
            data = conn.read_body(headers)
            if status != 200:
                raise self._status_error(status, data)
            try:
                value = json.loads(data)
            except ValueError:
                raise self.protocol("its answer to %s is not JSON" % path) from None
        except BaseException as error:
            self._failed(error)
            raise
        finally:
            conn.close()
        self._succeeded()
        return value

    def _open(self, method: str, path: str, body: dict | None, deadline: float | None, cancel) -> _Connection:
        self._check_backoff()
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout_s
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = [f"{method} {self._base}{path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept: */*", "Connection: close"]
        if self._key:
            head.append(f"Authorization: Bearer {self._key}")
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload
        conn = _Connection(self, deadline, cancel)
        try:
            conn.connect()
            conn.send(request)
        except BaseException as error:
            conn.close()
            self._failed(error)
            raise
        with self._lock:
            self.traffic.round_trips += 1
        return conn

    # --- errors and back-off ---------------------------------------------------------------

    def error(self, kind: str, problem: str, remedy: str) -> ModelServerError:
        return ModelServerError(kind, self.url, problem, remedy)

    def protocol(self, problem: str) -> ModelServerError:
        return self.error("protocol", f"the model server's answer is not what llama-server sends: {problem}", "Check that `modelServer` points at llama-server (built from this project's llama.cpp), not another service or a proxy that rewrites answers")

    def unreachable(self, problem: str) -> ModelServerError:
        return self.error("unreachable", f"server unreachable: {problem}", "Start llama-server there (see the README, \"Use a shared server\"), or fix `modelServer`")

    def timed_out(self) -> ModelServerError:
        return self.error("timeout", f"the model server did not answer within {self.timeout_s:g} s", "Raise `modelServerTimeoutMs`, or use a less loaded server")

    def _status_error(self, status: int, data: bytes, unexpected: bool = False) -> ModelServerError:
        if status == 401:
            return self.error("auth", "the model server refused the API key (HTTP 401)", "Set `modelServerApiKey` (or CPC_LSP_MODEL_SERVER_API_KEY) to one of the keys llama-server was started with (--api-key)")
        if status == 503:
            return self.unreachable("it is still loading its model (HTTP 503)")
        kind = "?"
        try:
            kind = str(json.loads(data).get("error", {}).get("type", "?"))[:40]
        except (ValueError, AttributeError):
            pass
        # The server's own message is left out: it can quote the request (grammar, prompt text).
        what = "an unexpected answer" if unexpected else f"HTTP {status}"
        return self.protocol(f"{what} (error type {kind})")

    def _check_backoff(self) -> None:
        with self._lock:
            if self._last_error is not None and time.monotonic() < self._blocked_until:
                raise self._last_error

    def _failed(self, error: BaseException) -> None:
        if not isinstance(error, ModelServerError):
            return
        with self._lock:
            self._backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_START_S, self._backoff_s * 2))
            self._blocked_until = time.monotonic() + self._backoff_s
            self._last_error = error

    def _succeeded(self) -> None:
        with self._lock:
            self._backoff_s = 0.0
            self._last_error = None

    def _count_received(self, n: int) -> None:
        with self._lock:
            self.traffic.bytes_received += n

    def _count_sent(self, n: int) -> None:
        with self._lock:
            self.traffic.bytes_sent += n


class _Connection:
    """One request's socket: reads in short waits, honouring the deadline and the cancel flag."""

    def __init__(self, client: ModelServerClient, deadline: float, cancel: Callable[[], bool] | None) -> None:
        self._client = client
        self._deadline = deadline
        self._cancel = cancel
        self._sock: socket.socket | None = None
        self._buffer = b""
        self.closed = False

    def connect(self) -> None:
        c = self._client
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise c.timed_out()
        try:
            self._sock = socket.create_connection((c.host, c.port), timeout=remaining)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except socket.timeout:
            raise c.timed_out() from None
        except socket.gaierror:
            raise c.unreachable(f"the host {c.host!r} is not known") from None
        except OSError as error:
            raise c.unreachable(f"cannot connect to {c.host}:{c.port} ({error.strerror or error})") from None

    def send(self, data: bytes) -> None:
        try:
            self._sock.settimeout(max(0.001, self._deadline - time.monotonic()))
            self._sock.sendall(data)
        except socket.timeout:
            raise self._client.timed_out() from None
        except OSError as error:
            raise self._client.unreachable(f"the connection broke while sending ({error.strerror or error})") from None
        self._client._count_sent(len(data))

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at the end of the stream."""
        while True:
            if self._cancel is not None and self._cancel():
                self.close()
                raise StreamCancelled()
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise self._client.timed_out()
            try:
                ready, _, _ = select.select([self._sock], [], [], min(WAIT_S, remaining))
                if not ready:
                    continue
                data = self._sock.recv(65536)
            except OSError as error:
                self.close()
                raise self._client.unreachable(f"the connection broke ({error.strerror or error})") from None
            if not data:
                return False
            self._client._count_received(len(data))
            self._buffer += data
            return True

    def read_line(self, limit: int = MAX_HEADER_BYTES) -> bytes | None:
        """One line without its CRLF/LF; None at the end of the stream."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
                return line[:-1] if line.endswith(b"\r") else line
            if len(self._buffer) > limit:
                raise self._client.protocol("a line longer than %d bytes" % limit)
            if not self._fill():
                if self._buffer:
                    line, self._buffer = self._buffer, b""
                    return line
                return None

    def read_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not self._fill():
                raise self._client.protocol("the answer was cut short")
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def read_head(self) -> tuple[int, dict[str, str]]:
        status_line = self.read_line()
        if status_line is None:
            raise self._client.unreachable("the server closed the connection without answering")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise self._client.protocol("not an HTTP answer")
        headers: dict[str, str] = {}
        while True:
            line = self.read_line()
            if line is None:
                raise self._client.protocol("the headers were cut short")
            if not line:
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._chunk_left = 0
        self._body_left = int(headers["content-length"]) if headers.get("content-length", "").isdigit() else None
        return int(parts[1]), headers

    def read_body(self, headers: dict[str, str]) -> bytes:
        out = bytearray()
        for piece in self.body_pieces():
            out += piece
            if len(out) > MAX_BODY_BYTES:
                raise self._client.protocol("an answer larger than %d bytes" % MAX_BODY_BYTES)
        return bytes(out)

    def body_pieces(self) -> Iterator[bytes]:
        """The body as it arrives (chunked, sized or until close)."""
        if self._chunked:
            while True:
                size_line = self.read_line()
                if size_line is None:
                    raise self._client.protocol("the answer was cut short")
                try:
                    size = int(size_line.split(b";")[0].strip() or b"x", 16)
                except ValueError:
                    raise self._client.protocol("a malformed chunk") from None
                if size == 0:
                    return
                yield self.read_exact(size)
                self.read_exact(2)
        elif self._body_left is not None:
            left = self._body_left
            while left > 0:
                if not self._buffer and not self._fill():
                    raise self._client.protocol("the answer was cut short")
                piece, self._buffer = self._buffer[:left], self._buffer[left:]
                left -= len(piece)
                yield piece
        else:
            while True:
                if self._buffer:
                    piece, self._buffer = self._buffer, b""
                    yield piece
                if not self._fill():
                    return

    def close(self) -> None:
        if self._sock is not None and not self.closed:
            self.closed = True
            try:
                self._sock.close()
            except OSError:
                pass


class EventStream:
    """The `data:` events of one streamed answer, as dicts. `close()` drops the connection, which
    makes llama-server cancel the task (it notices at its next write, i.e. the next token)."""

    def __init__(self, client: ModelServerClient, conn: _Connection, headers: dict[str, str]) -> None:
        self._client = client
        self._conn = conn
        self._pieces = conn.body_pieces()
        self._text = b""
        self.finished = False  # the server ended the stream itself

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def set_limits(self, deadline: float, cancel: Callable[[], bool] | None) -> None:
        """A later reader (the next request's generation) reads under its own budget and cancel."""
        self._conn._deadline, self._conn._cancel = deadline, cancel

    def next_event(self, quiet: bool = False) -> dict | None:
        """The next event; None when the server ended the stream. Raises ModelServerError for an
        error event or a malformed one, StreamCancelled when the cancel flag is set meanwhile.
        `quiet`: a failure does not start the back-off (reading what is left of a stream)."""
        try:
            while True:
                end = self._text.find(b"\n\n")
                if end >= 0:
                    block, self._text = self._text[:end], self._text[end + 2 :]
                    event = self._parse(block)
                    if event is not None:
                        return event
                    continue
                try:
                    self._text += next(self._pieces)
                except StopIteration:
                    if self._text.strip():
                        raise self._client.protocol("the event stream was cut short") from None
                    self.finished = True
                    self._client._succeeded()
                    self.close()
                    return None
        except ModelServerError as error:
            self.close()
            if not quiet:
                self._client._failed(error)
            raise

    def _parse(self, block: bytes) -> dict | None:
        data = [line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")]
        if not data:
            return None  # a comment (ping) or an empty block
        try:
            event = json.loads(b"".join(data))
        except ValueError:
            raise self._client.protocol("an event that is not JSON") from None
        if not isinstance(event, dict):
            raise self._client.protocol("an event that is not a JSON object")
        if "error" in event:
            raise self._client._status_error(int(event["error"].get("code", 500) or 500) if isinstance(event["error"], dict) else 500, json.dumps(event).encode())
        return event

    def close(self) -> None:
        self._conn.close()
