"""Several model servers (engine.remote.servers) over fake llama-servers on hand-built distributions (no
model): documents spread by their key, a call on a server that is down is made again on the next
one with nothing of the first server carried over, a server that passes its probe again gets its
documents back, and a balancer that moves a document (X-Cpc-Upstream) makes the engine check the
new server and forget the old one. The real servers (and nginx) are in test_multi_server.py."""

from __future__ import annotations

import threading
import time

import pytest

from engine.backend import Cancelled
from engine.core.sequence import Sequence
from engine.remote import servers as multi
from engine.remote.http import AFFINITY_HEADER, ModelServerClient, UpstreamChanged
from engine.remote.rows import RemoteRows
from engine.remote.servers import ServerSet, affinity_key, rendezvous
from engine.types import ModelServerError, SamplingConfig, server_urls
from tests.engine.fake_llama_server import FakeLlamaServer
from tests.engine.test_remote_search import AB, PROMPT, TABLE, VOCAB, A, B, C, X

# How long a test waits for the background probe to see a server that came back: the wait ends as
# soon as it does (under a second here); the bound only has to outlast a loaded machine's threads.
PROBE_WAIT_S = 60.0


def test_model_server_takes_one_url_or_several():
    assert server_urls("http://a:1") == ("http://a:1",)
    assert server_urls(" http://a:1, http://b:2\nhttp://c:3 ") == ("http://a:1", "http://b:2", "http://c:3")
    assert server_urls("") == () and server_urls(None) == ()


def test_documents_spread_over_the_servers_and_each_keeps_its_own():
    urls = ("http://10.0.0.1:8080", "http://10.0.0.2:8080")
    keys = [affinity_key(f"file:///src/m{i}.py") for i in range(200)]
    first = [rendezvous(k, urls)[0] for k in keys]
    assert 70 <= first.count(0) <= 130  # about half each
    assert first == [rendezvous(k, urls)[0] for k in keys]  # stable
    # a third server takes documents only from the others, and only about a third
    three = urls + ("http://10.0.0.3:8080",)
    moved = [i for i, k in enumerate(keys) if rendezvous(k, three)[0] != first[i]]
    assert all(rendezvous(keys[i], three)[0] == 2 for i in moved) and 40 <= len(moved) <= 95


def test_the_key_names_nothing():
    key = affinity_key("file:///home/me/secret-plans.md")
    assert "secret" not in key and len(key) == 24 and key == affinity_key("file:///home/me/secret-plans.md")


def _ok(client):
    return (2048, 1, {})


def _set(servers, check=_ok):
    rows = [RemoteRows(ModelServerClient(s.url, None, 5.0), VOCAB, 2048, 1, None, n_probs=1) for s in servers]
    return ServerSet(rows, check, lambda url: ModelServerClient(url, None, 5.0))


def _complete(kv, key: str, required: bytes = b"ab") -> list[int]:
    """What engine.Engine.complete does with a backend: route, begin, the call, end, and once
    more after `recover` says so."""
    kv.route(key)
    for attempt in (0, 1):
        kv.begin(None, max_tokens=4)
        try:
            seq = Sequence(kv, VOCAB, SamplingConfig())
            assert seq.decode_prompt(PROMPT, required, True, 8)
            out = []
            while len(out) < 4:
                result = seq.sample_next()
                if result.is_eos:
                    break
                out.append(result.token)
            return out
        except ModelServerError as error:
            if attempt or not kv.recover(error):
                raise
        finally:
            kv.end()
    raise AssertionError("unreachable")


def _key_for(servers: ServerSet, index: int) -> str:
    return next(k for k in (affinity_key(str(i)) for i in range(100)) if rendezvous(k, servers.urls)[0] == index)


@pytest.fixture
def two():
    servers = [FakeLlamaServer(VOCAB, TABLE), FakeLlamaServer(VOCAB, TABLE)]
    yield servers
    for s in servers:
        s.close()


def test_each_document_goes_to_its_own_server_with_its_key_on_every_request(two):
    kv = _set(two)
    try:
        for index in (0, 1):
            key = _key_for(kv, index)
            before = [len(s.bodies) for s in two]
            assert _complete(kv, key) == [AB, C]
            assert len(two[index].bodies) > before[index] and len(two[1 - index].bodies) == before[1 - index]
            assert all(f"{AFFINITY_HEADER}: {key}".encode() in h for h in two[index].headers[-2:])
    finally:
        kv.close()


