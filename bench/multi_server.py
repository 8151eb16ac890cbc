"""The `multi` part of `python -m bench` (alone: `python -m bench.multi_server`): more than one model
server, as a team with two model machines meets it.

Two llama-servers on loopback (tests.support.llama_server: the default model, SLOTS slots each, one thread
each) and language servers over stdio with default settings, three ways:

- "one": `modelServer` is the first server alone (the baseline);
- "list": `modelServer` is both URLs (engine.remote.servers: each document hashed to one, failover);
- "nginx": `modelServer` is Debian's nginx in front of both (tests.support.balancer: a consistent hash on
  the X-Cpc-Document header the engine sends, X-Cpc-Upstream back).

Measured:

- spread and reuse: DOCS documents typed in turn, ROUNDS times each (a word letter by letter,
  then the next word's first letter), so a team's worth of documents comes back to its slots.
  Per way: which server answered each document (the engine's stats say), the share of each
  keystroke's prompt the server did not decode (1 - decoded / prompt tokens, from the engine's
  stats), and the prompt tokens the servers decoded in all (their /metrics, prefetches included);
- failover: one document typed at a steady pace (one key every PACE_S, each waiting for its
  answer); right after a keystroke is sent, the server that answered the last one is killed
  (SIGKILL, mid-request when it is decoding); BACK_S later it is started again on the same port.
  What a user meets: every keystroke answered or not, the time from the kill to the next
  suggestion (and to the next one the other server made), the keystrokes with none in between;
  then the time from the server's return to the document's first answer from it again.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from bench.report import Table, num, pct
from bench.stats import maximum, median
from tests.support.llama_server import LlamaServer, start_llama_server
from tests.support.lsp_client import Editor, LspClient, insert_text
from tests.support.prompts import Typing, documents, source_text

SLOTS = 4
DOCS, ROUNDS, KEYS = 8, 2, 6
SIZE = 214  # tokens per document (tests.support.prompts.SIZES[1])
PACE_S = 0.15  # a keystroke every 150 ms: a fast typist
KILL_AFTER_KEYS, BACK_S, AFTER_BACK_S = 6, 4.0, 30.0
WAYS = ("one", "list", "nginx")


def _say(message: str) -> None:
    print(f"[bench.multi_server] {message}", file=sys.stderr, flush=True)


def _client(settings: dict[str, Any]) -> LspClient:
    client = LspClient(["--log-level", "warning"])
    client.initialize({"cpcLsp": settings}, wait_loaded=True, timeout=300)
    return client


def prompt_counters(server: LlamaServer) -> tuple[int, int] | None:
    """(prompt tokens decoded, prompt tokens reused from its cache) since the server started
    (its /metrics, --metrics: prompt_tokens_total and prompt_tokens_cached_total)."""
    try:
        with urllib.request.urlopen(server.url + "/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"):
            found[name] = int(float(value))
    if len(found) < 2:
        return None
    return found["llamacpp:prompt_tokens_total"], found["llamacpp:prompt_tokens_cached_total"]


def _ask(editor: Editor, uri: str, previous: dict | None) -> dict[str, Any]:
    reply = editor.inline(uri, timeout=120)
    return _row(editor, reply, reply.ms, previous)


def _row(editor: Editor, reply: Any, ms: float, previous: dict | None) -> dict[str, Any]:
    """One keystroke's answer: shown or not, and whether the engine made it (its answer count
    grew) by asking a server (round trips > 0: `server` is then the one asked)."""
    stats = editor.stats() or {}
    fresh = stats.get("engineAnswers", 0) > (previous or {}).get("engineAnswers", 0)
    asked = fresh and (stats.get("roundTrips") or 0) > 0
    return {
        "ms": ms, "shown": reply is not None and insert_text(reply) is not None, "error": reply is None or reply.error is not None,
        "engine": fresh, "asked": asked, "server": stats.get("server") if asked else None,
        "prompt": stats.get("promptTokens") if fresh else None, "decoded": stats.get("decodedTokens") if fresh else None,
        "stats": stats,
    }  # fmt: skip


def spread(settings: dict[str, Any], docs: list[Typing], servers: list[LlamaServer]) -> dict[str, Any]:
    """DOCS documents typed in turn, ROUNDS times each, through one language server."""
    before = [prompt_counters(s) for s in servers]
    client = _client(settings)
    editor = Editor(client)
    rows: list[dict[str, Any]] = []
    previous: dict | None = None
    text = source_text()
    try:
        for d, doc in enumerate(docs):
            editor.open(f"file:///bench/multi/{d}.txt", doc.base)
        for r in range(ROUNDS):
            for d, doc in enumerate(docs):
                uri = f"file:///bench/multi/{d}.txt"
                at = text.find(doc.base) + len(editor.text(uri))
                typed = text[at : at + KEYS] if r else doc.word[:KEYS]
                for k, ch in enumerate(typed):
                    editor.type(uri, ch)
                    row = _ask(editor, uri, previous)
                    previous = row.pop("stats")
                    rows.append({"round": r, "doc": d, "key": k, **row})
    finally:
        client.shutdown()
    after = [prompt_counters(s) for s in servers]
    engine_rows = [r for r in rows if r["engine"] and r["prompt"]]
    prompt = sum(r["prompt"] for r in engine_rows)
    decoded = sum(r["decoded"] or 0 for r in engine_rows)
    by_doc: dict[int, set] = {}
    for r in rows:
        if r["server"]:
            by_doc.setdefault(r["doc"], set()).add(r["server"])
    return {
        "keystrokes": len(rows),
        "answered": sum(not r["error"] for r in rows),
        "shown": sum(r["shown"] for r in rows),
        "engine_answers": len(engine_rows),
        "reuse_share": (1 - decoded / prompt) if prompt else None,
        "reuse_share_round2": _reuse([r for r in engine_rows if r["round"] > 0]),
        **_server_side(before, after),
        "documents_per_server": {
            s: sum(s in v for v in by_doc.values()) for s in sorted({x for v in by_doc.values() for x in v})
        },
        "documents_that_moved": sum(len(v) > 1 for v in by_doc.values()),
        "median_ms": median([r["ms"] for r in rows]),
        "rows": rows,
    }


def _server_side(before: list, after: list) -> dict[str, Any]:
    """What the servers' own counters say over the run (prefetches included)."""
    if None in before + after:
        return {
            "servers_decoded": None,
            "servers_reused": None,
            "servers_reuse_share": None,
            "servers_decoded_each": None,
        }
    decoded = [a[0] - b[0] for a, b in zip(after, before)]
    reused = [a[1] - b[1] for a, b in zip(after, before)]
    total = sum(decoded) + sum(reused)
    return {
        "servers_decoded": sum(decoded),
        "servers_reused": sum(reused),
        "servers_reuse_share": sum(reused) / total if total else None,
        "servers_decoded_each": decoded,
    }


