"""Functional benchmark: a line of a real function cut inside a word, finished by the model, then
the function's own tests (`python -m bench.functional`).

Who it is for: someone choosing an inline completer for code, who wants to know how often the
line it finishes from a half-typed word actually works.

Cases: bench.humaneval (OpenAI's HumanEval, 164 functions with tests; one solution line per
function cut inside a word by a fixed rule; the rest of that line is what is asked for). These
sources are kept out of every tuning: nothing in the project (gate, lexicon prior, budgets) is
fitted on them, and nothing may be; the gate is fitted elsewhere (bench.gate_fit) and is off here.

Who answers, on the same cases:

- ours: the real language server (`python -m lsp_server` over stdio, as an editor runs it),
  `textDocument/inlineCompletion` at the cursor, one line (`multiLine` "off"), the gate off
  (`minConfidence` 0), `maxTokens` 64 (the longest rest of a line is 69 characters), no
  alternatives, no prefetch; `method` exact / mask / naive, each with the text after the cursor
  in the FIM prompt (the default FIM settings) and without it (`fimSuffixLines` 0). The
  suggestion (insertText minus the partial word) replaces the rest of the line;
- llama.vim: its own request to llama-server's `/infill` on the same GGUF (bench.infill: the
  typed part of the line as the raw `prompt`, its prefix/suffix lines, its samplers; llama-server
  started with `--seed 0` so the sampling repeats), and the same request with greedy sampling;
- the line restored: the original rest of the line (must pass 100%: checks the harness).

`--shared MODEL` adds the team setup: llama-server runs the bigger model, and our server uses it
through `modelServer` with `model` (the vocabulary) the same-tokenizer small GGUF; beside it,
llama.vim's request on the same server, and ours in-process on the small model, case by case.
Reported there: pass rate, median latency, HTTP round trips and the share of suggestions proven
exact (the engine's `fallback` is empty).

Results (merged per part): bench/results/functional.json. The page: docs/functional.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import report
from bench.humaneval import FunctionCase, cases, passes
from bench.infill import SEED_ARGS, InfillPeer
from bench.stats import median, ratio
from lsp_server.split import split
from tests.support.llama_server import LlamaServer
from tests.support.lsp_client import Editor, LspClient, insert_text

METHODS = ("exact", "mask", "naive")
MAX_TOKENS = 64
BASE = {"minConfidence": 0, "multiLine": "off", "maxTokens": MAX_TOKENS, "alternatives": 0, "prefetch": False}
CONFIGS = {  # name -> settings; ordered so each case's prompt stays in the KV cache from one to the next
    **{f"{m} + suffix": {"method": m, "fimSuffixLines": 8} for m in METHODS},
    **{f"{m}, no suffix": {"method": m, "fimSuffixLines": 0} for m in METHODS},
}
PEERS = ("llama.vim /infill", "llama.vim /infill, greedy")


def results_path() -> Path:
    return report.output_root() / "bench" / "results" / "functional.json"


def _client(settings: dict[str, Any]) -> LspClient:
    client = LspClient(["--log-level", "warning"])
    client.initialize({"cpcLsp": settings}, encoding="utf-8", wait_loaded=True, timeout=600)
    return client


def ask(editor: Editor, case: FunctionCase, uri: str, timeout: float = 600) -> dict[str, Any]:
    """Our suggestion at the case's cursor: what replaces the rest of the line, and the stats."""
    reply = editor.inline(uri, (case.line, len(case.before[case.before.rfind("\n") + 1 :].encode())), timeout)
    stats = editor.stats() or {}
    text = insert_text(reply)
    word = split(case.document, case.cursor).word
    inserted = "" if text is None else (text[len(word) :] if text.startswith(word) else None)
    if inserted is None:  # an item that rewrites the typed word: apply its range as an editor would
        start = reply.result["items"][0]["range"]["start"]["character"] if isinstance(reply.result, dict) else 0
        line_start = case.before.rfind("\n") + 1
        typed = case.before[line_start:].encode()
        kept = typed[:start].decode(errors="replace")
        inserted = None if not (kept + text).startswith(typed.decode()) else (kept + text)[len(typed.decode()) :]
    return {
        "inserted": inserted or "", "ms": reply.ms, "error": reply.error,
        "decoded": stats.get("decodedTokens"), "cover_decodes": stats.get("coverDecodes"),
        "fallback": stats.get("fallback"), "round_trips": stats.get("roundTrips"), "stop": stats.get("stopReason"),
        "required_satisfied": stats.get("requiredSatisfied"),
    }  # fmt: skip


def judged(case: FunctionCase, row: dict[str, Any]) -> dict[str, Any]:
    ok, why = passes(case, row["inserted"])
    return {**row, "pass": ok, "why": why}


