"""A small fault-injecting HTTP proxy on 127.0.0.1, in front of a real llama-server (for the fault
tests and the `remote` bench part's fault probes).

In `"pass"` mode it forwards each request and streams the answer back chunk by chunk (server-sent
events included, re-chunked, keep-alive kept). For the paths in `paths` (default: the generation
endpoints) the other modes break the answer the way a sick server or network would:

- `"delay"`: wait `delay_s` before forwarding (a server slower than the time budget);
- `"garbage"`: answer 200 with bytes that are neither JSON nor server-sent events;
- `"truncate"`: forward, but cut the body after `keep_bytes` and close the connection;
- `"reset"`: close the connection without answering;
- `"cold"`: a server that is slow on prompts it has not seen: a request whose `prompt` (token ids)
  shares less than half with every prompt already forwarded waits `delay_s` first (the time a
  slow machine needs for a cold prompt decode), and is dropped unforwarded if the client hangs up
  meanwhile (its work is lost, as a cancelled decode's is). Once forwarded, the prompt is warm.

It counts what a client did: TCP connections accepted (`connections`), and every request with its
path and when it came and was answered (`requests`: [path, start, end], monotonic; end None while
in flight), so a test can check that no answer came without a request.

Only the proxy is fake; the model and the server behind it are real.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

GENERATION_PATHS = ("/completion", "/completions", "/infill")
GARBAGE = b"\x00\xffnot json {{{ data: [[[\r\n\r\n\x1b"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"}


class FaultProxy:
    def __init__(self, upstream: str, mode: str = "pass", paths: tuple[str, ...] = GENERATION_PATHS) -> None:
        target = urlsplit(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.mode, self.paths = mode, paths
        self.delay_s, self.keep_bytes = 0.0, 200
        self.faults = 0  # requests answered with a fault
        self.connections = 0  # TCP connections accepted
        self.requests: list[list] = []  # [path, start, end] per request
        self.cold = 0  # requests held back as cold prompts ("cold" mode)
        self._warm: list[list[int]] = []
        self._count_lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def setup(self) -> None:
                with proxy._count_lock:
                    proxy.connections += 1
                super().setup()

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one request ------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        path = urlsplit(handler.path).path
        record = [path, time.monotonic(), None]
        with self._count_lock:
            self.requests.append(record)
        try:
            self._answer(handler, path, body)
        finally:
            record[2] = time.monotonic()

    def _is_cold(self, body: bytes | None) -> tuple[bool, list[int] | None]:
        try:
            prompt = json.loads(body or b"{}").get("prompt")
        except (ValueError, AttributeError):
            return False, None
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            prompt = prompt[0]  # several prompts in one request (engine.remote_batch): the document's
        if not isinstance(prompt, list) or not prompt:
            return False, None
        for seen in self._warm:
            common = next((i for i, (a, b) in enumerate(zip(seen, prompt)) if a != b), min(len(seen), len(prompt)))
            if common >= len(prompt) / 2:
                return False, prompt
        return True, prompt

    def _hung_up(self, handler: BaseHTTPRequestHandler) -> bool:
        """The client closed its end (readable with nothing to read)."""
        try:
            ready, _, _ = select.select([handler.connection], [], [], 0)
            return bool(ready) and handler.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _answer(self, handler: BaseHTTPRequestHandler, path: str, body: bytes | None) -> None:
        mode = self.mode if path in self.paths else "pass"
        if mode == "cold":
            cold, prompt = self._is_cold(body)
            if cold:
                self.cold += 1
                until = time.monotonic() + self.delay_s
                while time.monotonic() < until:
                    if self._hung_up(handler):
                        handler.close_connection = True
                        return
                    time.sleep(0.01)
            if prompt is not None:
                self._warm.append(prompt)
            mode = "pass"
        if mode != "pass":
            self.faults += 1
        if mode == "reset":
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if mode == "garbage":
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Content-Length", str(len(GARBAGE)))
            handler.end_headers()
            handler.wfile.write(GARBAGE)
            return
        if mode == "delay":
            time.sleep(self.delay_s)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
        upstream = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            answer = upstream.getresponse()
        except OSError:
            handler.send_error(502)
            return
        handler.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP:
                handler.send_header(key, value)
        handler.send_header("Transfer-Encoding", "chunked")
        if mode == "truncate":
            handler.send_header("Connection", "close")
        handler.end_headers()
        sent = 0
        try:
            while chunk := answer.read1(65536):
                if mode == "truncate" and sent + len(chunk) >= self.keep_bytes:
                    chunk = chunk[: max(0, self.keep_bytes - sent)]
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunk else b"")
                    handler.wfile.flush()
                    handler.close_connection = True
                    handler.connection.shutdown(socket.SHUT_RDWR)
                    return
                sent += len(chunk)
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client closed the connection (a cancelled stream): close upstream too
            handler.close_connection = True
        finally:
            upstream.close()