def _reuse(rows: list[dict[str, Any]]) -> float | None:
    prompt = sum(r["prompt"] for r in rows)
    return (1 - sum(r["decoded"] or 0 for r in rows) / prompt) if prompt else None


def failover(
    settings: dict[str, Any], doc: Typing, servers: list[LlamaServer], name_of: Callable[[str], int | None]
) -> dict[str, Any]:
    """One document typed at PACE_S; the server answering it is killed mid-typing, then back."""
    client = _client(settings)
    editor = Editor(client)
    uri = "file:///bench/multi/failover.txt"
    text = source_text()
    start = text.find(doc.base) + len(doc.base)
    typing = text[start : start + 400]
    rows: list[dict[str, Any]] = []
    killed: dict[str, Any] = {}
    events: dict[str, float] = {}
    restarter: threading.Thread | None = None
    try:
        editor.open(uri, doc.base)
        editor.inline(uri, timeout=120)  # the cold document, before the clock starts
        previous = editor.stats() or {}
        last_server = previous.get("server")
        origin = time.monotonic()
        for k, ch in enumerate(typing):
            time.sleep(PACE_S)  # the next key a typist's interval after the last answer
            editor.type(uri, ch)
            sent = time.monotonic()
            if k == KILL_AFTER_KEYS and not killed:
                answering = name_of(last_server or "")
                victim = servers[answering if answering is not None else 0]
                _, pending = client.send("textDocument/inlineCompletion", editor.inline_params(uri))
                time.sleep(0.02)  # the request is on its way (decoding, when it must)
                victim.kill()
                events["killed"] = time.monotonic()
                killed = {"server": victim.url, "key": k}
                reply = pending.result(120)
                row = _row(editor, reply, (time.monotonic() - sent) * 1000, previous)

                def back() -> None:
                    time.sleep(BACK_S)
                    victim.start()
                    events["back"] = time.monotonic()

                restarter = threading.Thread(target=back, daemon=True)
                restarter.start()
            else:
                row = _ask(editor, uri, previous)
                row["ms"] = (time.monotonic() - sent) * 1000
            previous = row.pop("stats")
            last_server = row["server"] or last_server
            rows.append({"key": k, "t": sent - origin, **row})
            home = "back" in events and row["server"] and _same(row["server"], killed["server"])
            if home or ("back" in events and sent - events["back"] > AFTER_BACK_S):
                break
    finally:
        if restarter is not None:
            restarter.join(timeout=120)
        client.shutdown()
    return _failover_summary(rows, killed, events, origin)