def configure(client: LspClient, settings: dict[str, Any]) -> None:
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": settings}})
    client.call("cpcLsp/stats", None)  # a round trip: the settings are applied before what follows


def run_main(args: argparse.Namespace, todo: list[FunctionCase], out: dict[str, Any], save: Callable[[], None],
             say: Callable[[str], None]) -> None:  # fmt: skip
    """Ours (six configurations), llama.vim's request (sampled as sent, and greedy), the line restored."""
    part = out.setdefault("main", {"model": args.model, "threads": args.threads, "cases": {}})
    client = _client({**BASE, "model": args.model, "threads": args.threads})
    server = LlamaServer(slots=1, model=args.model, threads=args.threads, extra_args=SEED_ARGS).start(600)
    peer = InfillPeer(server, slot=0)
    part["llama_server"] = server.command()[1:]
    try:
        editor = Editor(client, encoding="utf-8")
        for n, case in enumerate(todo):
            done = part["cases"].get(case.task_id)
            redo = [name for name in args.redo if done is not None and name in CONFIGS]
            if done is not None and not redo:
                continue
            row: dict[str, Any] = done or {
                "word": case.word,
                "typed": case.before[case.before.rfind("\n") + 1 :],
                "rest": case.rest,
            }
            row["line restored"] = judged(case, {"inserted": case.rest})
            uri = f"file:///bench/functional/{case.task_id.replace('/', '_')}.py"
            editor.open(uri, case.document, "python")
            for name, settings in CONFIGS.items():
                if done is None or name in redo:
                    configure(client, settings)
                    row[name] = judged(case, ask(editor, case, uri))
            editor.close(uri)
            for name, greedy in zip(PEERS, (False, True)):
                if done is not None:
                    break
                ms, line, answer = peer.llama_vim(case.document, case.cursor, greedy=greedy)
                row[name] = judged(case, {"inserted": line, "ms": ms, "content": answer.get("content"),
                                          "prompt_n": answer.get("timings/prompt_n")})  # fmt: skip
            part["cases"][case.task_id] = row
            save()
            say(f"{n + 1}/{len(todo)} {case.task_id}: " + " ".join(
                f"{k.split(' ')[0][:5]}{'+' if 'no suffix' not in k else '-'}={'P' if v['pass'] else '.'}"
                for k, v in row.items() if isinstance(v, dict)))  # fmt: skip
    finally:
        peer.close()
        server.stop()
        client.shutdown()


def run_shared(args: argparse.Namespace, todo: list[FunctionCase], out: dict[str, Any], save: Callable[[], None],
               say: Callable[[str], None]) -> None:  # fmt: skip
    """The bigger model on llama-server: ours remote, llama.vim's request on it, ours in-process on the small one."""
    part = out.setdefault("shared", {"server_model": args.shared, "vocabulary": args.model, "local_model": args.model,
                                     "threads": args.threads, "cases": {}})  # fmt: skip
    server = LlamaServer(slots=2, model=args.shared, threads=args.threads, extra_args=SEED_ARGS).start(600)
    part["llama_server"] = server.command()[1:]
    settings = {**BASE, **CONFIGS["exact + suffix"], "threads": args.threads}
    remote = _client({**settings, "model": args.model, "modelServer": server.url, "modelServerTimeoutMs": 120000})
    local = _client({**settings, "model": args.model})
    peer = InfillPeer(server, slot=1)
    try:
        editors = {"ours remote": Editor(remote, "utf-8"), "ours in-process": Editor(local, "utf-8")}
        for n, case in enumerate(todo):
            if case.task_id in part["cases"]:
                continue
            row: dict[str, Any] = {
                "word": case.word,
                "typed": case.before[case.before.rfind("\n") + 1 :],
                "rest": case.rest,
            }
            uri = f"file:///bench/shared/{case.task_id.replace('/', '_')}.py"
            for name, editor in editors.items():
                editor.open(uri, case.document, "python")
                row[name] = judged(case, ask(editor, case, uri))
                editor.close(uri)
            ms, line, answer = peer.llama_vim(case.document, case.cursor)
            row["llama.vim /infill"] = judged(case, {"inserted": line, "ms": ms, "content": answer.get("content"),
                                                     "prompt_n": answer.get("timings/prompt_n")})  # fmt: skip
            part["cases"][case.task_id] = row
            save()
            say(f"shared {n + 1}/{len(todo)} {case.task_id}: " + " ".join(
                f"{k}={'P' if v['pass'] else '.'}({v['ms'] / 1000:.1f}s)" for k, v in row.items() if isinstance(v, dict)))  # fmt: skip
    finally:
        peer.close()
        for client in (remote, local):
            client.shutdown()
        server.stop()


# --- summaries and tables ----------------------------------------------------------------------


