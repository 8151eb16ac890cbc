"""`python -m bench --only team` (or `python -m bench.team`): one llama-server as a team meets it.

Slots for a team (issue 22, part 3). N users, each a language server over stdio with `modelServer`
set to one llama-server (the README's command, `--parallel SLOTS`), each with 3 documents that
share a 150-character licence header and imports, all typing at once: in each round every user
types 2 letters of the word at the end of each of its documents in turn (twice), so coming back
to a document finds its prompt in a slot only if nobody took the slot meanwhile. Beside it, the
first user alone on a fresh server of the same kind, typing the same: the reference. Measured:

- prompt tokens reused: the server's own counters (`/metrics`: prompt tokens taken from a slot's
  cache, or restored from its RAM prompt cache, against tokens evaluated), over everything the
  users sent (prefetches included), and per keystroke from the engine's stats (reused / prompt
  tokens of each answer the engine gave);
- keystroke latency (median, p95) of warm keystrokes (the same prompt as the user's previous
  keystroke in that document) and of "switch" keystrokes (the first letter typed after coming
  back to a document), and the share of keystrokes with a suggestion, per user;
- how the server picked slots (its log: by id, by LRU, by similarity).

Server variants (`VARIANTS`): `--slot-prompt-similarity 0` (the command docs/shared-server.md gives
a team: at a non-zero similarity a request naming a busy slot can change the generation running
there) and llama-server's default 0.1, each with and without the RAM prompt cache (`--cache-ram`,
8192 MiB by default), and more slots than users. Results: bench/results/team.json.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.machine import CpuWatch, process_cpu_seconds
from bench.report import Table, num, pct, times
from bench.stats import median, ratio
from tests.support.llama_server import LlamaServer
from tests.support.lsp_client import Editor, LspClient, insert_text
from tests.support.prompts import documents

HEADER = (  # 150 characters every document of the team starts with
    "# Copyright 2025-26 Example Team. SPDX-License-Identifier: Apache-2.0\n"
    "from __future__ import annotations\n\nimport os\nimport re\nimport sys\nimport json\n\n"
)
DOCS_PER_USER = 3
ROUNDS = 2  # each round: LETTERS letters of each document's word, one document after another
LETTERS = 2
RESULTS = Path(__file__).parent / "results" / "team.json"


@dataclass(frozen=True)
class Variant:
    """One way to run the server: its flags beside the README's command."""

    name: str
    similarity: float
    cache_ram_mib: int | None  # None: llama-server's default (8192 MiB)
    slots: int = 4

    def args(self) -> tuple[str, ...]:
        out = ["--slot-prompt-similarity", f"{self.similarity:g}", "--metrics"]
        if self.cache_ram_mib is not None:
            out += ["--cache-ram", str(self.cache_ram_mib)]
        return tuple(out)


VARIANTS = {
    v.name: v
    for v in (
        Variant("sim0", 0.0, None),  # docs/shared-server.md's command (the RAM cache at its default)
        Variant("sim0-noram", 0.0, 0),
        Variant("sim0.1", 0.1, None),  # llama-server's defaults (the docs' command before 2026-12-05)
        Variant("sim0.1-noram", 0.1, 0),
        Variant(
            "sim0.5", 0.5, None
        ),  # a new document's prompt goes by LRU, not to the slot of another one with the same header
        Variant("sim0-12slots", 0.0, None, slots=12),  # more slots than users x documents (4 x 3)
        Variant(
            "sim0-24slots", 0.0, None, slots=24
        ),  # a slot per document of 8 users: nothing shared, the tail is compute
        Variant("sim0.1-1slot", 0.1, None, slots=1),  # issue 22's "one slot, two users": waits for the slot
        Variant("sim0-1slot", 0.0, None, slots=1),  # the same on docs/shared-server.md's command
    )
}


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile (p95: share 0.95)."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, int(round(share * len(ranked) + 0.5)) - 1))]