def test_a_down_server_s_document_goes_to_the_next_at_once_and_comes_back(two, monkeypatch):
    monkeypatch.setattr(multi, "PROBE_FIRST_S", 0.05)
    kv = _set(two)
    key = _key_for(kv, 0)
    try:
        assert _complete(kv, key) == [AB, C]
        assert kv.current == 0 and kv.node(PROMPT) is not None
        port = two[0].port
        two[0].close()  # nothing listens there now: refused
        assert _complete(kv, key) == [AB, C] and kv.current == 0  # remembered rows need no server
        kv.forget()  # so the next call must ask (as a new prompt would)
        sent = len(two[1].bodies)
        assert _complete(kv, key) == [AB, C]  # the same call, made again on the other server
        assert kv.current == 1 and kv.failovers == 1 and kv.down() == (0,)
        # the other server knew nothing of this document: its first request named no slot of the first
        assert two[1].bodies[sent]["id_slot"] == -1 and two[1].bodies[sent]["cache_prompt"] is False
        assert _complete(kv, key) == [AB, C] and kv.current == 1  # stays while the first is down
        two[0] = FakeLlamaServer(VOCAB, TABLE, port=port)  # back, on the same port
        deadline = time.monotonic() + PROBE_WAIT_S
        while kv.down() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert kv.down() == () and kv.returns == 1
        assert _complete(kv, key) == [AB, C] and kv.current == 0
        # what was known of it before it went down was forgotten: decoded again from position 0
        assert two[0].bodies[0]["id_slot"] == -1 and two[0].bodies[0]["cache_prompt"] is False
    finally:
        kv.close()


def test_all_servers_down_is_an_error_that_says_unreachable(two):
    kv = _set(two)
    for s in two:
        s.close()
    try:
        with pytest.raises(ModelServerError) as raised:
            _complete(kv, _key_for(kv, 0))
        assert raised.value.kind == "unreachable"
    finally:
        kv.close()


def test_a_server_that_comes_back_with_another_model_stays_out(two, monkeypatch):
    monkeypatch.setattr(multi, "PROBE_FIRST_S", 0.05)
    ready = threading.Event()

    def check(client):
        raise ModelServerError("model", client.url, "the server's model tokenizes text differently", "fix it")

    kv = _set(two, check)
    key = _key_for(kv, 0)
    try:
        port = two[0].port
        two[0].close()
        assert _complete(kv, key) == [AB, C] and kv.current == 1
        two[0] = FakeLlamaServer(VOCAB, TABLE, port=port)
        deadline = time.monotonic() + PROBE_WAIT_S
        while not kv.refused() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "tokenizes text differently" in kv.refused()[two[0].url]
        assert kv.down() == (0,) and _complete(kv, key) == [AB, C] and kv.current == 1
        assert not two[0].bodies  # never asked for a completion
    finally:
        ready.set()
        kv.close()


def test_a_balancer_that_moves_the_document_makes_the_new_server_checked_and_the_old_forgotten():
    server = FakeLlamaServer(VOCAB, TABLE)
    checked = []
    rows = RemoteRows(ModelServerClient(server.url, None, 5.0), VOCAB, 2048, 1, None, n_probs=1)
    rows.check = lambda client, target: checked.append(client.upstream)
    try:
        server.upstream = "127.0.0.1:9001"
        assert _complete(rows, "k", b"a")[:3] == [A, B, X] and not checked  # "ab" then needs a request
        server.upstream = "127.0.0.1:9002"  # the balancer now answers from another server
        rows.route("k")
        rows.begin(None, max_tokens=4)
        with pytest.raises(UpstreamChanged):
            Sequence(rows, VOCAB, SamplingConfig()).decode_prompt(PROMPT, b"ab", True, 8)
        rows.end()
        assert rows.recover(UpstreamChanged(server.url, "127.0.0.1:9001", "127.0.0.1:9002"))
        assert checked == ["127.0.0.1:9002"] and rows.node(PROMPT) is None and rows.upstream_changes == 1
        sent = len(server.bodies)
        assert _complete(rows, "k") == [AB, C]
        assert server.bodies[sent]["id_slot"] == -1  # no slot of the other server
    finally:
        rows.close()
        server.close()


def test_a_cancel_is_not_a_failover(two):
    kv = _set(two)
    try:
        kv.route(_key_for(kv, 0))
        cancel = threading.Event()
        cancel.set()
        kv.begin(cancel, max_tokens=4)
        try:
            done = Sequence(kv, VOCAB, SamplingConfig(), cancel).decode_prompt(PROMPT, b"ab", True, 8)
        except Cancelled:
            done = False
        kv.end()
        assert not done
        assert kv.failovers == 0 and kv.down() == ()
    finally:
        kv.close()