def _failover_summary(
    rows: list[dict[str, Any]], killed: dict[str, Any], events: dict[str, float], origin: float
) -> dict[str, Any]:
    kill_t = events.get("killed", origin) - origin
    back_t = events.get("back", origin) - origin if "back" in events else None
    after = [r for r in rows if r["t"] >= kill_t - 1e-9]
    first = next((r for r in after if r["shown"]), None)
    first_other = next((r for r in after if r["asked"] and not _same(r["server"], killed.get("server", ""))), None)
    victim = killed.get("server", "")
    home = None
    if back_t is not None:
        home = next((r for r in rows if r["t"] >= back_t and r["server"] and _same(r["server"], victim)), None)
    gap = [r for r in after if first is None or r["key"] < first["key"]]
    return {
        "keystrokes": len(rows),
        "answered": sum(not r["error"] for r in rows),
        "killed_at_key": killed.get("key"),
        "killed": victim,
        "to_next_suggestion_ms": (first["t"] + first["ms"] / 1000 - kill_t) * 1000 if first else None,
        "to_first_answer_from_other_ms": (first_other["t"] + first_other["ms"] / 1000 - kill_t) * 1000
        if first_other
        else None,
        "keystrokes_without_suggestion": len(gap),
        "slowest_after_kill_ms": maximum([r["ms"] for r in after[:10]]),
        "back_after_s": back_t - kill_t if back_t is not None else None,
        "home_again_ms": (home["t"] + home["ms"] / 1000 - back_t) * 1000 if home else None,
        "median_ms": median([r["ms"] for r in rows]),
        "shown_share": sum(r["shown"] for r in rows) / len(rows) if rows else None,
        "rows": rows,
    }


def _same(answered: str, url: str) -> bool:
    return answered.rstrip("/").split("//")[-1] == url.rstrip("/").split("//")[-1]


def run(args: Any, count_tokens: Callable[[str], int], say: Callable[[str], None] = _say) -> dict[str, Any]:
    from tests.support.balancer import Balancer

    threads = 1
    servers = [start_llama_server(slots=SLOTS, ctx=2048, threads=threads, extra_args=("--metrics",)) for _ in range(2)]
    balancer = Balancer([f"127.0.0.1:{s.port}" for s in servers]).start()
    out: dict[str, Any] = {"llama_server": servers[0].command()[1:], "servers": len(servers), "slots": SLOTS, "threads": threads,
                           "docs": DOCS, "rounds": ROUNDS, "keys": KEYS, "pace_s": PACE_S, "back_s": BACK_S}  # fmt: skip
    ways = {
        "one": servers[0].url,
        "list": f"{servers[0].url}, {servers[1].url}",
        "nginx": balancer.url,
    }
    docs = documents(count_tokens, SIZE, DOCS + 1, min_word=KEYS + 1, first_line=1200)
    try:
        out["spread"] = {}
        for way in (
            () if getattr(args, "failover_only", False) else WAYS if not getattr(args, "quick", False) else ("list",)
        ):
            for s in servers:  # each way starts from empty slots
                s.restart()
            say(f"spread and reuse: {way}, {DOCS} documents x {ROUNDS} rounds")
            out["spread"][way] = spread({"modelServer": ways[way]}, docs[:DOCS], servers)
        out["failover"] = {}
        for way in ("list", "nginx"):
            for s in servers:
                s.restart()
            say(f"failover: {way}")

            def name_of(answered: str) -> int | None:
                return next((i for i, s in enumerate(servers) if _same(answered, s.url)), None)

            out["failover"][way] = failover({"modelServer": ways[way]}, docs[DOCS], servers, name_of)
        out["balancer_log_lines"] = len(balancer.access_log())
    finally:
        balancer.stop()
        for s in servers:
            s.stop()
    return out