def summary(part: dict[str, Any]) -> list[dict[str, Any]]:
    rows = list(part["cases"].values())
    names = [k for k in (rows[0] if rows else {}) if isinstance(rows[0][k], dict)]
    out = []
    for name in names:
        got = [r[name] for r in rows if name in r]
        trips = [g["round_trips"] for g in got if g.get("round_trips") is not None]
        engine = [g for g in got if "fallback" in g]
        out.append({
            "who": name, "cases": len(got), "passed": sum(g["pass"] for g in got),
            "pass_rate": sum(g["pass"] for g in got) / len(got) if got else None,
            "median_ms": median([g["ms"] for g in got if g.get("ms") is not None]),
            "round_trips_median": median(trips), "round_trips_mean": sum(trips) / len(trips) if trips else None,
            "proven_exact": (sum(g["fallback"] is None for g in engine) / len(engine)) if engine else None,
            "empty": sum(not g["inserted"] for g in got),
        })  # fmt: skip
    return out


def _shares(s: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["who"]: r for r in s}


def tables(out: dict[str, Any]) -> list[report.Table]:
    found = []
    if out.get("main", {}).get("cases"):
        by = _shares(summary(out["main"]))
        peer = by.get(PEERS[0], {}).get("pass_rate")
        # No latency here: the six configurations of a case share its prompt's KV (each but the
        # first of a layout reuses it), so their times say nothing of one another.
        found.append((
            f"functional: HumanEval lines cut inside a word, the function's tests pass ({Path(str(out['main']['model'])).name})",
            ["who", "cases", "passed", "pass rate", "vs llama.vim /infill", "no suggestion"],
            [[r["who"], report.num(r["cases"]), report.num(r["passed"]), report.pct(r["pass_rate"]),
              report.times(ratio(r["pass_rate"], peer)) if r["who"] not in PEERS[:1] else "",
              report.num(r["empty"])] for r in by.values()],
        ))  # fmt: skip
    if out.get("shared", {}).get("cases"):
        sh = out["shared"]
        s = summary(sh)
        found.append((
            f"functional, shared server: {Path(str(sh['server_model'])).name} on llama-server vs {Path(str(sh['local_model'])).name} in-process",
            ["who", "cases", "passed", "pass rate", "median ms", "round trips med / mean", "proven exact", "no suggestion"],
            [[r["who"], report.num(r["cases"]), report.num(r["passed"]), report.pct(r["pass_rate"]),
              report.num(r["median_ms"], 0),
              f"{report.num(r['round_trips_median'], 1)} / {report.num(r['round_trips_mean'], 2)}" if "ours remote" == r["who"] else "-",
              report.pct(r["proven_exact"]) if r["who"] == "ours remote" else "-", report.num(r["empty"])] for r in s],
        ))  # fmt: skip
    return found


def print_tables(out: dict[str, Any], markdown: bool = False) -> None:
    for table in tables(out):
        print(("\n" + report.markdown(table)) if markdown else ("\n" + report.render(table)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.functional", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="catalogue name or GGUF path (needs FIM tokens)")
    parser.add_argument("--limit", type=int, default=None, help="the first N HumanEval problems (default: all 164)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="main", help="parts: main, shared (comma-separated)")
    parser.add_argument(
        "--shared", default="qwen2.5-coder-1.5b", help="the model llama-server runs for the shared part"
    )
    parser.add_argument("--shared-limit", type=int, default=None, help="the first N problems for the shared part")
    parser.add_argument(
        "--out", type=Path, default=None, help="results JSON (merged per part; default bench/results/functional.json)"
    )
    parser.add_argument(
        "--redo",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        default=[],
        help='configurations to measure again for cases already in the file (e.g. "naive + suffix")',
    )
    parser.add_argument(
        "--fresh", action="store_true", help="start the parts anew instead of resuming from the results file"
    )
    parser.add_argument("--render", action="store_true", help="measure nothing: print the results file's tables")
    parser.add_argument(
        "--markdown", action="store_true", help="with --render: the tables as markdown (docs/functional.md)"
    )
    args = parser.parse_args(argv)
    path = args.out or results_path()
    out: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if args.render:
        print_tables(out, args.markdown)
        return 0
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if args.fresh:
        for p in parts:
            out.pop(p, None)
    path.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        for key in ("main", "shared"):
            if key in out:
                out[key]["summary"] = summary(out[key])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        os.replace(tmp, path)

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    all_cases = cases()
    out["cases_total"] = len(all_cases)
    out["command"] = "python -m bench.functional " + " ".join(sys.argv[1:] if argv is None else argv)
    if "main" in parts:
        run_main(args, all_cases[: args.limit], out, save, say)
    if "shared" in parts:
        run_shared(args, all_cases[: args.shared_limit or args.limit], out, save, say)
    save()
    print_tables(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