def test_behind_a_balancer_each_server_gets_its_own_rows_and_a_moved_document_goes_with_it():
    from engine.remote.servers import BalancedSet

    server = FakeLlamaServer(VOCAB, TABLE)
    route = {"k1": "10.0.0.1:8080", "k2": "10.0.0.2:8080"}

    def upstream(head: bytes) -> str:
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith(AFFINITY_HEADER.lower() + ":"):
                return route[line.split(":", 1)[1].strip()]
        return "10.0.0.1:8080"  # no key: the first server

    server.upstream = upstream
    checked: list[str] = []

    def make_rows() -> RemoteRows:
        return RemoteRows(ModelServerClient(server.url, None, 5.0), VOCAB, 2048, 1, None, n_probs=1)

    first = make_rows()
    first.client.upstream = "10.0.0.1:8080"  # what first contact saw
    kv = BalancedSet(first, make_rows, lambda client, rows: checked.append(client.upstream))
    try:
        assert _complete(kv, "k1") == [AB, C] and kv.answered == "10.0.0.1:8080"
        assert _complete(kv, "k2") == [AB, C] and kv.answered == "10.0.0.2:8080"
        assert kv.upstreams == ["10.0.0.1:8080", "10.0.0.2:8080"] and checked == ["10.0.0.2:8080"]
        assert kv.servers[0].node(PROMPT) is not None and kv.servers[1].node(PROMPT) is not None
        route["k1"] = "10.0.0.2:8080"  # the first server went down: the balancer sends k1 on
        kv.servers[0].forget()  # (a prompt the rows do not know: the call must ask)
        sent = len(server.bodies)
        assert _complete(kv, "k1") == [AB, C] and kv.answered == "10.0.0.2:8080"
        assert kv.upstream_changes == 1 and checked == ["10.0.0.2:8080", "10.0.0.2:8080"]
        assert kv.servers[0].client.upstream == "10.0.0.1:8080"  # those rows still stand for the first
        # the retry named only the second server's slots (the fake's are all 0, learnt from it)
        assert all(b["id_slot"] in (-1, 0) for b in server.bodies[sent:])
    finally:
        kv.close()
        server.close()


def test_behind_debian_s_nginx_documents_stick_and_follow_a_failover(two, monkeypatch):
    """The balancer configuration docs/shared-server.md gives (tests/support/balancer.py), for real, in
    front of two fakes: the hash keeps each key on one server, X-Cpc-Upstream names it, and a
    server that stops listening sends its keys on, which the engine follows with that server's
    own rows."""
    from engine.remote.servers import BalancedSet
    from tests.support.balancer import Balancer, install_nginx

    install_nginx()  # the project's script (make install-test runs it); a failed install fails the test
    for s in two:
        s.connection_close = True  # the fakes serve one request per connection
    with Balancer([f"127.0.0.1:{s.port}" for s in two], fail_timeout_s=1) as balancer:

        def make_rows() -> RemoteRows:
            return RemoteRows(ModelServerClient(balancer.url, None, 5.0), VOCAB, 2048, 1, None, n_probs=1)

        first = make_rows()
        first.client.get_json("/health")  # first contact: learns the upstream of the key-less requests
        assert first.client.upstream in {f"127.0.0.1:{s.port}" for s in two}
        checked: list[str] = []
        kv = BalancedSet(first, make_rows, lambda client, rows: checked.append(client.upstream))
        try:
            keys = [affinity_key(str(i)) for i in range(12)]
            where = {}
            for key in keys:
                assert _complete(kv, key) == [AB, C]
                where[key] = kv.answered
            assert len(set(where.values())) == 2  # both servers have documents
            for key in keys:
                kv.route(key)
                assert kv.answered == where[key]  # and each keeps its own
            victim = next(s for s in two if f"127.0.0.1:{s.port}" == where[keys[0]])
            victim.close()
            moved = [k for k in keys if where[k] == where[keys[0]]]
            kv.forget()
            for key in moved:
                assert _complete(kv, key) == [AB, C] and kv.answered != where[key]
            assert kv.upstream_changes >= 1
        finally:
            kv.close()


class _DiesMidStream(FakeLlamaServer):
    """Sends the head of its first stream, then dies (stops listening, drops the connection):
    a server killed while it answers."""

    def handle(self, conn, head, body):
        if b"/completion" in head.split(b"\r\n", 1)[0] and b'"stream": true' in body.replace(
            b'"stream":true', b'"stream": true'
        ):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            self.close()
            return
        super().handle(conn, head, body)


def test_a_server_that_dies_while_it_answers_sends_the_keystroke_to_the_next_at_once(monkeypatch):
    monkeypatch.setattr(multi, "PROBE_FIRST_S", 60.0)  # no probe during the test
    servers = [_DiesMidStream(VOCAB, TABLE), FakeLlamaServer(VOCAB, TABLE)]
    kv = _set(servers)
    key = _key_for(kv, 0)
    try:
        assert _complete(kv, key) == [AB, C]  # the cut stream, then the same call on the other server
        assert kv.current == 1 and kv.failovers == 1 and kv.down() == (0,)
    finally:
        kv.close()
        for s in servers:
            s.close()
