"""More than one model server, for real: two llama-servers (tests.support.llama_server, the default
model) as a list in `modelServer` and behind Debian's nginx (tests.support.balancer, installed by
scripts/load-balancer.sh from `make install-test`). Documents spread over both; each suggestion
is the one server's alone would be; a killed server's documents go to the other with nothing of
it carried over and come back when it returns; a server running another model is refused, in
the list and behind the balancer. The logic with fakes: test_multi.py.

"The same suggestion" is bitwise here, so the servers decode in ubatches of 3 rows (UBATCH): rows
of up to 3 are computed one by one, exactly as single decodes (docs/first-contact.md), so a row
never depends on how the server batched it. With the default 64 it does: a prompt decoded after
another document's BOS, or beside another slot's last token, takes a matrix path whose rounding
differs, and d.txt's " Monday," has a near-tie (" May" -2.293, " April" -2.339 decoded whole; the
other way round token by token) that then followed which server a document had hashed to."""

from __future__ import annotations

import time

import pytest

from engine import CompletionRequest, Engine, EngineConfig, ModelServerError
from engine.remote.servers import ServerSet

pytestmark = pytest.mark.model

UBATCH = 3  # see the module docstring: rows that do not depend on the batch they were in
SLOW = 120.0  # the request budget on a loaded 2-core machine (tests claim no speed)
CASES = [  # (document, prompt, required): the seeds' sentences, each its own document
    ("file:///a.txt", "Thanks for sending over the draft", " yest"),
    ("file:///b.py", "import", " num"),
    ("file:///c.txt", "The model's", " behavi"),
    ("file:///d.txt", "Please review the attached proposal before the meeting on", " Mon"),
    ("file:///e.txt", "The weather today is", " sun"),
    ("file:///f.txt", "She opened the door and", " wal"),
]


def _nginx():
    from tests.support.balancer import install_nginx

    install_nginx()  # the project's script (make install-test runs it); a failed install fails the test


@pytest.fixture(scope="module")
def servers():
    from tests.fixtures import start_llama_server

    started = [start_llama_server(slots=2, ubatch=UBATCH, extra_args=("--cache-ram", "0")) for _ in range(2)]
    yield started
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def alone(servers):
    """The answers of the first server alone: what every server of the set must give too."""
    engine = Engine.load(EngineConfig(model_server=servers[0].url, model_server_timeout_s=SLOW))
    try:
        yield {doc: engine.complete(CompletionRequest(p, r, max_tokens=6, document=doc)).text for doc, p, r in CASES}
    finally:
        engine.close()


def _request(doc: str) -> CompletionRequest:
    _, prompt, required = next(c for c in CASES if c[0] == doc)
    return CompletionRequest(prompt, required, max_tokens=6, document=doc)


