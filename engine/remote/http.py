"""A small HTTP/1.1 client for llama-server: JSON requests, server-sent-event streams, and
answers waited for across calls.

Why not http.client (or httpx, urllib3): their reads can be neither interrupted by a cancel from
another thread nor resumed after a timeout (a timed-out read leaves the connection unusable), and
a superseded completion must close its connection at once, since closing it is what stops the
server decoding. So this reads the socket itself, in short waits that check the request's deadline
and cancel flag between them. A prompt decode that outlasts a keystroke's budget is therefore kept
(`start`: a `Pending` answer is waited for again by a later call, nothing is sent twice).

Connections are kept alive (HTTP/1.1 keep-alive): an answer read to its end leaves its connection
for the next request, so a keystroke's round trips and the next keystroke's reuse one TCP (and
TLS) connection. A stream closed before its end closes its connection: that is what stops the
server. `https://` is checked against the system's CAs, or `ca_file`.

Every failure becomes a `ModelServerError` whose message names the URL and what to do, and never
the API key or any request body (which holds document text). Only a server that is down (nothing
listens, the connection is refused or reset, it is still loading) starts a back-off window during
which calls fail fast with the same error (doubling up to BACKOFF_MAX_S; a success resets it). A
slow answer ("timeout") never does: the next call asks the server again.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from engine.backend import Traffic  # noqa: F401  (re-exported: a client counts its traffic)
from engine.remote.connection import Connection, StreamCancelled  # noqa: F401  (StreamCancelled: re-exported)
from engine.types import ModelServerError

BACKOFF_START_S, BACKOFF_MAX_S = 0.25, 4.0
BACKOFF_KINDS = ("unreachable",)  # a server that is down; never "timeout" (a slow one)
IDLE_CONNECTIONS = 2  # kept-alive connections waiting for the next request
# Sent on every request: an opaque, salted hash naming the document (engine.remote.servers.affinity_key),
# so a load balancer can keep a document on one server (nginx: `hash $http_x_cpc_document
# consistent`). Never the document's text or name, never a key.
AFFINITY_HEADER = "X-Cpc-Document"
# Read from every answer when a balancer adds it (nginx: `add_header X-Cpc-Upstream
# $upstream_addr always`): which server answered. A change means the slots and the numbers known
# so far are another server's (UpstreamChanged).
UPSTREAM_HEADER = "x-cpc-upstream"


class UpstreamChanged(ModelServerError):
    """A load balancer's answer came from another server than the last one (UPSTREAM_HEADER):
    what we know of slots and distributions belongs to the other server, so the caller checks the
    new one's model and forgets what it knew (engine.remote.rows `recover`) before asking again."""

    def __init__(self, url: str, before: str, after: str) -> None:
        super().__init__(
            "unreachable",
            url,
            "the load balancer moved this document to another server",
            "Nothing to do: the next request is sent there",
        )
        self.before, self.after = before, after


def parse_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, base path) of an http:// or https:// URL; ModelServerError(kind="url")
    otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise ModelServerError(
            "url",
            url,
            f"the model server URL is not valid ({error})",
            "Set `modelServer` to a URL like http://127.0.0.1:8080",
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ModelServerError(
            "url",
            url,
            "the model server URL must start with http:// or https:// and name a host",
            "Set `modelServer` to a URL like http://127.0.0.1:8080",
        )
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), parts.path.rstrip("/")