def team_documents(count_tokens: Callable[[str], int], users: int, size: int = 120) -> list[list[tuple[str, str]]]:
    """(text, word) per document per user: the header, then a passage of about `size` tokens of
    a real file cut before a word of at least 7 letters (typed LETTERS x ROUNDS letters)."""
    docs = documents(count_tokens, size, users * DOCS_PER_USER, min_word=LETTERS * ROUNDS + 1, first_line=40)
    if len(docs) < users * DOCS_PER_USER:
        raise RuntimeError(f"only {len(docs)} documents of {size} tokens in the source")
    out = [[(HEADER + d.base, d.word) for d in docs[u * DOCS_PER_USER : (u + 1) * DOCS_PER_USER]] for u in range(users)]
    return out


def _client(url: str, settings: dict[str, Any]) -> LspClient:
    client = LspClient(["--log-level", "warning"])
    client.initialize({"cpcLsp": {"modelServer": url, **settings}}, wait_loaded=True, timeout=300)
    return client


def _user(editor: Editor, user: int, docs: list[tuple[str, str]], rows: list[dict[str, Any]], tag: str) -> None:
    """One user: open its documents (each prefetched), then ROUNDS rounds over them."""
    uris = [f"file:///team/{tag}/u{user}/d{d}.py" for d in range(len(docs))]
    for uri, (text, _) in zip(uris, docs):
        editor.open(uri, text, "python")
    answers = 0
    for r in range(ROUNDS):
        for d, (uri, (_, word)) in enumerate(zip(uris, docs)):
            for k in range(r * LETTERS, (r + 1) * LETTERS):
                editor.type(uri, word[k])
                reply = editor.inline(uri, timeout=300)
                stats = editor.stats() or {}
                engine = stats.get("engineAnswers", 0) != answers
                answers = stats.get("engineAnswers", answers)
                kind = "first" if k == 0 else "switch" if k == r * LETTERS else "warm"
                rows.append({
                    "user": user, "doc": d, "round": r, "key": k, "kind": kind, "ms": reply.ms,
                    "suggestion": insert_text(reply), "error": reply.error is not None, "engine": engine,
                    **({k2: stats.get(k2) for k2 in ("promptTokens", "reusedTokens", "decodedTokens", "roundTrips",
                                                      "bytesSent", "bytesReceived", "fallback")} if engine else {}),
                })  # fmt: skip
    for uri in uris:
        editor.close(uri)


def _metrics(server: LlamaServer) -> dict[str, float]:
    status, body = server.get("/metrics")
    if status != 200 or not isinstance(body, str):
        return {}
    out = {}
    for line in body.splitlines():
        match = re.match(r"llamacpp:(\w+) ([0-9.e+-]+)$", line.strip())
        if match:
            out[match.group(1)] = float(match.group(2))
    return out


def _picks(log: str) -> dict[str, int]:
    return {
        "by_id": len(re.findall(r"selected slot by id", log)),
        "by_lru": len(re.findall(r"selected slot by LRU", log)),
        "by_similarity": len(re.findall(r"selected slot by LCP similarity", log)),
    }


def run_users(
    server: LlamaServer,
    docs: list[list[tuple[str, str]]],
    settings: dict[str, Any],
    together: bool,
    tag: str,
    alone_users: int = 1,
) -> dict[str, Any]:
    """The users typing at once (`together`) or one after another; per-keystroke rows and the
    server's counters over the run."""
    clients = [_client(server.url, settings) for _ in (docs if together else docs[:alone_users])]
    before, log_from = _metrics(server), len(server.log())
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        editors = [Editor(c) for c in clients]
        if together:
            per_user: list[list[dict[str, Any]]] = [[] for _ in docs]
            threads = [
                threading.Thread(target=_user, args=(editors[u], u, docs[u], per_user[u], tag))
                for u in range(len(docs))
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(1800)
            for got in per_user:
                rows += got
        else:
            for u in range(min(len(docs), alone_users)):
                _user(editors[u], u, docs[u], rows, tag)
                time.sleep(0.5)  # let its last prefetches end before the next user starts
        lsp_cpu = sum(process_cpu_seconds(c.pid) or 0.0 for c in clients)
    finally:
        for client in clients:
            client.shutdown()
    after = _metrics(server)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("prompt_tokens_total", "prompt_tokens_cached_total")}
    return {
        "rows": rows,
        "seconds": time.perf_counter() - started,
        "server": delta,
        "picks": _picks(server.log()[log_from:]),
        "lsp_cpu_s": lsp_cpu,
    }