def _wait(check, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_list_spreads_documents_fails_over_and_comes_back_with_the_same_suggestions(servers, alone):
    engine = Engine.load(EngineConfig(model_server=f"{servers[0].url}, {servers[1].url}", model_server_timeout_s=SLOW))
    kv = engine.kv
    assert isinstance(kv, ServerSet)
    victim = None
    try:
        where = {}
        for doc, _, _ in CASES:
            completion = engine.complete(_request(doc))
            assert completion.text == alone[doc] and completion.stats.fallback is None
            where[doc] = completion.stats.server
        spread = {engine.complete(CompletionRequest("import", " num", max_tokens=3, document=f"file:///{i}.py")).stats.server
                  for i in range(20)}  # fmt: skip
        assert spread == {servers[0].url, servers[1].url}  # both used
        # a server dies: its documents go to the other, at once, with the same suggestions
        victim = next(i for i, s in enumerate(servers) if s.url in where.values())
        other = servers[1 - victim]
        moved = [doc for doc, url in where.items() if url == servers[victim].url]
        servers[victim].kill()
        kv.forget()  # as after other documents took the slots: the next call must ask a server
        for doc in moved:
            completion = engine.complete(_request(doc))
            assert completion.stats.server == other.url and completion.text == alone[doc]
        assert kv.failovers == 1 and kv.down() == (victim,)
        # back: once it passes its probe, its documents return to it
        servers[victim].start()
        _wait(lambda: kv.down() == ())
        for doc in moved:
            completion = engine.complete(_request(doc))
            assert completion.stats.server == servers[victim].url and completion.text == alone[doc]
        assert kv.returns == 1
    finally:
        if victim is not None:
            servers[victim].start()
        engine.close()


def test_a_list_with_a_server_running_another_model_is_refused(servers, tiny_models):
    from tests.fixtures import start_llama_server

    other = start_llama_server(slots=1, model=tiny_models["plain"])
    try:
        with pytest.raises(ModelServerError) as caught:
            Engine.load(EngineConfig(model_server=f"{servers[0].url}, {other.url}", model_server_timeout_s=SLOW))
        assert caught.value.kind == "model" and other.url in str(caught.value)
    finally:
        other.stop()


def test_behind_nginx_documents_stick_to_one_server_and_a_move_is_checked_and_forgotten(servers, alone):
    _nginx()
    from tests.support.balancer import Balancer

    with Balancer([f"127.0.0.1:{s.port}" for s in servers], fail_timeout_s=2) as balancer:
        engine = Engine.load(EngineConfig(model_server=balancer.url, model_server_timeout_s=SLOW))
        try:
            where = {}
            for doc, _, _ in CASES:
                completion = engine.complete(_request(doc))
                assert completion.text == alone[doc]
                where[doc] = completion.stats.server
            ports = {f"127.0.0.1:{s.port}" for s in servers}
            spread = {engine.complete(CompletionRequest("import", " num", max_tokens=3, document=f"file:///{i}.py")).stats.server
                      for i in range(20)}  # fmt: skip
            assert spread == ports  # the consistent hash uses both
            again = {doc: engine.complete(_request(doc)).stats.server for doc, _, _ in CASES}
            assert again == where  # and kept each document on its own
            victim = next(i for i, s in enumerate(servers) if f"127.0.0.1:{s.port}" in where.values())
            home = f"127.0.0.1:{servers[victim].port}"
            moved = [doc for doc, up in where.items() if up == home]
            servers[victim].kill()
            engine.kv.forget()
            changes = engine.kv.upstream_changes
            for doc in moved:
                completion = engine.complete(_request(doc))  # nginx sends it on; the engine checks and forgets
                assert completion.stats.server != home and completion.text == alone[doc]
            assert engine.kv.upstream_changes > changes
            servers[victim].start()

            # past nginx's fail_timeout it tries the server again, and once that works, sends it all its documents
            def home_again() -> bool:
                engine.kv.forget()  # remembered rows would answer without asking anyone
                return engine.complete(_request(moved[0])).stats.server == home

            _wait(home_again, 30)
            engine.kv.forget()
            back = {doc: engine.complete(_request(doc)) for doc in moved}
            assert all(c.stats.server == home and c.text == alone[d] for d, c in back.items())
        except BaseException:
            print("nginx:", balancer.errors()[-4000:], *balancer.access_log()[-40:], sep="\n")
            raise
        finally:
            servers[victim].start() if "victim" in locals() else None
            engine.close()
        assert any("doc=" in line for line in balancer.access_log())


def test_behind_nginx_a_server_running_another_model_is_refused_when_a_document_reaches_it(servers, tiny_models):
    _nginx()
    from tests.fixtures import start_llama_server
    from tests.support.balancer import Balancer

    other = start_llama_server(slots=1, model=tiny_models["plain"])
    try:
        with Balancer([f"127.0.0.1:{servers[0].port}", f"127.0.0.1:{other.port}"]) as balancer:
            try:
                engine = Engine.load(EngineConfig(model_server=balancer.url, model_server_timeout_s=SLOW))
            except ModelServerError as error:  # first contact reached the other one: refused there
                assert error.kind == "model"
                return
            try:
                kinds = set()
                for i in range(20):  # some of 20 documents hash to the other server
                    try:
                        completion = engine.complete(
                            CompletionRequest("import", " num", max_tokens=3, document=f"file:///{i}.py")
                        )
                        assert completion.stats.server == f"127.0.0.1:{servers[0].port}"
                    except ModelServerError as error:
                        kinds.add(error.kind)
                assert kinds == {"model"}  # those are refused, with the cause named
            finally:
                engine.close()
    finally:
        other.stop()
