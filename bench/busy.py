"""`python -m bench.busy` (or `python -m bench --only busy`): the same requests on an idle machine and
with one core kept busy by a spinning process that this bench starts and stops itself.

For each thread setting (`--variants`, default: `0` = the default, which follows the cores other
processes leave free, and `2` = a fixed two threads, what the default was before) one real server
over stdio, and per trial, idle then busy side by side:

- cold request: a freshly opened document of about 1,900 tokens (~7,000 characters of Python),
  prefetch off, one request at once: seconds from opening to the answer;
- fresh typing: another fresh document, typed at 8 characters a second the way VS Code does
  (bench.firstcontact), prefetch on: seconds from opening to the first suggestion;
- warm keystrokes: the next characters typed one by one into the warm document, one request each:
  median ms;
- CPU: the server's CPU-seconds (user + system) per 100 of those keystrokes, beside the peer's
  (llama-cpp-python's create_completion on the same keystrokes, idle machine, in this process).

Ratios are taken within one trial (busy over idle, typing over cold), then the median over trials.
How busy the machine was apart from the spinner is measured too (bench.machine). Results go to
bench/results/busy.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.firstcontact import Documents, set_prefetch, type_until_suggestion
from bench.machine import CpuWatch, process_cpu_seconds
from bench.stats import median, ratio
from tests.support.lsp_client import Editor, LspClient

RESULTS = report.output_root() / "bench" / "results" / "busy.json"
WARM_KEYS = 25


def _say(message: str) -> None:
    print(f"[busy] {message}", file=sys.stderr, flush=True)


def _spin() -> None:
    while True:
        pass


class Spinner:
    """One process spinning on one core, for as long as the `with` block lasts."""

    def __enter__(self) -> Spinner:
        self.process = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
        self.process.start()
        time.sleep(0.5)  # running, and seen by the server's core meter
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.join(5)


def _server(threads: int, max_tokens: int) -> tuple[LspClient, Editor]:
    log = Path(tempfile.gettempdir()) / f"cpc-lsp-busy-server-{threads}.log"
    client = LspClient(["--log-level", "warning"], stderr_path=log)
    client.initialize({"maxTokens": max_tokens, "threads": threads}, wait_loaded=True)
    editor = Editor(client)
    warm = "file:///bench/busy/warmup.txt"
    editor.open(warm, "The server is ready when this sentence gets an ans")
    editor.inline(warm)
    editor.close(warm)
    return client, editor


def _one(editor: Editor, docs: Documents, tag: str) -> dict[str, Any]:
    """Cold request, fresh typing and warm keystrokes, in this machine state."""
    watch = CpuWatch.start()
    server_start = process_cpu_seconds(editor.client.pid) or 0.0
    set_prefetch(editor, False)
    doc, following = docs.take()
    uri = f"file:///bench/busy/cold-{tag}.py"
    opened = time.perf_counter()
    editor.open(uri, doc)
    cold = editor.inline(uri, timeout=900).received - opened
    cpu0 = process_cpu_seconds(editor.client.pid) or 0.0
    warm = []
    for ch in following[:WARM_KEYS]:
        editor.type(uri, ch)
        warm.append(editor.inline(uri).ms)
    cpu = (process_cpu_seconds(editor.client.pid) or 0.0) - cpu0
    set_prefetch(editor, True)
    doc, typed = docs.take()
    typing, keys = type_until_suggestion(editor, f"file:///bench/busy/type-{tag}.py", doc, typed, 6 * cold + 10)
    others = watch.others_share((process_cpu_seconds(editor.client.pid) or 0.0) - server_start)
    out = {"others_share": others, "cold_s": cold, "typing_s": typing, "typing_keys": keys, "warm_ms": warm,
           "warm_median_ms": median(warm), "cpu_s_per_100_keys": 100 * cpu / len(warm)}  # fmt: skip
    _say(f"{tag}: others {100 * (others or 0):.0f}% of the CPUs (with the spinner when busy), cold {cold:.2f} s, typing {typing} s, warm median {out['warm_median_ms']:.1f} ms, "
         f"{out['cpu_s_per_100_keys']:.2f} CPU-s/100 keys")  # fmt: skip
    return out


def _peer_cpu(docs: Documents, max_tokens: int, threads: int) -> dict[str, Any]:
    from bench.latency import Peer
    from engine.model_files import resolve_model

    peer = Peer(str(resolve_model(None)), threads=threads)
    try:
        doc, following = docs.take()
        peer.complete(doc, max_tokens)  # its cold request, not counted
        start = os.times()
        ms = [peer.complete(doc + following[: k + 1], max_tokens)[0] for k in range(WARM_KEYS)]
        end = os.times()
    finally:
        peer.close()
    cpu = (end.user - start.user) + (end.system - start.system)
    return {"threads": threads, "warm_median_ms": median(ms), "cpu_s_per_100_keys": 100 * cpu / WARM_KEYS}


def run(variants: list[int], trials: int, max_tokens: int, peer: bool, tokens: int = 1900) -> dict[str, Any]:
    from engine.local.llama import LlamaModel
    from engine.model_files import resolve_model

    model = LlamaModel(resolve_model(None))
    docs = Documents(lambda text: len(model.tokenize(text.encode(), add_bos=True)), tokens)  # each one unique
    watch = CpuWatch.start()
    server_cpu = 0.0
    rows = []
    for threads in variants:
        client, editor = _server(threads, max_tokens)
        samples = []
        for trial in range(trials):
            idle = _one(editor, docs, f"t{threads}-idle{trial}")
            with Spinner():
                busy = _one(editor, docs, f"t{threads}-busy{trial}")
            samples.append({"idle": idle, "busy": busy})
        server_cpu += process_cpu_seconds(client.pid) or 0.0
        client.shutdown()
        rows.append({"threads": threads, "samples": samples, **_summary(samples)})
    peer_row = _peer_cpu(docs, max_tokens, variants[0]) if peer else None
    share = watch.others_share(server_cpu)
    return {"rows": rows, "peer": peer_row, "others_share": share, "cpus": os.cpu_count(), "trials": trials,
            "document_tokens": tokens}  # fmt: skip


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    def med(f):
        values = [f(s) for s in samples]
        values = [v for v in values if v is not None]
        return median(values) if values else None

    return {
        "cold_idle_s": med(lambda s: s["idle"]["cold_s"]),
        "cold_busy_s": med(lambda s: s["busy"]["cold_s"]),
        "cold_busy_over_idle": med(lambda s: ratio(s["busy"]["cold_s"], s["idle"]["cold_s"])),
        "typing_over_cold_idle": med(lambda s: ratio(s["idle"]["typing_s"], s["idle"]["cold_s"]) if s["idle"]["typing_s"] else None),
        "typing_over_cold_busy": med(lambda s: ratio(s["busy"]["typing_s"], s["busy"]["cold_s"]) if s["busy"]["typing_s"] else None),
        "warm_idle_ms": med(lambda s: s["idle"]["warm_median_ms"]),
        "warm_busy_ms": med(lambda s: s["busy"]["warm_median_ms"]),
        "warm_busy_over_idle": med(lambda s: ratio(s["busy"]["warm_median_ms"], s["idle"]["warm_median_ms"])),
        "cpu_idle": med(lambda s: s["idle"]["cpu_s_per_100_keys"]),
        "cpu_busy": med(lambda s: s["busy"]["cpu_s_per_100_keys"]),
    }  # fmt: skip


def tables(result: dict[str, Any]) -> list[report.Table]:
    num = report.num
    rows = []
    for r in result["rows"]:
        name = "default (0: follows free cores)" if r["threads"] == 0 else f"fixed {r['threads']}"
        rows.append([name, num(r["cold_idle_s"], 2), num(r["cold_busy_s"], 2), report.times(r["cold_busy_over_idle"]),
                     report.times(r["typing_over_cold_idle"]), report.times(r["typing_over_cold_busy"]),
                     num(r["warm_idle_ms"], 1), num(r["warm_busy_ms"], 1), report.times(r["warm_busy_over_idle"]),
                     num(r["cpu_idle"], 2), num(r["cpu_busy"], 2)])  # fmt: skip
    header = ["threads", "cold idle s", "cold busy s", "busy/idle", "typing/cold idle", "typing/cold busy",
              "warm p50 idle ms", "warm p50 busy ms", "busy/idle", "CPU-s/100 keys idle", "CPU-s/100 keys busy"]  # fmt: skip
    title = (f"busy machine: one of {result['cpus']} cores spinning vs idle, side by side "
             f"({result['trials']} trials, documents of {result['document_tokens']} tokens, medians of per-trial ratios)")  # fmt: skip
    out = [(title, header, rows)]
    if result.get("peer"):
        p = result["peer"]
        out.append((f"CPU-seconds per 100 warm keystrokes: the peer (create_completion, {p['threads'] or 'all'} threads, idle)",
                    ["peer warm p50 ms", "peer CPU-s/100 keys"], [[num(p["warm_median_ms"], 1), num(p["cpu_s_per_100_keys"], 2)]]))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.busy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="0,2", help="comma-separated threads settings (0: the default)")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--tokens", type=int, default=1900, help="size of each fresh document (1,900: ~7,000 characters)"
    )
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args(argv)
    variants = [int(v) for v in args.variants.split(",")]
    result = run(variants, args.trials, args.max_tokens, not args.no_peer, args.tokens)
    if result["others_share"] is not None:
        _say(f"other processes (besides the spinner) used {100 * result['others_share']:.0f}% of the CPUs")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    for table in tables(result):
        print(report.render(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