def summary(run: dict[str, Any]) -> dict[str, Any]:
    rows = run["rows"]
    evaluated, cached = run["server"]["prompt_tokens_total"], run["server"]["prompt_tokens_cached_total"]
    answered = [r for r in rows if r["engine"] and r.get("promptTokens")]
    users = sorted({r["user"] for r in rows})

    def ms(kind: str | None) -> list[float]:
        return [r["ms"] for r in rows if kind is None or r["kind"] == kind]

    shown = {u: sum(r["suggestion"] is not None for r in rows if r["user"] == u) for u in users}
    return {
        "users": len(users), "keystrokes": len(rows), "seconds": run["seconds"],
        "server_reuse": cached / (cached + evaluated) if cached + evaluated else None,
        "server_evaluated": evaluated, "server_cached": cached,
        "key_reuse": (sum(r["reusedTokens"] for r in answered) / sum(r["promptTokens"] for r in answered)) if answered else None,
        "key_reuse_switch": _reuse([r for r in answered if r["kind"] == "switch"]),
        "warm_p50_ms": median(ms("warm")), "warm_p95_ms": percentile(ms("warm"), 0.95),
        "switch_p50_ms": median(ms("switch")), "switch_p95_ms": percentile(ms("switch"), 0.95),
        "all_p95_ms": percentile(ms(None), 0.95),
        "shown_share": sum(shown.values()) / len(rows) if rows else None,
        "users_with_suggestions": sum(1 for n in shown.values() if n > 0),
        "shown_per_user": shown, "errors": sum(r["error"] for r in rows),
        "round_trips_mean": _mean([r["roundTrips"] for r in answered if r.get("roundTrips") is not None]),
        "picks": run["picks"],
    }  # fmt: skip


def _reuse(rows: list[dict[str, Any]]) -> float | None:
    total = sum(r["promptTokens"] for r in rows)
    return sum(r["reusedTokens"] for r in rows) / total if total else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def measure(
    variant: Variant,
    docs: list[list[tuple[str, str]]],
    settings: dict[str, Any],
    threads: int,
    say,
    modes: tuple[str, ...] = ("alone", "together"),
    server_model: str | None = None,
    alone_all: bool = False,
    server_args: tuple[str, ...] = (),
    logs: Path | None = None,
) -> dict[str, Any]:
    """The first user alone (`alone_all`: every user, one after another), then all of them
    together, each on a fresh server of `variant`."""
    out: dict[str, Any] = {"variant": variant.name, "slots": variant.slots, "users": len(docs)}
    for mode, together in (("alone", False), ("together", True)):
        if mode not in modes:
            continue
        log_path = None
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            log_path = logs / f"{variant.name}-{len(docs)}-{mode}.log"
            log_path.unlink(missing_ok=True)
        server = LlamaServer(
            model=server_model,
            slots=variant.slots,
            threads=threads,
            extra_args=variant.args() + server_args,
            log_path=log_path,
        ).start()
        out["command"] = server.command()[1:]
        try:
            say(f"team: {variant.name}, {len(docs)} users {mode}")
            run = run_users(
                server,
                docs,
                settings,
                together,
                f"{variant.name}-{len(docs)}-{mode}",
                alone_users=len(docs) if alone_all else 1,
            )
        finally:
            server.stop()
        out[mode] = summary(run)
        out[f"{mode}_rows"] = run["rows"]
        out[f"{mode}_lsp_cpu_s"] = run["lsp_cpu_s"]
    if len(modes) < 2:
        return out
    a, t = out["alone"], out["together"]
    out["reuse_ratio"] = ratio(t["server_reuse"], a["server_reuse"])
    out["key_reuse_ratio"] = ratio(t["key_reuse"], a["key_reuse"])
    out["warm_p95_ratio"] = ratio(t["warm_p95_ms"], a["warm_p95_ms"])
    out["all_p95_ratio"] = ratio(t["all_p95_ms"], a["all_p95_ms"])
    if alone_all:
        out["same_as_alone"] = same_as_alone(out["alone_rows"], out["together_rows"])
    return out