def tls_context(ca_file: str | Path | None) -> ssl.SSLContext:
    """Certificate and host name checks on; `ca_file` (PEM) instead of the system's CAs."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


class ModelServerClient:
    """One server's URL, key and time budget. Thread-safe for the counters; one request at a time
    per call (the engine runs on one worker)."""

    def __init__(
        self, url: str, api_key: str | None = None, timeout_s: float = 5.0, ca_file: str | Path | None = None
    ) -> None:
        self.url = url.strip().rstrip("/")
        self.scheme, self.host, self.port, self._base = parse_url(self.url)
        self._key = api_key or None
        self.timeout_s = timeout_s
        self.ca_file = str(ca_file) if ca_file else None
        self.tls: ssl.SSLContext | None = None
        if self.scheme == "https":
            try:
                self.tls = tls_context(self.ca_file)
            except (OSError, ssl.SSLError) as error:
                raise self.error(
                    "tls",
                    f"cannot read the CA file {self.ca_file} ({getattr(error, 'strerror', None) or error})",
                    "Set `modelServerCaFile` to a PEM file with the certificate of the CA that signed the server's certificate",
                ) from None
        self.traffic = Traffic()
        self._lock = threading.Lock()
        self._idle: list[Connection] = []
        self._backoff_s = 0.0
        self._blocked_until = 0.0
        self._last_error: ModelServerError | None = None
        self.affinity: str | None = None  # AFFINITY_HEADER's value for the next requests
        self.upstream: str | None = None  # the server behind a balancer that answered last

    def __repr__(self) -> str:  # never the key
        return f"ModelServerClient({self.url!r})"

    # --- requests --------------------------------------------------------------------------

    def get_json(self, path: str, deadline: float | None = None, cancel: Callable[[], bool] | None = None):
        return self._json("GET", path, None, deadline, cancel)

    def post_json(self, path: str, body: dict, deadline: float | None = None, cancel: Callable[[], bool] | None = None):
        return self._json("POST", path, body, deadline, cancel)

    def stream(
        self, path: str, body: dict, deadline: float | None = None, cancel: Callable[[], bool] | None = None
    ) -> EventStream:
        """POST `body` and return its server-sent events (opened: status and headers read)."""
        conn, status, headers = self._exchange(self._request("POST", path, body), deadline, cancel)
        try:
            if status != 200:
                raise self.status_error(status, conn.read_body())
            if "text/event-stream" not in headers.get("content-type", ""):
                # The server answers a stream whose first result is an error as plain JSON.
                raise self.status_error(status, conn.read_body(), unexpected=True)
        except BaseException as error:
            conn.close()
            self.failed(error)
            raise
        return EventStream(self, conn, headers)

    def start(
        self, path: str, body: dict, deadline: float | None = None, cancel: Callable[[], bool] | None = None
    ) -> Pending:
        """POST `body` (a JSON answer is expected) and return at once: `Pending.wait` reads the
        answer, and may be called again after a timeout or a cancel (the request goes on)."""
        request = self._request("POST", path, body)
        conn = self._send(request, deadline, cancel)
        return Pending(self, conn, request, path)

    def _json(self, method: str, path: str, body: dict | None, deadline: float | None, cancel):
        conn, status, headers = self._exchange(self._request(method, path, body), deadline, cancel)
        return self.finish_json(conn, status, path)

    def finish_json(self, conn: Connection, status: int, path: str):
        try:
            data = conn.read_body()
            if status != 200:
                raise self.status_error(status, data)
            try:
                value = json.loads(data)
            except ValueError:
                raise self.protocol("its answer to %s is not JSON" % path) from None
        except BaseException as error:
            conn.close()
            self.failed(error)
            raise
        self.release(conn)
        self.succeeded()
        return value

    def _request(self, method: str, path: str, body: dict | None) -> bytes:
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = [
            f"{method} {self._base}{path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Accept: */*",
            "Connection: keep-alive",
        ]
        if self._key:
            head.append(f"Authorization: Bearer {self._key}")
        if self.affinity:
            head.append(f"{AFFINITY_HEADER}: {self.affinity}")
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload

    def _send(self, request: bytes, deadline: float | None, cancel, fresh: bool = False) -> Connection:
        """A connection (a kept-alive one unless `fresh`) with `request` sent on it."""
        self._check_backoff()
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout_s
        conn = None if fresh else self._take_idle()
        if conn is None:
            conn = Connection(self, deadline, cancel)
            try:
                conn.connect()
            except BaseException as error:
                conn.close()
                self.failed(error)
                raise
        else:
            conn.set_limits(deadline, cancel)
        try:
            conn.send(request)
        except ModelServerError as error:
            conn.close()
            if conn.reused and not fresh:  # the server had closed it while idle: once more, fresh
                return self._send(request, deadline, cancel, fresh=True)
            self.failed(error)
            raise
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self.traffic.round_trips += 1
        return conn

    def _exchange(self, request: bytes, deadline: float | None, cancel) -> tuple[Connection, int, dict[str, str]]:
        """Send `request` and read the answer's head; a kept-alive connection that the server had
        closed meanwhile (no byte of an answer) is replaced once by a fresh one."""
        conn = self._send(request, deadline, cancel)
        return self.head(conn, request, deadline, cancel)

    def head(
        self, conn: Connection, request: bytes, deadline: float | None, cancel
    ) -> tuple[Connection, int, dict[str, str]]:
        try:
            status, headers = conn.read_head()
        except ModelServerError as error:
            conn.close()
            if conn.reused and not conn.received and error.kind == "unreachable":
                with self._lock:
                    self.traffic.round_trips -= 1  # that send was never answered: it is sent again
                conn = self._send(request, deadline, cancel, fresh=True)
                return self.head(conn, request, deadline, cancel)
            self.failed(error)
            raise
        except BaseException:
            conn.close()
            raise
        self._note_upstream(conn, headers)
        return conn, status, headers

    def _note_upstream(self, conn: Connection, headers: dict[str, str]) -> None:
        """Which server behind a balancer answered (the last of nginx's tried list); a change from
        the last answer's raises UpstreamChanged (before the status is looked at: an answer of the
        other server to a slot it does not have is no error of ours)."""
        tried = headers.get(UPSTREAM_HEADER)
        if not tried:
            return
        answered = tried.split(",")[-1].strip().split(" : ")[-1].strip()
        before, self.upstream = self.upstream, answered
        if before is not None and before != answered:
            conn.close()
            raise UpstreamChanged(self.url, before, answered)

    # --- kept-alive connections ---------------------------------------------------------------

    def _take_idle(self) -> Connection | None:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if conn.idle_ok():
                    return conn
                conn.close()
        return None

    def release(self, conn: Connection) -> None:
        """An answer was read to its end: keep its connection for the next request if it may be."""
        if conn.closed or not conn.keep_alive or conn.buffered():
            conn.close()
            return
        conn.set_limits(time.monotonic() + self.timeout_s, None)
        with self._lock:
            self._idle.append(conn)
            while len(self._idle) > IDLE_CONNECTIONS:
                self._idle.pop(0).close()

    def close(self) -> None:
        """Close the kept-alive connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # --- errors and back-off ---------------------------------------------------------------

    def error(self, kind: str, problem: str, remedy: str) -> ModelServerError:
        return ModelServerError(kind, self.url, problem, remedy)

    def protocol(self, problem: str) -> ModelServerError:
        return self.error(
            "protocol",
            f"the model server's answer is not what llama-server sends: {problem}",
            "Check that `modelServer` points at llama-server (built from this project's llama.cpp), not another service or a proxy that rewrites answers",
        )

    def unreachable(self, problem: str) -> ModelServerError:
        return self.error(
            "unreachable",
            f"server unreachable: {problem}",
            'Start llama-server there (see the README, "Use a shared server"), or fix `modelServer`',
        )

    def timed_out(self) -> ModelServerError:
        return self.error(
            "timeout",
            f"the model server did not answer within {self.timeout_s:g} s",
            "Raise `modelServerTimeoutMs`, or use a less loaded server",
        )

    def tls_refused(self, error: ssl.SSLError) -> ModelServerError:
        """A certificate or handshake the checks refuse; the message says which check and why."""
        if isinstance(error, ssl.SSLCertVerificationError):
            why = str(error.verify_message or error.reason or error).rstrip(".")
            return self.error(
                "tls",
                f"the model server's certificate was refused: {why}",
                "Renew the server's certificate if it expired; if it is signed by your own CA, set `modelServerCaFile` "
                "to that CA's certificate (PEM); the URL's host must be one the certificate names",
            )
        return self.error(
            "tls",
            f"the TLS handshake with the model server failed ({error.reason or error})",
            "Check that `modelServer`'s https:// port is served by a TLS proxy (nginx, stunnel) in front of llama-server",
        )

    def status_error(self, status: int, data: bytes, unexpected: bool = False) -> ModelServerError:
        if status == 401:
            return self.error(
                "auth",
                "the model server refused the API key (HTTP 401)",
                "Set `modelServerApiKey` (or CPC_LSP_MODEL_SERVER_API_KEY) to one of the keys llama-server was started with (--api-key)",
            )
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

    def failed(self, error: BaseException) -> None:
        """A failure: only a server that is down starts (or doubles) the back-off."""
        if not isinstance(error, ModelServerError) or error.kind not in BACKOFF_KINDS:
            return
        with self._lock:
            self._backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_START_S, self._backoff_s * 2))
            self._blocked_until = time.monotonic() + self._backoff_s
            self._last_error = error

    def succeeded(self) -> None:
        with self._lock:
            self._backoff_s = 0.0
            self._last_error = None

    def count_received(self, n: int) -> None:
        with self._lock:
            self.traffic.bytes_received += n

    def count_connection(self) -> None:
        with self._lock:
            self.traffic.connections += 1

    def count_sent(self, n: int) -> None:
        with self._lock:
            self.traffic.bytes_sent += n


