"""`python -m bench.tail` (part of `python -m bench --only team`): the tail of warm keystrokes, remote
against in-process through the language server, and behind a proxy that holds each answer.

Issue 22, part 4. The keystrokes are bench.remote_vs_local's (`keystrokes`: a word typed letter by letter
into fresh documents of 32 and 214 tokens, then the next word's first letter), sent to an
in-process language server and to one with `modelServer` = a llama-server (the README's command),
one server at a time, each once the other is idle (type_documents says why). Per keystroke: ms,
and from the remote engine's stats its HTTP round trips and bytes. Then the same keystrokes to a third
language server whose `modelServer` is tests.support.fault_proxy in `delay` mode (each generation answer
held `--delay-ms`, 300 by default, as a distant server would be), counting the proxy's TCP
connections per document. Results: bench/results/tail.json.

`--model NAME` sets both language servers' `model` (default: the benchmark's model, Gemma 3
270M) and `--server-model NAME` what llama-server runs (default: the same), so a team's pair is
measured as it runs: `--model qwen2.5-coder-0.5b --server-model qwen2.5-coder-1.5b` (the 0.5B's
vocabulary, the 1.5B on the server; the in-process rows are then the 0.5B's, for scale only).
`--no-proxy` leaves out the proxied client.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.machine import CpuWatch, wait_until_idle
from bench.remote_vs_local import ask_keystroke, next_word_start, percentile
from bench.report import Table, num, times
from bench.stats import median, ratio
from tests.support.fault_proxy import FaultProxy
from tests.support.llama_server import start_llama_server
from tests.support.lsp_client import Editor, LspClient
from tests.support.prompts import SIZES, documents

RESULTS = Path(__file__).parent / "results" / "tail.json"


def _client(settings: dict[str, Any], env: dict[str, str] | None = None) -> LspClient:
    client = LspClient(["--log-level", "warning"], env=env)
    client.initialize({"cpcLsp": settings}, wait_loaded=True, timeout=300)
    return client


def type_documents(editors: dict[str, Editor], docs, proxy: FaultProxy | None) -> list[dict[str, Any]]:
    """Each document: its word letter by letter, then the next word's first letter, every
    keystroke to each editor in turn. Rows per (who, keystroke); the proxy's connections per doc.
    `run` passes one editor at a time: two engines on a 2-core machine, each going on with what it
    makes after an answer while the other answered, held each other's OpenMP threads off the cores,
    and one keystroke took up to 25 s (a user runs one of them)."""
    rows = []
    for d, doc in enumerate(docs):
        keys = [(ch, "cold" if k == 0 else "warm") for k, ch in enumerate(doc.word)]
        if (start := next_word_start(doc)) is not None:
            keys.append((start, "word start"))
        uri = f"file:///bench/tail/{d}.py"
        before = proxy.connections if proxy is not None else 0
        for k, (chars, kind) in enumerate(keys):
            for who, editor in editors.items():
                if k == 0:
                    editor.open(uri, doc.base)
                editor.type(uri, chars)
                rows.append(
                    {"who": who, "doc": d, "tokens": doc.tokens, "kind": kind, "key": k, **ask_keystroke(editor, uri)}
                )
        if proxy is not None:
            for row in rows:
                if row["doc"] == d and row["who"] == "proxied":
                    row["doc_connections"] = proxy.connections - before
        for editor in editors.values():
            editor.close(uri)
    return rows


def summarize(rows: list[dict[str, Any]], who: str, kind: str = "warm") -> dict[str, Any]:
    got = [r for r in rows if r["who"] == who and r["kind"] == kind]
    trips = [r["round_trips"] for r in got if r.get("round_trips") is not None]
    sizes = [
        (r.get("bytes_sent") or 0) + (r.get("bytes_received") or 0) for r in got if r.get("round_trips") is not None
    ]
    return {
        "who": who, "kind": kind, "keystrokes": len(got), "median_ms": median([r["ms"] for r in got]),
        "p95_ms": percentile([r["ms"] for r in got], 0.95), "max_ms": max((r["ms"] for r in got), default=None),
        "round_trips_mean": sum(trips) / len(trips) if trips else None, "round_trips_p95": percentile(trips, 0.95),
        "round_trips_max": max(trips, default=None), "bytes_mean": sum(sizes) / len(sizes) if sizes else None,
        "bytes_p95": percentile(sizes, 0.95), "no_request_share": sum(t == 0 for t in trips) / len(trips) if trips else None,
        "shown": sum(r["suggestion"] is not None for r in got),
    }  # fmt: skip


def run(
    threads: int,
    delay_ms: int,
    say,
    max_tokens: int = 16,
    quick: bool = False,
    n_probs: tuple[int, ...] = (),
    model_name: str | None = None,
    server_model: str | None = None,
    proxy: bool = True,
    timeout_ms: int = 30000,
) -> dict[str, Any]:
    from engine.local.llama import LlamaModel
    from engine.model_files import resolve_model

    model = LlamaModel(resolve_model(model_name), vocab_only=True)
    try:
        count = lambda text: len(model.tokenize(text.encode(), add_bos=True))  # noqa: E731
        docs = [
            d
            for size in SIZES[:2]
            for d in documents(count, size, 1 if quick else 3, min_word=7, first_line=60 + size // 3)
        ]
    finally:
        model.close()
    server = start_llama_server(slots=4, threads=threads, model=server_model or model_name)
    settings = {"maxTokens": max_tokens, "threads": threads, "modelServerTimeoutMs": timeout_ms}
    if model_name:
        settings["model"] = model_name
    results: dict[str, Any] = {"llama_server": server.command()[1:], "threads": threads, "delay_ms": delay_ms,
                               "documents": [{"tokens": d.tokens, "word": d.word} for d in docs]}  # fmt: skip
    try:
        local, remote = _client(settings), _client({**settings, "modelServer": server.url})
        others = {
            f"remote n_probs={n}": _client({**settings, "modelServer": server.url}, {"CPC_LSP_N_PROBS": str(n)})
            for n in n_probs
        }
        try:
            say(f"tail: {len(docs)} documents, in-process then remote, keystroke by keystroke")
            clients = {"local": local, "remote": remote, **others}
            rows = []
            for who, client in clients.items():  # one at a time: see type_documents
                wait_until_idle([c.pid for c in clients.values()] + ([server.process.pid] if server.process else []))
                rows += type_documents({who: Editor(client)}, docs, None)
        finally:
            for client in (local, remote, *others.values()):
                client.shutdown()
        if proxy:
            with FaultProxy(server.url, mode="delay") as held:
                held.delay_s = delay_ms / 1000
                proxied = _client({**settings, "modelServer": held.url})
                try:
                    say(f"tail: the same keystrokes behind a proxy holding each answer {delay_ms} ms")
                    rows += type_documents({"proxied": Editor(proxied)}, docs, held)
                finally:
                    proxied.shutdown()
    finally:
        server.stop()
    results["rows"] = rows
    who_all = ["local", "remote", *(f"remote n_probs={n}" for n in n_probs), *(["proxied"] if proxy else [])]
    results["table"] = [summarize(rows, who, kind) for kind in ("warm", "cold", "word start") for who in who_all]
    results["equal_to_local"] = {
        who: sum(a["suggestion"] == b["suggestion"] for a, b in zip(_of(rows, "local"), _of(rows, who)))
        / max(1, len(_of(rows, "local")))
        for who in who_all[1:]
    }
    warm = {r["who"]: r for r in results["table"] if r["kind"] == "warm"}
    results["remote_over_local_p95"] = ratio(warm["remote"]["p95_ms"], warm["local"]["p95_ms"])
    connections = [r["doc_connections"] for r in rows if r["who"] == "proxied" and r["key"] == 0]
    results["proxied_connections_per_doc"] = connections
    results["proxy_added"] = proxy_added(rows, results["delay_ms"]) if proxy else None
    return results


def proxy_added(rows: list[dict[str, Any]], delay_ms: int) -> dict[str, Any]:
    """What the proxy adds to a warm keystroke: proxied ms minus direct (remote) ms, keystroke by
    keystroke, split by how many requests the keystroke made behind the proxy. A keystroke with no
    request should add nothing; one with N requests about N x `delay_ms`: the rest is the server's
    own compute, which the direct run saw too (so a target of one round trip + 100 ms is a target
    on the share of keystrokes that need a request, and on how many they need)."""
    direct = {(r["doc"], r["key"]): r for r in rows if r["who"] == "remote"}
    pairs = [
        (r, direct[(r["doc"], r["key"])])
        for r in rows
        if r["who"] == "proxied" and r["kind"] == "warm" and (r["doc"], r["key"]) in direct
    ]
    by_trips: dict[int, list[float]] = {}
    for proxied, plain in pairs:
        by_trips.setdefault(proxied.get("round_trips") or 0, []).append(proxied["ms"] - plain["ms"])
    return {
        "keystrokes": len(pairs),
        "no_request_share": (len(by_trips.get(0, [])) / len(pairs)) if pairs else None,
        "by_round_trips": {
            str(n): {
                "keystrokes": len(v),
                "added_median_ms": median(v),
                "added_max_ms": max(v),
                "per_round_trip_ms": median([x / n for x in v]) if n else None,
            }
            for n, v in sorted(by_trips.items())
        },
        "direct_ms_of_requesting": sorted(plain["ms"] for proxied, plain in pairs if proxied.get("round_trips")),
        "delay_ms": delay_ms,
    }


def _of(rows: list[dict[str, Any]], who: str) -> list[dict[str, Any]]:
    return sorted((r for r in rows if r["who"] == who), key=lambda r: (r["doc"], r["key"]))


def table(results: dict[str, Any]) -> Table:
    body = [[r["kind"], r["who"], num(r["keystrokes"]), num(r["median_ms"]), num(r["p95_ms"]), num(r["max_ms"]),
             f"{num(r['round_trips_mean'], 2)} / {num(r['round_trips_p95'])} ({num(r['round_trips_max'])})",
             num(r["bytes_mean"], 0), pct_or(r["no_request_share"]), num(r["shown"])]
            for r in results["table"] if r["keystrokes"]]  # fmt: skip
    return (f"tail: warm keystrokes inside a word, in-process (local) vs remote vs remote behind a proxy holding each answer {results['delay_ms']} ms",
            ["keystroke", "who", "n", "median ms", "p95 ms", "max ms", "round trips mean / p95 (max)", "bytes per key (mean)",
             "no request", "shown"], body)  # fmt: skip


def added_table(results: dict[str, Any]) -> Table:
    """bench.tail's proxy rows: what the proxy added per warm keystroke, by requests made."""
    added = results.get("proxy_added") or {}
    body = [[n, num(v["keystrokes"]), num(v["added_median_ms"]), num(v["added_max_ms"]), num(v["per_round_trip_ms"])]
            for n, v in (added.get("by_round_trips") or {}).items()]  # fmt: skip
    share = pct_or(added.get("no_request_share"))
    return (f"tail: what the {results['delay_ms']} ms proxy added to a warm keystroke (proxied minus direct, same keystroke); "
            f"{share} of warm keystrokes made no request",
            ["requests behind the proxy", "keystrokes", "added median ms", "added max ms", "added per request ms"], body)  # fmt: skip