def same_as_alone(alone: list[dict[str, Any]], together: list[dict[str, Any]]) -> dict[str, int]:
    """How many keystrokes typed together got the suggestion the same user got alone (the same
    document, the same letter), and how many of those alone had one: sharing the server must
    change when an answer comes, never what it is."""
    key = lambda r: (r["user"], r["doc"], r["key"])  # noqa: E731
    by_key = {key(r): r["suggestion"] for r in alone}
    pairs = [(by_key[key(r)], r["suggestion"]) for r in together if key(r) in by_key]
    return {
        "keystrokes": len(pairs),
        "same": sum(a == t for a, t in pairs),
        "shown_alone": sum(a is not None for a, _ in pairs),
        "same_shown": sum(a == t and a is not None for a, t in pairs),
    }


def table(results: dict[str, Any]) -> Table:
    body = []
    for r in results["runs"]:
        a, t = r["alone"], r["together"]
        body.append([
            r["variant"], f"{r['users']} on {r['slots']}", pct(a["server_reuse"]), pct(t["server_reuse"]), times(r["reuse_ratio"]),
            f"{pct(a['key_reuse'])} / {pct(t['key_reuse'])}",
            f"{num(a['warm_p95_ms'])} / {num(t['warm_p95_ms'])}", times(r["warm_p95_ratio"]),
            f"{num(a['all_p95_ms'])} / {num(t['all_p95_ms'])}", times(r["all_p95_ratio"]),
            f"{pct(a['shown_share'])} / {pct(t['shown_share'])}", f"{t['users_with_suggestions']}/{r['users']}",
            "{by_id}/{by_lru}/{by_similarity}".format(**t["picks"]),
            "{same}/{keystrokes}".format(**r["same_as_alone"]) if r.get("same_as_alone") else "-",
        ])  # fmt: skip
    return ("team: users typing at once on one llama-server, each with 3 documents sharing a 150-character header "
            "(alone = the first user alone on a fresh server)",
            ["server", "users on slots", "reuse alone", "reuse together", "together / alone", "reuse per key alone / together",
             "warm p95 alone / together", "ratio", "all keys p95 alone / together", "ratio", "shown alone / together",
             "users with suggestions", "slot picks id/LRU/similarity", "same as alone"], body)  # fmt: skip


def targets(results: dict[str, Any], chosen: str) -> list[tuple[str, str, bool | None]]:
    checks: list[tuple[str, str, bool | None]] = []
    for r in results["runs"]:
        if r.get("same_as_alone"):
            same = r["same_as_alone"]
            checks.append(
                (
                    f"{r['variant']}: {r['users']} users on {r['slots']} slots, the same suggestion as alone",
                    f"{same['same']}/{same['keystrokes']}",
                    same["same"] == same["keystrokes"],
                )
            )
        if r["variant"] != chosen:
            continue
        if r["users"] <= r["slots"]:
            q = r["reuse_ratio"]
            checks.append(
                (
                    f"{chosen}: {r['users']} users on {r['slots']} slots reuse >= 95% of alone",
                    times(q),
                    None if q is None else q >= 0.95,
                )
            )
        else:
            q, t = r["all_p95_ratio"], r["together"]
            checks.append(
                (
                    f"{chosen}: {r['users']} users on {r['slots']} slots, every user gets suggestions",
                    f"{t['users_with_suggestions']}/{r['users']}",
                    t["users_with_suggestions"] == r["users"],
                )
            )
            checks.append(
                (
                    f"{chosen}: {r['users']} users on {r['slots']} slots, p95 <= 3x alone",
                    times(q),
                    None if q is None else q <= 3,
                )
            )
    return checks