def tables(results: dict[str, Any]) -> list[Table]:
    out: list[Table] = []
    rows = []
    for way, r in results.get("spread", {}).items():
        per = ", ".join(f"{v}" for v in r["documents_per_server"].values())
        rows.append([way, num(r["keystrokes"], 0), f"{r['answered']}/{r['keystrokes']}", per, num(r["documents_that_moved"], 0),
                     pct(r["reuse_share"]), pct(r["reuse_share_round2"]), num(r["servers_decoded"], 0),
                     pct(r["servers_reuse_share"]), num(r["median_ms"])])  # fmt: skip
    out.append((f"multi: {results.get('docs')} documents typed in turn, {results.get('rounds')} rounds, two llama-servers of "
                f"{results.get('slots')} slots (one: the first alone)",
                ["modelServer", "keystrokes", "answered", "documents per server", "moved", "prompt reused", "reused coming back",
                 "prompt tokens decoded (servers)", "reused (servers)", "median ms"], rows))  # fmt: skip
    rows = []
    for way, r in results.get("failover", {}).items():
        rows.append([way, f"{r['answered']}/{r['keystrokes']}", num(r["killed_at_key"], 0), num(r["to_next_suggestion_ms"]),
                     num(r["to_first_answer_from_other_ms"]), num(r["keystrokes_without_suggestion"], 0),
                     num(r["slowest_after_kill_ms"]), num(r["home_again_ms"]), pct(r["shown_share"])])  # fmt: skip
    out.append((f"multi: one server killed mid-typing (a key every {results.get('pace_s')} s), back {results.get('back_s')} s later",
                ["modelServer", "answered", "killed at key", "kill -> next suggestion ms", "kill -> first answer of the other server ms",
                 "keys without", "slowest of the next 10 ms", "back -> answered from it again ms", "keys with a suggestion"], rows))  # fmt: skip
    return out


def targets(results: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    checks: list[tuple[str, str, bool | None]] = []
    spread_rows = results.get("spread", {})
    for way, r in spread_rows.items():
        checks.append(
            (
                f"multi {way}: every keystroke answered",
                f"{r['answered']}/{r['keystrokes']}",
                r["answered"] == r["keystrokes"],
            )
        )
    if "one" in spread_rows and "list" in spread_rows:
        a, b = spread_rows["list"]["reuse_share_round2"], spread_rows["one"]["reuse_share_round2"]
        checks.append(("multi: coming back, two servers reuse at least what one does", f"{pct(a)} vs {pct(b)}",
                       None if a is None or b is None else a >= b))  # fmt: skip
    for way, r in results.get("failover", {}).items():
        checks.append(
            (
                f"failover {way}: every keystroke answered",
                f"{r['answered']}/{r['keystrokes']}",
                r["answered"] == r["keystrokes"],
            )
        )
        t = r["to_first_answer_from_other_ms"]
        checks.append(
            (
                f"failover {way}: the other server answers within 5 s of the kill",
                num(t),
                None if t is None else t <= 5000,
            )
        )
        h = r["home_again_ms"]
        checks.append(
            (
                f"failover {way}: the document back on its server within 10 s of its return",
                num(h),
                None if h is None else h <= 10000,
            )
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    from bench import report
    from engine.local.llama import LlamaModel
    from engine.model_files import resolve_model

    parser = argparse.ArgumentParser(prog="python -m bench.multi_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--failover-only", action="store_true", help="measure the failover again, keep the rest of --out"
    )
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "multi.json")
    args = parser.parse_args(argv)
    vocab = LlamaModel(resolve_model(None), vocab_only=True)
    whole = json.loads(args.out.read_text()) if args.out.exists() else {}
    try:
        results = run(args, lambda text: len(vocab.tokenize(text.encode(), add_bos=True)))
    finally:
        vocab.close()
    if args.failover_only and "multi" in whole:
        whole["multi"]["failover"] = results["failover"]
        results = whole["multi"]
    else:
        whole["multi"] = results
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(whole, indent=1) + "\n")
    for table in tables(results) + [report.targets_table(targets(results))]:
        print(report.render(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
