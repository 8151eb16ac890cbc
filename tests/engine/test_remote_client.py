"""engine.remote.http against small fake HTTP servers on 127.0.0.1: every fault becomes a
ModelServerError of the right kind within the time budget, the key goes as a Bearer header and
never into a message, only a server that is down is followed by a fast-failing back-off window
(a slow one is asked again), connections are kept alive, and an answer can be waited for again
after a timeout.

Fakes only for the fault logic: the same client against a real llama-server is in
test_remote.py."""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest

from engine.remote.http import ModelServerClient, StreamCancelled, parse_url
from engine.types import ModelServerError
from tests.engine.fake_llama_server import LoopbackHttpServer

KEY = "s3cret-key-123"


class FakeServer(LoopbackHttpServer):
    """Answers each connection with `reply(request_bytes) -> bytes` (None: hang up at once),
    after `delay_s`. Records the requests."""

    def __init__(self, reply, delay_s: float = 0.0, hold_s: float = 0.05) -> None:
        self.reply, self.delay_s, self.hold_s = reply, delay_s, hold_s
        self.requests: list[bytes] = []
        self.finished = threading.Event()  # a connection was answered and held to its end
        super().__init__(backlog=8)

    def handle(self, conn: socket.socket, head: bytes, body: bytes) -> None:
        self.requests.append(head + b"\r\n\r\n" + body)
        time.sleep(self.delay_s)
        answer = self.reply(head + b"\r\n\r\n" + body)
        if answer is None:
            return
        try:
            conn.sendall(answer)
            time.sleep(self.hold_s)
        except OSError:
            pass
        self.finished.set()


def http(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        content_type.encode(),
        len(body),
        body,
    )


def sse(events: list[bytes], end: bool = True) -> bytes:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunks
        + (b"0\r\n\r\n" if end else b"")
    )


@pytest.fixture
def serve():
    servers: list[FakeServer] = []

    def start(reply, delay_s: float = 0.0, hold_s: float = 0.05) -> FakeServer:
        servers.append(FakeServer(reply, delay_s, hold_s))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def kind_of(call) -> ModelServerError:
    with pytest.raises(ModelServerError) as caught:
        call()
    return caught.value


def test_the_key_is_sent_as_a_bearer_header_and_never_shown(serve):
    server = serve(lambda _: http(200, b'{"status": "ok"}'))
    client = ModelServerClient(server.url, KEY, 2.0)
    assert client.get_json("/health") == {"status": "ok"}
    assert b"Authorization: Bearer " + KEY.encode() in server.requests[0]
    assert KEY not in repr(client)
    refused = serve(
        lambda _: http(401, b'{"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}')
    )
    error = kind_of(lambda: ModelServerClient(refused.url, KEY, 2.0).get_json("/props"))
    assert error.kind == "auth" and KEY not in str(error) and "modelServerApiKey" in str(error)


@pytest.mark.parametrize(
    "answer",
    [
        b"this is not http\r\n\r\n",
        http(200, b"{not json"),
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"status"',  # truncated
        http(500, b'{"error": {"message": "the prompt: Thanks for sending", "type": "server_error"}}'),
    ],
    ids=["not-http", "not-json", "truncated", "server-error"],
)
def test_garbage_and_truncated_answers_are_protocol_errors(serve, answer):
    server = serve(lambda _: answer)
    error = kind_of(lambda: ModelServerClient(server.url, None, 2.0).get_json("/props"))
    assert error.kind == "protocol"
    assert "Thanks for sending" not in str(error)  # a server's message can quote the request


def test_garbage_in_a_stream_is_a_protocol_error(serve):
    server = serve(lambda _: sse([b'data: {"content": "a"}\n\n', b"data: {oops\n\n"]))
    stream = ModelServerClient(server.url, None, 2.0).stream("/completion", {"prompt": [1]})
    assert stream.next_event() == {"content": "a"}
    assert kind_of(stream.next_event).kind == "protocol"
    cut = serve(lambda _: sse([b'data: {"content": "a"}\n\ndata: {"con'], end=False))
    stream = ModelServerClient(cut.url, None, 2.0).stream("/completion", {"prompt": [1]})
    assert stream.next_event() == {"content": "a"}
    assert kind_of(stream.next_event).kind in ("protocol", "unreachable")


def test_a_slow_server_times_out_within_the_budget(serve):
    """The server answers only after 30 s: a client that kept to its 0.3 s budget gave up first
    (one that waited gets the answer, and no error)."""
    server = serve(lambda _: http(200, b"{}"), delay_s=30.0, hold_s=0.0)
    client = ModelServerClient(server.url, None, 0.3)
    error = kind_of(lambda: client.get_json("/health"))
    assert error.kind == "timeout" and not server.finished.is_set()
    assert "modelServerTimeoutMs" in str(error)