def _children_cpu() -> float:
    import os

    t = os.times()
    return t.children_user + t.children_system


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.team [--variants a,b] [--users 4,8] [--out FILE]`."""
    import argparse

    from bench.report import render, targets_table
    from engine.local.llama import LlamaModel
    from engine.model_files import resolve_model

    parser = argparse.ArgumentParser(prog="python -m bench.team", description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {','.join(VARIANTS)}")
    parser.add_argument("--users", default="4,8")
    parser.add_argument("--threads", type=int, default=2, help="llama-server -t (the README's command: 2)")
    parser.add_argument(
        "--chosen", default="sim0", help="the variant the targets are checked on (docs/shared-server.md's command)"
    )
    parser.add_argument(
        "--model", default=None, help="each language server's `model` (default: the benchmark's, Gemma 3 270M)"
    )
    parser.add_argument(
        "--server-model",
        default=None,
        help="what llama-server runs (default: --model), e.g. a team's pair: "
        "--model qwen2.5-coder-0.5b --server-model qwen2.5-coder-1.5b",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=60000,
        help="modelServerTimeoutMs of every user (the default 5000 is shorter than a cold prompt on a loaded 2-core machine)",
    )
    parser.add_argument("--modes", default="alone,together", help="alone,together (one alone: no ratios)")
    parser.add_argument(
        "--alone-all",
        action="store_true",
        help="alone: every user in turn (not only the first), so each keystroke typed together is compared "
        "with the same user's alone (issue 22's one slot, two users: --variants sim0.1-1slot --users 2)",
    )
    parser.add_argument(
        "--server-args", default="", help="more llama-server flags, e.g. '-lv 4' (its trace: slot picks, RAM cache)"
    )
    parser.add_argument("--logs", type=Path, default=None, help="keep each server's log in this folder")
    args = parser.parse_args(argv)
    model = LlamaModel(resolve_model(args.model), vocab_only=True)
    try:

        def count_tokens(text: str) -> int:
            return len(model.tokenize(text.encode(), add_bos=True))

        most = max(int(u) for u in args.users.split(","))
        all_docs = team_documents(count_tokens, most)
        header_tokens = count_tokens(HEADER)
        doc_tokens = [count_tokens(text) for user in all_docs for text, _ in user]
    finally:
        model.close()
    results: dict[str, Any] = {
        "command": "python -m bench.team " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "model": str(resolve_model(args.model)), "server_model": str(resolve_model(args.server_model or args.model)), "header_chars": len(HEADER), "header_tokens": header_tokens,
        "doc_tokens_median": median(doc_tokens), "settings": f"defaults, modelServerTimeoutMs {args.timeout_ms}" + (f", model {args.model}" if args.model else ""), "runs": [],
    }  # fmt: skip
    settings: dict[str, Any] = {
        "modelServerTimeoutMs": args.timeout_ms,
        **({"model": args.model} if args.model else {}),
    }
    watch = CpuWatch.start()
    children = _children_cpu()
    started = time.perf_counter()
    say = lambda m: print(f"[team] {m}", flush=True)  # noqa: E731
    for name in args.variants.split(","):
        for users in (int(u) for u in args.users.split(",")):
            results["runs"].append(
                measure(
                    VARIANTS[name],
                    all_docs[:users],
                    settings,
                    args.threads,
                    say,
                    tuple(args.modes.split(",")),
                    args.server_model or args.model,
                    args.alone_all,
                    tuple(args.server_args.split()),
                    args.logs,
                )
            )
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    results["seconds"] = time.perf_counter() - started
    results["other_processes_cpu_share"] = watch.others_share(_children_cpu() - children)  # our servers are children
    if any("reuse_ratio" not in r for r in results["runs"]):
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        return 0
    checks = targets(results, args.chosen)
    results["targets"] = [{"target": n, "measured": v, "ok": ok} for n, v, ok in checks]
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(render(table(results)))
    print(render(targets_table(checks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