class Pending:
    """A request whose answer is still to come: `wait` may time out or be cancelled and be called
    again later (the connection stays open, the server goes on); `close` gives it up (the server
    stops at its next check of the connection, about 1 s for llama-server)."""

    def __init__(self, client: ModelServerClient, conn: Connection, request: bytes, path: str) -> None:
        self._client, self._conn, self._request, self._path = client, conn, request, path
        self.started = time.monotonic()

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def wait(self, deadline: float | None, cancel: Callable[[], bool] | None = None):
        """The JSON answer. Raises ModelServerError("timeout") at `deadline` and StreamCancelled
        when `cancel()` says so, both with the request still open; other errors close it."""
        client = self._client
        deadline = deadline if deadline is not None else time.monotonic() + client.timeout_s
        conn = self._conn
        conn.set_limits(deadline, cancel)
        try:
            conn.wait_readable()
        except (StreamCancelled, ModelServerError) as error:
            if isinstance(error, StreamCancelled) or error.kind == "timeout":
                raise  # still open: a later wait goes on
            conn.close()
            client.failed(error)
            raise
        # The answer has begun: it is small and comes at once, so it is read under a fresh budget.
        limit = time.monotonic() + client.timeout_s
        conn.set_limits(limit, None)
        self._conn, status, _ = client.head(conn, self._request, limit, None)
        return client.finish_json(self._conn, status, self._path)

    def ready(self) -> bool:
        """The answer has begun to arrive (or the connection broke): `wait` would not wait on the server."""
        return self._conn.readable_now()

    def close(self) -> None:
        self._conn.close()


