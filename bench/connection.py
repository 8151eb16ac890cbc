"""Round trips to a llama-server on loopback, by client: is keep-alive worth it, is TLS, and is a
well-kept client (urllib3) faster than ours (engine.remote.http)?

    python -m bench.connection [--n 300] [--out bench/results/connection.json]

Each client asks the same small requests `--n` times one after another (GET /health, and POST
/tokenize of a short sentence: little work for the server, so the client and the connection are
what is measured), and the median and p90 of the round trip are kept. Clients: ours with kept-alive connections (as the engine uses
it), ours with a fresh connection per request (as it was before), urllib3's pool (keep-alive),
and ours over https:// through stunnel (tests.support.tls_proxy) with and without keep-alive.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from engine.remote.http import ModelServerClient
from tests.support.llama_server import start_llama_server

BODY = {"content": "Thanks for sending over the draft"}  # /tokenize: a POST with little server work


def _time(call, n: int) -> dict[str, float]:
    call()  # warm: the first request pays for the connection and the prompt
    ms = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        ms.append((time.perf_counter() - started) * 1000)
    ms.sort()
    return {"median_ms": round(statistics.median(ms), 3), "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3), "n": n}


def ours(url: str, fresh: bool, ca: Path | None = None):
    client = ModelServerClient(url, None, 10.0, ca)

    def get():
        client.get_json("/health")
        if fresh:
            client.close()

    def post():
        client.post_json("/tokenize", BODY)
        if fresh:
            client.close()

    return client, get, post


def pooled(url: str):
    import urllib3

    pool = urllib3.PoolManager(maxsize=2)

    def get():
        answer = pool.request("GET", url + "/health")
        assert answer.status == 200
        json.loads(answer.data)

    def post():
        answer = pool.request(
            "POST", url + "/tokenize", body=json.dumps(BODY), headers={"Content-Type": "application/json"}
        )
        assert answer.status == 200
        json.loads(answer.data)

    return pool, get, post


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connection", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "connection.json")
    args = parser.parse_args(argv)
    from tests.support.tls_proxy import Authority, TlsProxy

    rows = []
    with start_llama_server(slots=1, ctx=512) as server, tempfile.TemporaryDirectory() as folder:
        ca = Authority(Path(folder))
        with TlsProxy(server.url, ca.issue("bench"), Path(folder)) as tls:
            clients = [
                ("ours, kept alive", *ours(server.url, False)[1:]),
                ("ours, a connection per request", *ours(server.url, True)[1:]),
                ("urllib3 pool, kept alive", *pooled(server.url)[1:]),
                ("ours over https (stunnel), kept alive", *ours(tls.url, False, ca.cert)[1:]),
                ("ours over https (stunnel), a connection per request", *ours(tls.url, True, ca.cert)[1:]),
            ]
            for name, get, post in clients:
                rows.append({"client": name, "get_health": _time(get, args.n), "post_tokenize": _time(post, args.n)})
                print(
                    f"{name:55s} GET /health {rows[-1]['get_health']['median_ms']:7.3f} ms   POST /tokenize {rows[-1]['post_tokenize']['median_ms']:7.3f} ms (medians)",
                    flush=True,
                )
    args.out.write_text(json.dumps({"n": args.n, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
