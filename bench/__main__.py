"""`python -m bench [--quick]`: how fast, how good, compared with what. Prints one table per concern.

Order (one thing at a time, so measurements do not compete for the cores):
1. engine, in this process: constrained step vs a pass over the vocabulary, prompt decode cold vs
   warm, and the naive / mask / exact suggestions on the quality cases;
2. the real server (`python -m lsp_server`) over stdio: keystrokes next to the peer, cancellation,
   the exact method on the quality cases (with its covering-search decodes), peak memory;
3. `remote`: the server with `modelServer` on a llama-server over loopback, beside the in-process
   server and llama.vim's request on the same llama-server (bench/remote_vs_local.py);
4. `multi`: two llama-servers, as a list in `modelServer` and behind nginx: documents spread,
   prompt reuse against one server, a server killed mid-typing and back (bench/multi_server.py).
Results go to bench/results/latest.json (quick: quick.json); a full run also writes the plots
under docs/ and the README snippet docs/results.md. Those paths are in the source checkout when
the benchmarks run from one, else in the current directory (`bench.report.output_root`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import report
from bench.machine import CpuWatch, process_cpu_seconds
from bench.stats import maximum, median
from lsp_server.settings import Settings
from tests.support.cases import build_cases, fingerprint

ROOT = report.output_root()  # the checkout, else the current directory (not site-packages)
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"
PARTS = ("engine", "keystrokes", "cancel", "quality", "replay", "remote", "multi")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small samples, about a minute on 2 idle cores")
    parser.add_argument(
        "--only",
        default=",".join(PARTS),
        help=f"comma-separated parts to run, of {','.join(PARTS)}; or busy alone (bench.busy); "
        "or models alone (bench.models: every catalogue model side by side, bench/results/models.json); "
        "or team alone (bench.team, then bench.tail: users sharing one llama-server, bench/results/team.json and tail.json); "
        "or tail alone",
    )
    parser.add_argument("--no-latency", action="store_true", help="with --only models: no latency")
    parser.add_argument("--no-quality", action="store_true", help="with --only models: no first-word quality")
    parser.add_argument("--no-replay", action="store_true", help="with --only models: no typing replay")
    parser.add_argument(
        "--replay-per-kind",
        type=int,
        default=2,
        help="with --only models: replay passages per kind of text (python, javascript, c, prose)",
    )
    parser.add_argument(
        "--replay-chars", type=int, default=240, help="with --only models: about this many characters a passage"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="the model: a catalogue name (engine.catalogue) or a GGUF path, for the server and the "
        "in-process engine (default: the server's default); with --only models, a comma-separated "
        "list of names (default: the whole catalogue)",
    )
    parser.add_argument(
        "--per-kind", type=int, default=None, help="quality cases per kind of text (default 50, quick 1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="case selection seed")
    parser.add_argument("--quality-max-tokens", type=int, default=8, help="token budget of quality requests")
    parser.add_argument(
        "--max-tokens", type=int, default=16, help="token budget of keystroke requests (ours and the peer's)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads for the server, the peer and the in-process engine alike (0: all cores)",
    )
    parser.add_argument("--no-peer", action="store_true", help="skip llama-cpp-python's create_completion")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON file (default bench/results/latest.json, quick.json)"
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="re-measure only the --only parts and merge them into the results file (a full run's)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: print the tables of the results file and rewrite its plots and snippet",
    )
    parser.add_argument("--plots", action=argparse.BooleanOptionalAction, default=None,
                        help="write docs/*.png and docs/results.md (default: on for a full run of every part)")  # fmt: skip
    return parser


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _engine_part(engine, cases, args, parts, results: dict[str, Any]) -> list:
    from bench import engine_costs, quality
    from lsp_server.split import split

    if "engine" in parts:
        requireds = []
        for case in cases:
            doc = case.document()
            required = split(doc, len(doc)).required.encode()
            if required not in requireds:
                requireds.append(required)
        _say(f"constrained step vs vocabulary pass ({len(requireds)} prefixes)")
        results["constrained_step"] = engine_costs.constrained_step(engine, requireds, args.quick)
        _say("prompt decode cold vs warm")
        results["prompt_decode"] = engine_costs.prompt_decode(engine, args.quick)
    if "quality" not in parts:
        return []
    _say(f"quality through the engine: naive, mask, exact ({len(cases)} cases)")
    return quality.run_engine(engine, cases, args.quality_max_tokens)


def _start_server(args):
    """The server starts first: it loads its model while this process loads its own."""
    from tests.support.lsp_client import LspClient

    log = Path(tempfile.gettempdir()) / "cpc-lsp-bench-server.log"
    client = LspClient(["--log-level", "warning", *(["--model", args.model] if args.model else [])], stderr_path=log)
    client.initialize({"maxTokens": args.max_tokens, "threads": args.threads})
    return client


def _server_part(client, cases, args, parts, results: dict[str, Any], count_tokens, model_path: str) -> list:
    from bench import latency, quality
    from tests.support.lsp_client import Editor, peak_rss_mb

    editor = Editor(client)
    outcomes: list = []
    warmup = "file:///bench/warmup.txt"  # waits for the model if it is still loading
    editor.open(warmup, "The server is ready when this sentence gets an ans")
    editor.inline(warmup)
    editor.close(warmup)
    if "keystrokes" in parts:
        peer = None
        if not args.no_peer:
            _say("loading the peer (llama-cpp-python Llama)")
            peer = latency.Peer(model_path)
        _say("keystrokes through the server, side by side with the peer")
        try:
            results["keystrokes"] = latency.keystrokes(editor, peer, count_tokens, args.max_tokens, args.quick)
        finally:
            if peer is not None:
                peer.close()
    if "cancel" in parts:
        _say("cancellation")
        results["cancel"] = latency.cancellation(editor, count_tokens, args.quick)
    if "replay" in parts:
        results["replay"] = _replay(editor, cases, args, model_path)
    if "quality" in parts:
        _say(f"quality through the server: exact ({len(cases)} cases)")
        settings = {"cpcLsp": {"maxTokens": args.quality_max_tokens}}
        client.notify("workspace/didChangeConfiguration", {"settings": settings})
        outcomes = quality.run_server(editor, cases)
    results["server_cpu_s"] = process_cpu_seconds(client.pid)
    results["memory"] = {
        "peak_rss_mib": peak_rss_mb(client.pid),
        "model_mib": Path(model_path).stat().st_size / 2**20,
        "when": f"after: {', '.join(p for p in parts if p != 'engine')}",
    }
    return outcomes


def _replay(editor, cases, args, model_path: str) -> dict[str, Any]:
    """The typing replay (bench/replay.py) on files neither quality set uses, the gate off and at its default."""
    from bench import latency, replay
    from tests.support.cases import build_cases, check_cases

    tuning = cases if len(cases) >= 200 else build_cases(50, args.seed)
    items = replay.passages(1 if args.quick else 2, replay.used_files(tuning, check_cases(50, tuning)),
                            chars=60 if args.quick else replay.PASSAGE_CHARS)  # fmt: skip
    if args.quick:
        items = items[-1:]  # one short prose passage
    base = {"maxTokens": args.max_tokens}
    variants = {"gate default": {**base, "minConfidence": None}}  # null: the model's own threshold
    if not args.quick:  # quick: the default server only, at the end and in place
        variants = {"gate off": {**base, "minConfidence": 0.0}, **variants}
    peer = None if args.no_peer else latency.Peer(model_path, threads=args.threads or None)
    _say(f"typing replay: {len(items)} passages, {sum(len(p.text) for p in items)} characters")
    try:
        return replay.run(editor, peer, items, args.max_tokens, variants, say=_say)
    finally:
        if peer is not None:
            peer.close()


def _cover(outcomes) -> dict[str, Any]:
    decodes = [o.cover_decodes for o in outcomes if o.via == "server" and o.cover_decodes is not None]
    return {
        "cases": len(decodes),
        "median": median(decodes),
        "max": maximum(decodes),
        "zero_share": sum(d == 0 for d in decodes) / len(decodes) if decodes else None,
        "budget": Settings().max_cover_decodes,
    }


def _targets(results: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    checks: list[tuple[str, str, bool | None]] = []
    if "constrained_step" in results:
        us = results["constrained_step"]["indexed_us"]
        checks.append(("constrained step <= 50 µs", f"{us:.1f} µs", us <= 50))
    if "keystrokes" in results:
        big = results["keystrokes"][-1]
        at = f"at {report.num(big['tokens'], 0)} tokens"
        r, c = big["warm_over_peer"], big["cold_over_warm"]
        checks.append((f"warm median <= 0.8x peer's {at}", report.times(r), None if r is None else r <= 0.8))
        checks.append((f"cold >= 5x warm median {at}", report.times(c), None if c is None else c >= 5))
        decoded = [row["warm_decoded_prompt_tokens_max"] for row in results["keystrokes"]]
        worst = maximum([d for d in decoded if d is not None])
        checks.append(("a warm keystroke decodes 0 prompt tokens", f"max {worst}", worst == 0))
    if "replay" in results:
        rows = {(r["who"], r["where"]): r for r in results["replay"]["table"] if r["kind"] == "all"}
        precision = {(r["who"], r["where"]): r["precision"] for r in results["replay"].get("cursors", [])
                     if r["kind"] == "all" and r["cursor"] == "all"}  # fmt: skip
        for who, where in sorted(k for k in rows if k[0] != "peer"):
            r = rows[(who, where)]
            name = f"replay, {who}, {where}:"
            off = rows.get(("server gate off", where))
            if (
                who == "server gate default"
                and off is not None
                and precision.get((who, where))
                and precision.get(("server gate off", where))
            ):
                gain = precision[(who, where)] / precision[("server gate off", where)]
                checks.append((f"{name} precision >= 1.5x the gate off's", report.times(gain), gain >= 1.5))
                kept = r["not_typed"] / off["not_typed"] if off["not_typed"] else None
                checks.append(
                    (f"{name} not typed >= 0.8x the gate off's", report.times(kept), kept is not None and kept >= 0.8)
                )
            if r["saved_over_peer"] is not None:
                checks.append(
                    (
                        f"{name} not typed >= 1.5x peer's",
                        report.times(r["saved_over_peer"]),
                        r["saved_over_peer"] >= 1.5,
                    )
                )
                checks.append(
                    (f"{name} median latency <= 0.5x peer's", report.times(r["ms_over_peer"]), r["ms_over_peer"] <= 0.5)
                )
    if "remote" in results:
        from bench import remote_vs_local as remote

        checks += remote.targets(results["remote"])
    if "multi" in results:
        from bench import multi_server as multi

        checks += multi.targets(results["multi"])
    if "quality" in results:
        for row in results["quality"]["rows"]:
            if row["method"] in ("mask", "exact"):
                b = row["begins_with_typed"]
                checks.append((f"{row['method']}: suggestions begin with what was typed", report.pct(b), b == 1.0))
    return checks


def _tables(results: dict[str, Any], args) -> list[report.Table]:
    tables = []
    if "keystrokes" in results:
        tables.append(report.latency_table(results["keystrokes"], args.max_tokens, _threads(results, "keystrokes")))
    if "constrained_step" in results:
        tables.append(report.step_table(results["constrained_step"]))
    if "cover_decodes" in results:
        tables.append(report.cover_table(results["cover_decodes"]))
    if "prompt_decode" in results:
        tables.append(report.decode_table(results["prompt_decode"]))
    if "cancel" in results:
        tables.append(report.cancel_table(results["cancel"]))
    if "memory" in results:
        tables.append(report.memory_table(results["memory"]))
    if "quality" in results:
        tables.append(report.quality_table(results["quality"], args.quality_max_tokens))
    if "replay" in results:
        from bench import replay

        tables.append(replay.table(results["replay"]["table"]))
        if "positions" in results["replay"]:
            tables.append(replay.position_table(results["replay"]["positions"]))
        if "cursors" in results["replay"]:
            tables.append(replay.cursor_table(results["replay"]["cursors"]))
    if "remote" in results:
        from bench import remote_vs_local as remote

        tables += remote.tables(results["remote"])
    if "multi" in results:
        from bench import multi_server as multi

        tables += multi.tables(results["multi"])
    checks = _targets(results)
    if checks:
        tables.append(report.targets_table(checks))
    return tables


def _threads(results: dict[str, Any], part: str) -> int | None:
    for run in results.get("runs", []):
        if part in run["parts"]:
            return run.get("threads")
    return None


def _notes(results: dict[str, Any]) -> list[str]:
    notes = []
    if "quality" in results:
        notes.append(
            "naive and mask run through the engine with the server's own split/request/suggestion code (faster "
            "than a server round trip per case; the server's method setting runs them too); exact runs through the real server over LSP; the "
            "server's and the engine's exact suggestions have the same first word in "
            f"{results['quality']['server_matches_engine_first_word']} cases and are identical in "
            f"{results['quality']['server_matches_engine']} (greedy choices that are close calls can flip with the "
            "KV cache's history, since batch splits move logits slightly)"
        )
    if "keystrokes" in results:
        rows = results["keystrokes"]
        along = sum(r["warm_along_keystrokes"] for r in rows)
        off = sum(r["warm_off_keystrokes"] for r in rows)
        ratios = [f"{r['warm_off_median_ms'] / r['peer_warm_median_ms']:.2f}x at {r['tokens']:.0f}" for r in rows
                  if r["warm_off_median_ms"] is not None and r["peer_warm_median_ms"]]  # fmt: skip
        notes.append(
            f"{along} of {along + off} warm keystrokes typed the next letter of the previous suggestion (typing "
            "along): the engine had computed those rows already. The other "
            f"{off} decoded a new suggestion; their median against the peer's warm median: "
            f"{', '.join(ratios) or '-'} tokens"
        )
    for run in results.get("runs", []):
        share = run.get("other_processes_cpu_share")
        if share is None:
            continue
        what = f"while measuring {', '.join(run['parts'])}" if len(results["runs"]) > 1 else "during this run"
        note = f"other processes used {100 * share:.0f}% of the {results['machine']['cpus']} CPUs {what}"
        if set(run["parts"]) <= {"quality"}:
            note += " (no time is reported from it)"
        elif share > 0.10:
            note += (": absolute times are inflated (llama.cpp threads suffer badly when CPUs are shared); "
                     "compare the ratios, which were measured side by side")  # fmt: skip
        notes.append(note)
    return notes


def _measure(args, parts, cases, results: dict[str, Any]) -> None:
    """Run `parts` and put what they measured into `results`."""
    from engine import Engine, EngineConfig

    watch = CpuWatch.start()
    started = time.perf_counter()
    client = _start_server(args) if set(parts) - {"engine", "remote", "multi"} else None
    engine = None
    try:
        engine = Engine.load(EngineConfig(model_path=args.model or None, threads=args.threads or None))
        results["model"] = str(engine.model_path)
        results["model_id"] = engine.model_id
        outcomes = _engine_part(engine, cases, args, parts, results)
        if client is not None:
            outcomes += _server_part(client, cases, args, parts, results, engine.count_tokens, results["model"])
        if "remote" in parts:
            from bench import remote_vs_local as remote

            if client is not None:  # one language server at a time on the cores
                client.shutdown()
                client = None
            results["remote"] = remote.run(args, cases, engine.count_tokens, _say)
        if "multi" in parts:
            from bench import multi_server as multi

            if client is not None:
                client.shutdown()
                client = None
            results["multi"] = multi.run(args, engine.count_tokens, _say)
    finally:
        if client is not None:
            client.shutdown()
        if engine is not None:
            engine.close()
    if "quality" in parts:
        from bench import quality

        results["quality"] = quality.summarize(outcomes, cases)
        results["quality"]["outcomes"] = quality.outcomes_json(outcomes)
        results["cover_decodes"] = _cover(outcomes)
    results.setdefault("runs", []).append({
        "parts": list(parts),
        "seconds": time.perf_counter() - started,
        "other_processes_cpu_share": watch.others_share(results.pop("server_cpu_s", None) or 0.0),
        "threads": args.threads or os.cpu_count(),
    })  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.only == "busy":  # its own servers and spinner: bench.busy (not part of a full run)
        from bench import busy

        return busy.main(["--no-peer"] if args.no_peer else [])
    if args.only in (
        "team",
        "tail",
    ):  # a team on one llama-server (bench.team), the tail of warm keystrokes (bench.tail)
        from bench import tail, team

        code = team.main([]) if args.only == "team" else 0
        return code or tail.main(["--quick"] if args.quick else [])
    if args.only == "models":  # every catalogue model through its own server (not part of a full run)
        from bench import models

        return models.main(
            args,
            build_cases(args.per_kind or (1 if args.quick else 50), args.seed),
            _say,
            args.out or RESULTS / ("models-quick.json" if args.quick else "models.json"),
        )
    parts = tuple(p for p in PARTS if p in args.only.split(","))
    per_kind = args.per_kind or (1 if args.quick else 50)
    full = not args.quick and (parts == PARTS or args.update or args.render)
    plots = full if args.plots is None else args.plots
    out = args.out or RESULTS / ("latest.json" if full else "quick.json")
    started = time.perf_counter()

    cases = build_cases(per_kind, args.seed)
    command = "python -m bench" + (" --quick" if args.quick else "")
    if args.update or args.render:
        results = json.loads(out.read_text())
        if results["cases"]["fingerprint"] != fingerprint(cases):
            print(f"bench: {out} was measured on other cases; run without --update", file=sys.stderr)
            return 2
        measured = () if args.render else parts
        kept = []
        for run in results.get("runs", []):  # earlier runs now stand only for the parts not measured again
            run["parts"] = [p for p in run["parts"] if p not in measured]
            if run["parts"]:
                kept.append(run)
        results["runs"] = kept
        if "quality" in results and "quality" not in measured:  # summarise again with today's summary code
            from bench import quality

            outcomes = quality.outcomes_from_json(results["quality"]["outcomes"])
            results["quality"] = {**quality.summarize(outcomes, cases), "outcomes": results["quality"]["outcomes"]}
    else:
        results = {
            "command": command,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "cases": {
                "count": len(cases),
                "per_kind": per_kind,
                "seed": args.seed,
                "fingerprint": fingerprint(cases),
                "list": [asdict(c) for c in cases],
            },  # fmt: skip
        }
    if not args.render:
        _say(f"{len(cases)} quality cases (fingerprint {results['cases']['fingerprint']}); parts: {', '.join(parts)}")
        _measure(args, parts, cases, results)
    checks = _targets(results)
    results["targets"] = [{"target": n, "measured": v, "ok": ok} for n, v, ok in checks]
    results["notes"] = notes = _notes(results)

    tables = _tables(results, args)
    print("\n\n".join(report.render(t) for t in tables))
    print()
    for note in notes:
        print(f"note: {note}")
    print(f"{len(cases)} quality cases, fingerprint {results['cases']['fingerprint']}; "
          f"{time.perf_counter() - started:.0f} s; results in {out}")  # fmt: skip
    report.write_json(out, results)
    if plots and "keystrokes" in results and "quality" in results:
        from bench import plots as plotting

        made = [
            plotting.latency_plot(results["keystrokes"], DOCS / "latency.png"),
            plotting.accuracy_plot(results["quality"], DOCS / "accuracy.png"),
        ]
        links = [str(p.relative_to(ROOT)) for p in made]
        updates = [run["parts"] for run in results["runs"][1:]]
        # links relative to docs/results.md itself, so the page shows its plots where it is
        report.write_markdown(DOCS / "results.md", tables, command, [p.name for p in made], notes, updates)
        print(f"plots: {', '.join(links)}; README snippet: docs/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