class EventStream:
    """The `data:` events of one streamed answer, as dicts. `close()` drops the connection, which
    makes llama-server cancel the task (it notices at its next write, i.e. the next token); a
    stream read to its end leaves its connection for the next request."""

    def __init__(self, client: ModelServerClient, conn: Connection, headers: dict[str, str]) -> None:
        self._client = client
        self._conn = conn
        self._pieces = conn.body_pieces()
        self._text = b""
        self.finished = False  # the server ended the stream itself

    @property
    def closed(self) -> bool:
        return self._conn.closed or self.finished

    def set_limits(self, deadline: float, cancel: Callable[[], bool] | None) -> None:
        """A later reader (the next request's generation) reads under its own budget and cancel."""
        self._conn.set_limits(deadline, cancel)

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
                    self._client.succeeded()
                    self._client.release(self._conn)
                    return None
        except ModelServerError as error:
            self.close()
            if not quiet:
                self._client.failed(error)
            raise

    def _parse(self, block: bytes) -> dict | None:
        data = [line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")]
        if not data:
            return None  # a comment (ping) or an empty block
        try:
            event = json.loads(b"".join(data))
        except ValueError:
            raise self._client.protocol("an event that is not JSON") from None
        if event is None:
            return None  # llama-server sends `data: null` between the prompts of one request
        if not isinstance(event, dict):
            raise self._client.protocol("an event that is not a JSON object")
        if "error" in event:
            raise self._client.status_error(
                int(event["error"].get("code", 500) or 500) if isinstance(event["error"], dict) else 500,
                json.dumps(event).encode(),
            )
        return event

    def close(self) -> None:
        if not self.finished:
            self._conn.close()
