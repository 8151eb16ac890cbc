"""One socket to a llama-server (engine.remote.http): reads in short waits that check the request's
deadline and cancel flag between them, so a read can be interrupted from another thread and
resumed after a timeout."""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from engine.types import ModelServerError

WAIT_S = 0.02  # longest wait between checks of the cancel flag
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024


class StreamCancelled(Exception):
    """The caller's cancel flag was set while waiting for the server (a stream's connection is
    closed; a `Pending` answer stays open for a later wait)."""


class Owner(Protocol):
    """What a connection asks of its client (engine.remote.http.ModelServerClient): where to
    connect, and the errors and counters it reports to."""

    host: str
    port: int
    tls: ssl.SSLContext | None

    def count_connection(self) -> None: ...

    def count_sent(self, n: int) -> None: ...

    def count_received(self, n: int) -> None: ...

    def timed_out(self) -> ModelServerError: ...

    def unreachable(self, problem: str) -> ModelServerError: ...

    def protocol(self, problem: str) -> ModelServerError: ...

    def tls_refused(self, error: ssl.SSLError) -> ModelServerError: ...


class Connection:
    """One socket: reads in short waits, honouring the deadline and the cancel flag."""

    def __init__(self, client: Owner, deadline: float, cancel: Callable[[], bool] | None) -> None:
        self._client = client
        self._deadline = deadline
        self._cancel = cancel
        self._sock: socket.socket | None = None
        self._buffer = b""
        self.closed = False
        self.reused = False  # it served an earlier request
        self.received = False  # a byte of the current answer arrived
        self.keep_alive = True  # the last answer allows another request on this connection

    def set_limits(self, deadline: float, cancel: Callable[[], bool] | None) -> None:
        self._deadline, self._cancel = deadline, cancel

    def connect(self) -> None:
        c = self._client
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise c.timed_out()
        try:
            sock = socket.create_connection((c.host, c.port), timeout=remaining)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except socket.timeout:
            raise c.timed_out() from None
        except socket.gaierror:
            raise c.unreachable(f"the host {c.host!r} is not known") from None
        except OSError as error:
            raise c.unreachable(f"cannot connect to {c.host}:{c.port} ({error.strerror or error})") from None
        c.count_connection()
        self._sock = sock
        if c.tls is not None:
            try:
                self._sock = c.tls.wrap_socket(sock, server_hostname=c.host, do_handshake_on_connect=False)
                self._sock.settimeout(max(0.001, self._deadline - time.monotonic()))
                self._sock.do_handshake()
            except ssl.SSLError as error:
                raise c.tls_refused(error) from None
            except socket.timeout:
                raise c.timed_out() from None
            except OSError as error:
                raise c.unreachable(
                    f"the connection broke during the TLS handshake ({error.strerror or error})"
                ) from None

    def idle_ok(self) -> bool:
        """A kept-alive connection can take a request: open, and nothing (an EOF, stale bytes) waiting on it."""
        return not self.readable_now()

    def buffered(self) -> bool:
        return bool(self._buffer)

    def readable_now(self) -> bool:
        """A byte (or the end, or an error) can be read at once."""
        if self._buffer or self.closed or self._sock is None:
            return True
        try:
            if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
                return True
            ready, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(ready)

    def _open_socket(self) -> socket.socket:
        """The connected socket; a connection used before `open` (or after `close`) is broken."""
        if self._sock is None:
            raise self._client.unreachable("the connection broke (it is closed)")
        return self._sock

    def send(self, data: bytes) -> None:
        self.received = False
        sock = self._open_socket()
        try:
            sock.settimeout(max(0.001, self._deadline - time.monotonic()))
            sock.sendall(data)
        except socket.timeout:
            raise self._client.timed_out() from None
        except OSError as error:
            raise self._client.unreachable(f"the connection broke while sending ({error.strerror or error})") from None
        self._client.count_sent(len(data))

    def wait_readable(self) -> None:
        """Until a byte of the answer can be read, without reading it (so it can be resumed)."""
        sock = self._open_socket()
        while not self._buffer:
            if self._cancel is not None and self._cancel():
                raise StreamCancelled()
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise self._client.timed_out()
            if isinstance(sock, ssl.SSLSocket) and sock.pending():
                return
            try:
                ready, _, _ = select.select([sock], [], [], min(WAIT_S, remaining))
            except (OSError, ValueError) as error:
                self.close()
                raise self._client.unreachable(f"the connection broke ({error})") from None
            if ready:
                return

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at the end of the stream."""
        sock = self._open_socket()
        while True:
            if self._cancel is not None and self._cancel():
                self.close()
                raise StreamCancelled()
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise self._client.timed_out()
            try:
                sock.settimeout(min(WAIT_S, remaining))
                data = sock.recv(65536)
            except socket.timeout:
                continue
            except ssl.SSLError as error:
                self.close()
                raise self._client.unreachable(f"the TLS connection broke ({error.reason or error})") from None
            except OSError as error:
                self.close()
                raise self._client.unreachable(f"the connection broke ({error.strerror or error})") from None
            if not data:
                return False
            self.received = True
            self._client.count_received(len(data))
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
        self._body_left = int(headers["content-length"]) if headers.get("content-length", "").isdigit() else None
        self.reused = True
        self.keep_alive = (
            parts[0] == b"HTTP/1.1" and "close" not in headers.get("connection", "").lower()
            and (self._chunked or self._body_left is not None)
        )  # fmt: skip
        return int(parts[1]), headers

    def read_body(self) -> bytes:
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
                    while True:  # trailers, up to the empty line that ends the answer
                        trailer = self.read_line()
                        if not trailer:
                            if trailer is None:
                                self.keep_alive = False
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
            self.keep_alive = False
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
        self.closed = True