def pct_or(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def targets(results: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    warm = {r["who"]: r for r in results["table"] if r["kind"] == "warm"}
    r, p = warm["remote"], results["remote_over_local_p95"]
    proxied_p95 = warm["proxied"]["p95_ms"] if "proxied" in warm else None  # None: run with --no-proxy
    limit = results["delay_ms"] + 100
    conns = results["proxied_connections_per_doc"]
    return [
        ("warm remote p95 <= 2x in-process p95", times(p), None if p is None else p <= 2),
        ("round trips per warm keystroke p95 <= 2", num(r["round_trips_p95"]), None if r["round_trips_p95"] is None else r["round_trips_p95"] <= 2),
        ("mean bytes per warm keystroke <= 10 KB", num(r["bytes_mean"], 0), None if r["bytes_mean"] is None else r["bytes_mean"] <= 10_000),
        (f"behind the proxy: warm p95 <= one round trip + 100 ms ({limit} ms)", num(proxied_p95), None if proxied_p95 is None else proxied_p95 <= limit),
        # New connections each document's keystrokes opened: 0 when they went on the one the
        # language server already had open (its model check at start), else at most 1.
        ("behind the proxy: new TCP connections per document <= 1", f"{conns}", all(c <= 1 for c in conns) if conns else None),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.tail [--threads 2] [--delay-ms 300] [--out FILE]`."""
    from bench.report import render, targets_table

    parser = argparse.ArgumentParser(prog="python -m bench.tail", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--delay-ms", type=int, default=300)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--n-probs", default="", help="also remote clients listing this many tokens per token (comma-separated)"
    )
    parser.add_argument("--model", default=None, help="both language servers' `model` (default: the benchmark's)")
    parser.add_argument("--server-model", default=None, help="what llama-server runs (default: --model)")
    parser.add_argument("--no-proxy", action="store_true", help="leave out the client behind the delaying proxy")
    parser.add_argument("--timeout-ms", type=int, default=30000, help="the language servers' modelServerTimeoutMs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    watch = CpuWatch.start()
    import os

    before = os.times()
    started = time.perf_counter()
    results = run(
        args.threads,
        args.delay_ms,
        lambda m: print(f"[tail] {m}", flush=True),
        quick=args.quick,
        n_probs=tuple(int(n) for n in args.n_probs.split(",") if n),
        model_name=args.model,
        server_model=args.server_model,
        proxy=not args.no_proxy,
        timeout_ms=args.timeout_ms,
    )
    after = os.times()
    results["command"] = "python -m bench.tail " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    results["seconds"] = time.perf_counter() - started
    children = after.children_user + after.children_system - before.children_user - before.children_system
    results["other_processes_cpu_share"] = watch.others_share(children)
    checks = targets(results)
    results["targets"] = [{"target": n, "measured": v, "ok": ok} for n, v, ok in checks]
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(render(table(results)))
    if results.get("proxy_added"):
        print(render(added_table(results)))
    print(render(targets_table(checks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
