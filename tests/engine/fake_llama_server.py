"""A stand-in for llama-server's /completion over a hand-built vocabulary, for unit tests of the
remote backend's search logic (no model). It follows the semantics engine.remote relies on, as
read in llama-server's source: greedy under the grammar (`<[id]>` terms, one string literal,
then `.*`) and logit_bias (bans, and raised tokens: the greedy pick reads the biased values), each event listing the sampled token's log-probability and the top
`n_probs` of the raw distribution. Several prompts in one request are answered one after another. The real server is tested in
test_remote.py."""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time

from engine.core.vocab import VocabIndex

UNLISTED = 1e-4  # probability of every token a table row does not name


class LoopbackHttpServer:
    """A bare HTTP/1.1 server on 127.0.0.1 for fakes: one thread per connection, each request
    read whole (head and Content-Length body) and handed to `handle`."""

    def __init__(self, backlog: int = 16, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        """Stop listening at once, as a dead process would (a plain close leaves a thread blocked
        in accept() holding the socket, which then takes one more connection)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def handle(self, conn: socket.socket, head: bytes, body: bytes) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            while found and len(body) < int(found.group(1)):
                body += conn.recv(65536)
            self.handle(conn, head, body)


class FakeLlamaServer(LoopbackHttpServer):
    """`table[path] = {token: prob}` is the distribution after prompt + path (path: the tokens
    after the prompt's first `prompt_len`)."""

    def __init__(
        self, vocab: VocabIndex, table: dict[tuple[int, ...], dict[int, float]], prompt_len: int = 1, port: int = 0
    ) -> None:
        self.vocab, self.table, self.prompt_len = vocab, table, prompt_len
        self.bodies: list[dict] = []
        self.headers: list[bytes] = []  # each request's head
        self.prefill_delay_s = 0.0  # before answering a prefill (a slow prompt decode)
        self.assign_slots = False  # a prefill naming no slot gets the next one (else slot 0), a named one its own
        self.cache_n = (
            None  # a prefill's reused prompt tokens to report (`timings.cache_n`): another user took the slot
        )
        self._next_slot = 0
        # sent as X-Cpc-Upstream (a balancer's answering server): a name, or a function of the
        # request's head (a balancer's hash on X-Cpc-Document)
        self.upstream = None
        self.connection_close = False  # say so (each connection serves one request): for a proxy's keep-alive
        super().__init__(port=port)

    def logprobs(self, path: tuple[int, ...]) -> list[float]:
        row = [UNLISTED] * self.vocab.size
        for token, p in self.table.get(path, {}).items():
            row[token] = p
        total = sum(row)
        return [math.log(p / total) for p in row]

    def handle(self, conn: socket.socket, head: bytes, body: bytes) -> None:
        path = head.split(b" ")[1].decode()
        self.headers.append(head)
        self._head = head
        if path == "/completion":
            request = json.loads(body)
            self.bodies.append(request)
            events = self._complete(request)
            if not request.get("stream"):
                slot = 0
                if self.assign_slots:
                    slot = request.get("id_slot", -1)
                    if slot < 0:
                        slot, self._next_slot = self._next_slot, self._next_slot + 1
                time.sleep(self.prefill_delay_s)
                timings = {"prompt_n": len(request["prompt"])}
                if self.cache_n is not None:
                    timings |= {"cache_n": self.cache_n, "prompt_n": len(request["prompt"]) - self.cache_n}
                self._send(conn, b"200 OK", json.dumps({"id_slot": slot, "timings": timings}).encode())
                return
            extra = self._upstream_header()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n%s\r\n" % extra
            )
            try:
                for event in events:
                    chunk = b"data: " + json.dumps(event).encode() + b"\n\n"
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                pass
        else:
            self._send(conn, b"200 OK", b'{"status": "ok"}')

    def _upstream_header(self) -> bytes:
        name = self.upstream(self._head) if callable(self.upstream) else self.upstream
        close = b"Connection: close\r\n" if self.connection_close else b""
        return close + (b"X-Cpc-Upstream: %s\r\n" % name.encode() if name else b"")

    def _send(self, conn: socket.socket, status: bytes, body: bytes) -> None:
        extra = self._upstream_header()
        conn.sendall(
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
            % (status, extra, len(body), body)
        )

    def _complete(self, request: dict):
        """The events of one request; several prompts (a list of token lists) run one after
        another, as llama-server runs them on one slot, each event naming its prompt (`index`)."""
        prompts = request["prompt"]
        if not (prompts and isinstance(prompts[0], list)):
            yield from self._single(request)
            return
        for index, prompt in enumerate(prompts):
            for event in self._single({**request, "prompt": prompt}):
                yield {**event, "index": index}

    def _single(self, request: dict):
        grammar = request.get("grammar", "")
        forced = [int(t) for t in re.findall(r"<\[(\d+)\]>", grammar)]
        literal_match = re.search(r'"((?:[^"\\]|\\.)*)"', grammar)
        literal = b""
        if literal_match:
            text = re.sub(r"\\[uU]([0-9A-Fa-f]+)", lambda m: chr(int(m.group(1), 16)), literal_match.group(1))
            literal = text.encode()
        bias = {int(t): -math.inf if b is False else float(b) for t, b in request.get("logit_bias", [])}
        path = tuple(request["prompt"][self.prompt_len :])
        n_probs = int(request.get("n_probs", 0))
        for step in range(int(request["n_predict"])):
            lps = self.logprobs(path)
            if forced:
                token = forced.pop(0)
            else:
                allowed = [t for t in range(self.vocab.size) if bias.get(t) != -math.inf and self._fits(t, literal)]
                token = max(allowed, key=lambda t: lps[t] + bias.get(t, 0.0))
                piece = self.vocab.pieces[token]
                literal = literal[len(piece) :] if literal.startswith(piece) else b""
            top = sorted(range(self.vocab.size), key=lambda t: -lps[t])[:n_probs]
            yield {
                "content": "", "tokens": [token], "stop": False, "tokens_predicted": step + 1,
                "timings": {"prompt_n": len(request["prompt"]) if step == 0 else 0},
                "completion_probabilities": [{
                    "id": token, "logprob": lps[token], "top_logprobs": [{"id": t, "logprob": lps[t]} for t in top],
                }],
            }  # fmt: skip
            path = path + (token,)
            if self.vocab.eog[token]:
                break
        yield {"content": "", "stop": True, "id_slot": 0}

    def _fits(self, token: int, literal: bytes) -> bool:
        piece = self.vocab.pieces[token]
        if not literal:
            return True
        if not piece:
            return False
        return literal.startswith(piece) or piece.startswith(literal)
