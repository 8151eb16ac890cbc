"""The `remote` part of `python -m bench`: suggestions from a llama-server over loopback, beside the
in-process engine and beside the peer on the same server.

The headline (`through_server`, also alone: `python -m bench.remote_vs_local`): remote against in-process
*through the language server*, as a new user sets it up: the README's server command (4 slots of
2048 tokens, `-t 2`), default settings, held-out mid-word cases (tests.support.cases' check set) and the
seed sentences asked one after another, with the gate on (default) and off; the share of cases
where the two show the same suggestion (nothing shown counts as a suggestion).

Then one llama-server (tests.support.llama_server: the default model, 4 slots, the wheel's CPU flags) and
language servers over stdio with the same settings: "local" (in-process model) and "remote"
(`modelServer` = that llama-server). Measured:

- keystrokes: a word typed letter by letter into a fresh document (the first letter is the cold
  document, the others warm keystrokes), then the first letter of the next word (word start);
  each document to local, then remote, then the peer, each once the others are idle (so no
  engine's work after an answer runs into another's keystroke). Per keystroke, from the remote
  engine's stats: HTTP round trips and bytes;
- the peer: llama.vim's request on the same server and the same keystrokes (`/infill` with the
  text before the cursor as raw text, partial word included, `cache_prompt`, on its own slot).
  `/infill` needs FIM tokens; a model without them (the default one) gets the same raw text at
  `/completion`, which is what such a request amounts to there;
- quality: the exact method on the same mid-word cases, local and remote; the cases where the two
  differ are listed;
- four users: four remote language servers typing four documents at once, against one user typing
  the same documents one after another (warm keystroke p50 and p95), and the slots they used;
- fault probes: the time to answer a request while the server is down, too slow, answers garbage,
  cuts its answer or the connection, is given an https:// URL, or refuses the key, beside the budget.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import quality
from bench.infill import InfillPeer
from bench.machine import wait_until_idle
from bench.report import Table, num, pct, times
from bench.stats import maximum, median, ratio
from tests.support.cases import Case
from tests.support.fault_proxy import FaultProxy
from tests.support.llama_server import LlamaServer, start_llama_server
from tests.support.lsp_client import Editor, LspClient, insert_text
from tests.support.prompts import SIZES, Typing, documents, source_text

SLOTS = 4
PEER_SLOT = SLOTS - 1
FAULT_BUDGET_MS = 10000  # a first contact (vocabulary read + checks) takes 6-8 s on a loaded 2-core machine
KEY = "bench-key-not-a-secret"


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile (p95: share 0.95)."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, int(round(share * len(ranked) + 0.5)) - 1))]


HEADLINE_SEEDS = (  # bench.remote_engine's seeds, as documents: the cursor at the end
    "Thanks for sending over the draft yest",
    "import num",
    "The model's behavi",
    "Once upon a ti",
)


def through_server(
    cases: list[Case],
    say: Callable[[str], None],
    threads: int = 2,
    save: Callable[[dict], None] | None = None,
    model: str = "gemma-3-270m",
) -> dict[str, Any]:
    """Remote vs in-process through the language server with default settings (the gate on, then
    off), each case asked of both back to back in a fresh document: equal share and differences.
    Both sides name `model` (the server runs it; in-process, no `model` would route code to
    another model than the server's). `save` gets the results so far after each gate."""
    server = start_llama_server(slots=SLOTS, ctx=2048, threads=threads, model=model)
    out: dict[str, Any] = {
        "llama_server": server.command()[1:],
        "model": model,
        "cases": len(cases),
        "seeds": len(HEADLINE_SEEDS),
    }
    items = [("seed", i, text, "plaintext") for i, text in enumerate(HEADLINE_SEEDS)]
    items += [(case.kind, i, case.document(), quality.LANGUAGES[case.kind]) for i, case in enumerate(cases)]
    try:
        for gate, settings in (("on", {"model": model}), ("off", {"model": model, "minConfidence": 0})):
            say(f"remote headline: gate {gate}, {len(items)} documents, in-process vs remote")
            local, remote = _client(settings), _client({**settings, "modelServer": server.url})
            try:
                rows = []
                for kind, i, text, language in items:
                    row: dict[str, Any] = {"kind": kind, "case": i}
                    for who, client in (("local", local), ("remote", remote)):
                        editor = Editor(client)
                        uri = f"file:///bench/headline/{gate}/{kind}-{i}.txt"
                        editor.open(uri, text, language)
                        reply = editor.inline(uri, timeout=600)
                        stats = editor.stats() or {}
                        editor.close(uri)
                        row[who] = insert_text(reply)
                        row[f"{who}_ms"] = reply.ms
                        if who == "remote":
                            row["round_trips"], row["fallback"] = stats.get("roundTrips"), stats.get("fallback")
                    rows.append(row)
                statuses = [n["params"]["state"] for n in remote.notifications if n["method"] == "cpcLsp/status"]
            finally:
                local.shutdown()
                remote.shutdown()
            seeds = [r for r in rows if r["kind"] == "seed"]
            held = [r for r in rows if r["kind"] != "seed"]
            out[f"gate_{gate}"] = {
                "equal": sum(r["local"] == r["remote"] for r in held), "cases": len(held),
                "equal_share": sum(r["local"] == r["remote"] for r in held) / len(held) if held else None,
                "seeds_equal": sum(r["local"] == r["remote"] for r in seeds),
                "shown": {"local": sum(r["local"] is not None for r in held), "remote": sum(r["remote"] is not None for r in held)},
                "median_ms": {"local": median([r["local_ms"] for r in held]), "remote": median([r["remote_ms"] for r in held])},
                "slow_statuses": statuses.count("slow"),
                "differ": [r for r in rows if r["local"] != r["remote"]],
            }  # fmt: skip
            if save is not None:
                save(out)
    finally:
        server.stop()
    return out


def _client(settings: dict[str, Any]) -> LspClient:
    client = LspClient(["--log-level", "warning"])
    client.initialize({"cpcLsp": settings}, wait_loaded=True, timeout=300)
    return client


def next_word_start(doc: Typing) -> str | None:
    """What the source has between the typed word and the next word's first letter (" t")."""
    text = source_text()
    at = text.find(doc.base + doc.word)
    if at < 0:
        return None
    match = re.match(r"([ \t]+)([A-Za-z])", text[at + len(doc.base) + len(doc.word) :])
    return match.group(1) + match.group(2) if match else None


def ask_keystroke(editor: Editor, uri: str) -> dict[str, Any]:
    """One keystroke's answer and its cost. The stats are the last engine call's: a keystroke the
    engine did not answer (the suggestion shown, carried) made no request, so it costs 0 round
    trips and 0 bytes, not what the call before it cost (which the tail once counted again at
    every carried keystroke)."""
    before = (editor.stats() or {}).get("engineAnswers", 0)
    reply = editor.inline(uri, timeout=600)
    stats = editor.stats() or {}
    if stats.get("engineAnswers", 0) == before:
        stats = {"roundTrips": 0, "bytesSent": 0, "bytesReceived": 0}
    return {
        "ms": reply.ms, "suggestion": insert_text(reply), "round_trips": stats.get("roundTrips"),
        "bytes_sent": stats.get("bytesSent"), "bytes_received": stats.get("bytesReceived"),
        "decoded": stats.get("decodedTokens"), "fallback": stats.get("fallback"),
    }  # fmt: skip


def _type(
    editors: dict[str, Editor],
    peer: InfillPeer | None,
    doc: Typing,
    uri: str,
    max_keys: int,
    busy: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """One document: its word letter by letter, then the next word's first letter; to each editor
    in turn, then to the peer. One row per (who, keystroke). Before each, the processes `busy`
    (the language servers, llama-server) are let go idle: an engine going on with its work after an
    answer while another one answers holds the other's threads off a 2-core machine's cores
    (bench.tail once read 5 to 25 s for a keystroke of 1 s)."""
    keys = [(doc.word[: k + 1], ch, "cold" if k == 0 else "warm") for k, ch in enumerate(doc.word[:max_keys])]
    if (start := next_word_start(doc)) is not None and max_keys >= len(doc.word):
        keys.append((doc.word + start, start, "word start"))
    rows = []
    for who, editor in editors.items():
        wait_until_idle(busy)
        editor.open(uri, doc.base)
        for k, (_, chars, kind) in enumerate(keys):
            editor.type(uri, chars)
            rows.append({"who": who, "kind": kind, "key": k, **ask_keystroke(editor, uri)})
        editor.close(uri)
    if peer is not None:
        wait_until_idle(busy)
        for k, (typed, _, kind) in enumerate(keys):
            ms, shown = peer.complete(doc.base + typed)
            rows.append({"who": "peer", "kind": kind, "key": k, "ms": ms, "suggestion": shown})
    return rows


def keystrokes(
    editors: dict[str, Editor],
    peer: InfillPeer | None,
    count_tokens: Callable[[str], int],
    quick: bool,
    busy: Sequence[int] = (),
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for size in SIZES[:2] if quick else SIZES:
        docs = documents(count_tokens, size, 1 if quick else 2, min_word=5 if quick else 7, first_line=60 + size // 3)
        for d, doc in enumerate(docs):
            rows += [
                {**r, "tokens": doc.tokens}
                for r in _type(editors, peer, doc, f"file:///bench/remote/{size}-{d}.py", 6 if quick else 99, busy)
            ]
    table = []
    for kind in ("warm", "word start", "cold"):
        for who in (*editors, "peer"):
            got = [r for r in rows if r["who"] == who and r["kind"] == kind]
            if not got:
                continue
            trips = [r["round_trips"] for r in got if r.get("round_trips") is not None]
            table.append({
                "kind": kind, "who": who, "keystrokes": len(got), "median_ms": median([r["ms"] for r in got]),
                "p95_ms": percentile([r["ms"] for r in got], 0.95),
                "round_trips_median": median(trips), "round_trips_max": maximum(trips),
                "round_trips_mean": sum(trips) / len(trips) if trips else None,
                "bytes_per_key_mean": (sum((r.get("bytes_sent") or 0) + (r.get("bytes_received") or 0) for r in got) / len(got))
                if trips else None,
                "no_request_share": (sum(t == 0 for t in trips) / len(trips)) if trips else None,
                "bytes_sent_median": median([r["bytes_sent"] for r in got if r.get("bytes_sent") is not None]),
                "bytes_received_median": median([r["bytes_received"] for r in got if r.get("bytes_received") is not None]),
                "fallbacks": sum(bool(r.get("fallback")) for r in got),
            })  # fmt: skip
    return {"rows": rows, "table": table, "peer_endpoint": None if peer is None else peer.endpoint}


def quality_cases(local: Editor, remote: Editor, cases: list[Case]) -> dict[str, Any]:
    """The exact method on the same cases, local and remote: accuracy and where they differ."""
    ours = {"local": quality.run_server(local, cases), "remote": quality.run_server(remote, cases)}
    differ = [
        {"case": a.case, "kind": a.kind, "typed": cases[a.case].typed, "local": a.suggestion, "remote": b.suggestion}
        for a, b in zip(ours["local"], ours["remote"]) if a.suggestion != b.suggestion
    ]  # fmt: skip
    return {
        "cases": len(cases),
        "correct": {who: sum(o.correct for o in got) / len(got) for who, got in ours.items()},
        "identical": (len(cases) - len(differ)) / len(cases),
        "same_first_word": sum(
            quality.first_word(d["local"] or "") == quality.first_word(d["remote"] or "") for d in differ
        )
        + len(cases)
        - len(differ),
        "differ": differ,
    }


def four_users(server: LlamaServer, settings: dict[str, Any], count_tokens, quick: bool) -> dict[str, Any]:
    """Four documents typed by one user one after another, then by four users at once."""
    docs = documents(count_tokens, SIZES[0] if quick else SIZES[1], SLOTS, min_word=5 if quick else 7, first_line=900)
    clients = [_client(settings) for _ in docs]
    try:
        editors = [Editor(c) for c in clients]
        single: list[dict[str, Any]] = []
        for d, doc in enumerate(docs):
            single += _type({"one": editors[0]}, None, doc, f"file:///bench/one/{d}.txt", 99)
        together: dict[int, list[dict[str, Any]]] = {}

        def user(i: int) -> None:
            together[i] = _type({f"user{i}": editors[i]}, None, docs[i], f"file:///bench/four/{i}.txt", 99)

        threads = [threading.Thread(target=user, args=(i,)) for i in range(len(docs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        slots = server.slot_states()
    finally:
        for client in clients:
            client.shutdown()
    warm_one = [r["ms"] for r in single if r["kind"] == "warm"]
    warm_four = [r["ms"] for rows in together.values() for r in rows if r["kind"] == "warm"]
    decoded_four = [
        r["decoded"] for rows in together.values() for r in rows if r["kind"] == "warm" and r["decoded"] is not None
    ]
    return {
        "documents": len(docs), "tokens": median([d.tokens for d in docs]),
        "one_p50_ms": median(warm_one), "one_p95_ms": percentile(warm_one, 0.95),
        "four_p50_ms": median(warm_four), "four_p95_ms": percentile(warm_four, 0.95),
        "p95_ratio": ratio(percentile(warm_four, 0.95), percentile(warm_one, 0.95)),
        "warm_keystrokes": {"one": len(warm_one), "four": len(warm_four)},
        "four_decoded_per_warm_key_max": maximum(decoded_four),
        "slots_used": sum(1 for s in slots if s.get("id_task", -1) != -1 or s.get("n_past") or s.get("n_prompt_tokens")),
        "slot_states": [{k: s.get(k) for k in ("id", "id_task", "n_ctx", "is_processing")} for s in slots],
    }  # fmt: skip


def fault_probes(server: LlamaServer, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Each fault: ms from a keystroke's request to its answer, with the budget FAULT_BUDGET_MS."""
    base = {**settings, "modelServerTimeoutMs": FAULT_BUDGET_MS}
    probes: list[dict[str, Any]] = []
    texts = iter([  # a fresh prompt per probe: a remembered one would need no request at all
        "Please send me the updated schedule for next wee", "The quarterly report is due at the end of the mon",
        "Could you check the numbers in the second tab", "We moved the meeting to the large conference roo",
        "I attached the signed contract and the invoi", "Remember to update the documentation before the rele",
        "The build failed again because of a missing depend", "Thanks again for your help with the migrati",
        "Let us know which dates work best for the works",
    ])  # fmt: skip

    def ask(client: LspClient, name: str, uri: str = "file:///bench/fault.txt") -> None:
        text = next(texts)
        if name.startswith("warm-up"):  # the probes after it need the engine connected
            client.wait_notification(lambda n: n["method"] == "cpcLsp/status" and n["params"]["state"] == "ready", 120)
        editor = Editor(client)
        editor.open(uri, text[:-1])
        editor.type(uri, text[-1])
        reply = editor.inline(uri, timeout=60)
        state = [n["params"]["state"] for n in client.notifications if n["method"] == "cpcLsp/status"]
        probes.append(
            {
                "probe": name,
                "answer_ms": reply.ms,
                "suggestion": insert_text(reply),
                "status": state[-1] if state else None,
            }
        )
        editor.close(uri)

    down = LlamaServer(slots=1)  # never started: nothing listens on its port
    for name, url in (("down at start", down.url), ("https:// URL", "https://127.0.0.1:9")):
        client = _client({**base, "modelServer": url})
        ask(client, name)
        client.shutdown()
    with start_llama_server(slots=1, api_key=KEY) as keyed:
        for name, key in (("missing key", ""), ("wrong key", "wrong")):
            client = _client({**base, "modelServer": keyed.url, "modelServerApiKey": key})
            ask(client, name)
            client.shutdown()
    with FaultProxy(server.url) as proxy:
        client = _client({**base, "modelServer": proxy.url})
        try:
            ask(client, "warm-up (no fault)", "file:///bench/warm.txt")
            for name, mode in (("slower than the budget", "delay"), ("garbage answer", "garbage"),
                               ("truncated answer", "truncate"), ("connection reset", "reset")):  # fmt: skip
                proxy.mode, proxy.delay_s = mode, FAULT_BUDGET_MS / 1000 + 2
                ask(client, name, f"file:///bench/{mode}.txt")
                proxy.mode = "pass"
                time.sleep(5)  # past the engine's back-off (at most 4 s), so the next probe meets the server fresh
        finally:
            client.shutdown()
    for probe in probes:
        probe["budget_ms"] = FAULT_BUDGET_MS
    return probes


def headline_cases(quick: bool = False) -> list[Case]:
    """Held-out-style: tests.support.cases' check set (files the tuning set does not use), 26 per kind."""
    from tests.support.cases import build_cases, check_cases

    return check_cases(2 if quick else 26, build_cases(50))


def run(args: Any, cases: list[Case], count_tokens: Callable[[str], int], say: Callable[[str], None]) -> dict[str, Any]:
    threads = args.threads or None
    headline = through_server(headline_cases(args.quick), say)
    say("remote: starting llama-server (4 slots, default model)")
    server = start_llama_server(slots=SLOTS, threads=threads or 2)
    settings = {"maxTokens": args.max_tokens, "threads": args.threads, "modelServerTimeoutMs": 30000}
    results: dict[str, Any] = {"llama_server": server.command()[1:], "threads": threads, "through_server": headline}
    try:
        local, remote = _client(settings), _client({**settings, "modelServer": server.url})
        peer = None if args.no_peer else InfillPeer(server, args.max_tokens, slot=PEER_SLOT)
        try:
            editors = {"local": Editor(local), "remote": Editor(remote)}
            say("remote: keystrokes, local vs remote vs the /infill peer")
            busy = [local.pid, remote.pid] + ([server.process.pid] if server.process else [])
            results["keystrokes"] = keystrokes(editors, peer, count_tokens, args.quick, busy)
            if peer is not None and peer.endpoint != "/infill":
                results["keystrokes"]["peer_note"] = getattr(peer, "refused", "")
            n = min(len(cases), 8 if args.quick else 48)
            say(f"remote: quality, local vs remote ({n} cases)")
            for client in (local, remote):
                client.notify(
                    "workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"maxTokens": args.quality_max_tokens}}}
                )
            results["quality"] = quality_cases(editors["local"], editors["remote"], cases[:n])
        finally:
            if peer is not None:
                peer.close()
            local.shutdown()
            remote.shutdown()
        say("remote: four users at once")
        results["four_users"] = four_users(server, {**settings, "modelServer": server.url}, count_tokens, args.quick)
        say("remote: fault probes")
        results["faults"] = fault_probes(server, settings)
    finally:
        server.stop()
    return results


# --- tables and targets --------------------------------------------------------------------------


def headline_table(h: dict[str, Any]) -> Table:
    body = []
    for gate in ("on", "off"):
        g = h.get(f"gate_{gate}")
        if g:
            body.append([gate, f"{g['equal']}/{g['cases']}", pct(g["equal_share"]), f"{g['seeds_equal']}/{h['seeds']}",
                         f"{g['shown']['local']} / {g['shown']['remote']}", f"{num(g['median_ms']['local'])} / {num(g['median_ms']['remote'])}",
                         num(g["slow_statuses"])])  # fmt: skip
    return (
        "remote: the same suggestion as in-process, through the language server (default settings, the README's server command)",
        ["gate", "equal", "share", "seeds equal", "shown local / remote", "median ms local / remote", "slow statuses"],
        body,
    )


def tables(results: dict[str, Any]) -> list[Table]:
    out = [headline_table(results["through_server"])] if "through_server" in results else []
    k = results["keystrokes"]
    header = ["keystroke", "who", "n", "median ms", "p95 ms", "round trips med / mean (max)", "no request",
              "bytes per key (mean)", "mask fallbacks"]  # fmt: skip
    body = [[r["kind"], r["who"], num(r["keystrokes"]), num(r["median_ms"]), num(r["p95_ms"]),
             f"{num(r['round_trips_median'], 1)} / {num(r['round_trips_mean'], 2)} ({num(r['round_trips_max'])})",
             pct(r["no_request_share"]), num(r["bytes_per_key_mean"], 0),
             num(r["fallbacks"]) if r["who"] == "remote" else "-"] for r in k["table"]]  # fmt: skip
    peer = k.get("peer_endpoint") or "-"
    out.append(
        (
            f"remote: keystrokes, local vs remote (llama-server over loopback) vs the peer ({peer}, same server)",
            header,
            body,
        )
    )
    q = results["quality"]
    out.append(("remote: quality, exact method, same cases", ["cases", "local correct", "remote correct", "identical", "same first word"],
                [[num(q["cases"]), pct(q["correct"]["local"]), pct(q["correct"]["remote"]), pct(q["identical"]),
                  f"{q['same_first_word']}/{q['cases']}"]]))  # fmt: skip
    f = results["four_users"]
    out.append(("remote: four users at once on one llama-server (4 slots), warm keystrokes",
                ["tokens", "one p50", "one p95", "four p50", "four p95", "four p95 / one p95", "decoded per warm key (max)"],
                [[num(f["tokens"], 0), num(f["one_p50_ms"]), num(f["one_p95_ms"]), num(f["four_p50_ms"]), num(f["four_p95_ms"]),
                  times(f["p95_ratio"]), num(f["four_decoded_per_warm_key_max"])]]))  # fmt: skip
    out.append(("remote: fault probes, ms from the request to its answer", ["probe", "answer ms", "budget ms", "suggestion", "status"],
                [[p["probe"], num(p["answer_ms"]), num(p["budget_ms"]), "yes" if p["suggestion"] else "none", p["status"] or "-"]
                 for p in results["faults"]]))  # fmt: skip
    return out


def targets(results: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    checks: list[tuple[str, str, bool | None]] = []
    for gate in ("on", "off"):
        g = results.get("through_server", {}).get(f"gate_{gate}")
        if g:
            checks.append(
                (
                    f"remote = in-process through the server, gate {gate}: >= 97% of held-out cases",
                    pct(g["equal_share"]),
                    g["equal_share"] >= 0.97,
                )
            )
            checks.append((f"remote = in-process through the server, gate {gate}: every seed", f"{g['seeds_equal']}/{results['through_server']['seeds']}",
                           g["seeds_equal"] == results["through_server"]["seeds"]))  # fmt: skip
    rows = {(r["kind"], r["who"]): r for r in results["keystrokes"]["table"]}
    remote, peer = rows.get(("warm", "remote")), rows.get(("warm", "peer"))
    if remote and peer:
        r = ratio(remote["median_ms"], peer["median_ms"])
        checks.append(("remote warm keystroke <= 0.5x the /infill peer's", times(r), None if r is None else r <= 0.5))
    if remote:
        trips = remote["round_trips_median"]
        checks.append(
            (
                "remote: median round trips per keystroke inside a word <= 1.2",
                num(trips),
                None if trips is None else trips <= 1.2,
            )
        )
    q = results["quality"]
    checks.append(("remote equals local (same cases)", pct(q["identical"]), q["identical"] >= 0.97))
    f = results["four_users"]
    checks.append(("four users: p95 warm keystroke <= 3x one user's", times(f["p95_ratio"]),
                   None if f["p95_ratio"] is None else f["p95_ratio"] <= 3))  # fmt: skip
    probes = [p for p in results["faults"] if "no fault" not in p["probe"]]
    late = [p["probe"] for p in probes if p["answer_ms"] > p["budget_ms"]]
    checks.append(("every fault probe answered within the budget", f"{len(probes) - len(late)}/{len(probes)}" + (f" (late: {', '.join(late)})" if late else ""),
                   not late))  # fmt: skip
    return checks


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.remote_vs_local [--quick] [--out FILE]`: the headline alone, its table and JSON."""
    import argparse
    import json
    from pathlib import Path

    from bench.report import render

    parser = argparse.ArgumentParser(prog="python -m bench.remote_vs_local", description=main.__doc__)
    parser.add_argument("--quick", action="store_true", help="2 cases per kind")
    parser.add_argument("--threads", type=int, default=2, help="llama-server -t (the README's command: 2)")
    parser.add_argument("--model", default="gemma-3-270m", help="the model of the server and of both language servers")
    parser.add_argument(
        "--unseen",
        action="store_true",
        help="the check on unseen cursors instead (bench.remote_same: 1,500 characters before, 400 after, maxTokens 8)",
    )
    parser.add_argument("--max-tokens", type=int, default=8, help="with --unseen: maxTokens")
    parser.add_argument("--gates", default="on,off", help="with --unseen: which gates, in this order (on, off)")
    parser.add_argument(
        "--settled",
        action="store_true",
        help="with --unseen: ask each case once both servers are idle after opening (the opening prefetch done)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: bench/results/remote_headline-MODEL.json (--unseen: remote_unseen-MODEL.json)",
    )
    args = parser.parse_args(argv)
    name = ("remote_unseen-settled" if args.settled else "remote_unseen") if args.unseen else "remote_headline"
    args.out = args.out or Path(__file__).parent / "results" / f"{name}-{args.model}.json"
    started = time.time()

    def save(partial: dict) -> None:
        args.out.write_text(json.dumps(partial, indent=1) + "\n")

    say = lambda m: print(m, flush=True)  # noqa: E731
    if args.unseen:
        from bench import remote_same

        cases = remote_same.unseen_cases(2 if args.quick else 25)
        gates = tuple(g.strip() for g in args.gates.split(",") if g.strip())
        result = remote_same.check(
            cases, say, args.threads, args.model, args.max_tokens, save, gates=gates, settled=args.settled
        )
        tables = [remote_same.table(result), remote_same.differ_table(result)]
    else:
        result = through_server(headline_cases(args.quick), say, args.threads, save, args.model)
        tables = [headline_table(result)]
    result["seconds"] = round(time.time() - started)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for table in tables:
        print(render(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