def test_a_timeout_starts_no_back_off_the_next_call_asks_the_server(serve):
    server = serve(lambda _: http(200, b'{"status": "ok"}'), delay_s=0.6)
    client = ModelServerClient(server.url, None, 0.2)
    assert kind_of(lambda: client.get_json("/health")).kind == "timeout"
    assert kind_of(lambda: client.get_json("/health")).kind == "timeout"
    assert len(server.requests) == 2  # the second call asked the server: no fast "timeout"
    server.delay_s = 0.0
    assert client.get_json("/health") == {"status": "ok"}


def test_a_pending_answer_outlives_a_timeout_and_a_cancel(serve):
    server = serve(lambda _: http(200, b'{"done": 1}'), delay_s=0.8)
    client = ModelServerClient(server.url, None, 0.2)
    pending = client.start("/completion", {"prompt": [1]})
    assert kind_of(lambda: pending.wait(time.monotonic() + 0.2)).kind == "timeout"
    with pytest.raises(StreamCancelled):
        pending.wait(time.monotonic() + 5, cancel=lambda: True)
    assert not pending.closed
    assert pending.wait(time.monotonic() + 5) == {"done": 1}
    assert len(server.requests) == 1  # one request, waited for three times


class KeepAliveServer(LoopbackHttpServer):
    """Answers every request on a connection with `{"n": i}`, keeping the connection open."""

    def __init__(self) -> None:
        self.connections = 0
        self.answered = 0
        super().__init__()

    def _one(self, conn: socket.socket) -> None:
        self.connections += 1
        data = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1)) if b"ength:" in head else 0
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                self.answered += 1
                conn.sendall(http(200, b'{"n": %d}' % self.answered))


def test_connections_are_kept_alive_and_a_closed_one_is_replaced(serve):
    keep = KeepAliveServer()
    client = ModelServerClient(keep.url, None, 2.0)
    for i in range(1, 6):
        assert client.post_json("/completion", {"prompt": [i]}) == {"n": i}
    assert keep.connections == 1 and client.traffic.connections == 1
    keep.close()
    # A server that closes after each answer: the kept connection is found closed and replaced.
    once = serve(lambda _: http(200, b'{"status": "ok"}'), hold_s=0.0)
    client = ModelServerClient(once.url, None, 2.0)
    for _ in range(4):
        assert client.get_json("/health") == {"status": "ok"}
    assert len(once.requests) == 4


def test_nothing_listening_is_unreachable_and_then_fails_fast_until_the_back_off_ends():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # a port with nothing listening
    client = ModelServerClient(f"http://127.0.0.1:{port}", None, 1.0)
    first = kind_of(lambda: client.get_json("/health"))
    assert first.kind == "unreachable"
    assert kind_of(lambda: client.get_json("/health")) is first  # within the back-off window
    assert client.traffic.round_trips == 0
    time.sleep(0.3)
    assert kind_of(lambda: client.get_json("/health")).kind == "unreachable"  # tried again


def test_a_cancel_closes_the_stream_at_once(serve):
    """The server holds the stream open for 30 s after its first event (within the client's 60 s
    budget): the cancel, not the stream's end, is what ends the wait."""
    server = serve(lambda _: sse([b'data: {"content": "a"}\n\n'], end=False), hold_s=30.0)
    cancel = threading.Event()
    stream = ModelServerClient(server.url, None, 60.0).stream("/completion", {"prompt": [1]}, cancel=cancel.is_set)
    assert stream.next_event() == {"content": "a"}
    threading.Timer(0.1, cancel.set).start()
    with pytest.raises(StreamCancelled):
        stream.next_event()
    assert stream.closed and not server.finished.is_set()


@pytest.mark.parametrize(
    "url,kind", [("ftp://x", "url"), ("http://", "url"), ("https://", "url"), ("http://h:99999", "url")]
)
def test_bad_urls_are_refused_with_a_message(url, kind):
    error = kind_of(lambda: parse_url(url))
    assert error.kind == kind, error
    assert "Set `modelServer` to a URL" in str(error)


def test_traffic_is_counted(serve):
    server = serve(lambda _: http(200, b'{"status": "ok"}'))
    client = ModelServerClient(server.url, None, 2.0)
    client.get_json("/health")
    assert client.traffic.round_trips == 1
    assert client.traffic.bytes_sent == len(server.requests[0])
    assert client.traffic.bytes_received == len(http(200, b'{"status": "ok"}'))
