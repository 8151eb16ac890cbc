"""The remote backend against the in-process engine, engine to engine, on one llama-server.

    python -m bench.remote_engine [--url URL] [--cases 200] [--keystrokes 40] [--cancels 10]

- equality: the seed examples and `--cases` mid-word cases (tests.support.cases, 1/4 of each kind), each
  asked with the language server's own pipeline (`tests.support.asking`: split and request, one line),
  greedy, of both engines; the cases that differ are listed with the reason the stats show;
- keystrokes: typing the rest of a word letter by letter into the remote engine, round trips and
  bytes per keystroke (median, p90) and how many keystrokes needed no request at all;
- cancel: a long generation cancelled from another thread, then the time until GET /slots shows
  the slot idle (median, max).

Without `--url` it starts its own llama-server (tests.support.llama_server: default model, 4 slots).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from dataclasses import replace

from engine import CompletionRequest, Engine, EngineConfig, SamplingConfig
from tests.support.equality import case_requests, compare, seed_requests


def keystrokes(remote: Engine, requests, words: int) -> dict:
    """From each case's cursor, type the rest of its word letter by letter (the prompt stays the
    same inside a word); round trips and bytes per keystroke after the first."""
    trips, sent, received = [], [], []
    for _label, request, typed, word in requests[:words]:
        lead = request.required[: len(request.required) - len(typed)]
        remote.complete(request)
        for k in range(len(typed) + 1, len(word) + 1):
            step = remote.complete(replace(request, required=lead + word[:k]))
            trips.append(step.stats.round_trips)
            sent.append(step.stats.bytes_sent)
            received.append(step.stats.bytes_received)
    if not trips:
        return {}
    q = statistics.quantiles(trips, n=10) if len(trips) > 1 else [trips[0]] * 9
    return {
        "keystrokes": len(trips), "round_trips_median": statistics.median(trips), "round_trips_p90": q[8],
        "round_trips_mean": statistics.fmean(trips), "no_request": sum(t == 0 for t in trips),
        "bytes_sent_median": statistics.median(sent), "bytes_received_median": statistics.median(received),
    }  # fmt: skip


def slots_busy(url: str) -> bool:
    with urllib.request.urlopen(url + "/slots", timeout=5) as answer:
        return any(slot.get("is_processing") for slot in json.load(answer))


def cancels(remote: Engine, url: str, n: int) -> dict:
    """A long multi-line generation cancelled once tokens flow; ms until no slot is processing."""
    idle_ms = []
    sampling = SamplingConfig(single_line=False)
    for i in range(n):
        request = CompletionRequest(
            f"Chapter {i}. It was a dark and stormy night; the rain fell in", "", max_tokens=400, sampling=sampling
        )
        cancel = threading.Event()
        timer = threading.Timer(0.3, cancel.set)
        timer.start()
        remote.complete(request, cancel)
        timer.join()
        cancelled_at = time.monotonic()
        while slots_busy(url) and time.monotonic() - cancelled_at < 5:
            time.sleep(0.002)
        idle_ms.append((time.monotonic() - cancelled_at) * 1000)
    return {"cancels": n, "idle_ms_median": statistics.median(idle_ms), "idle_ms_max": max(idle_ms)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--keystrokes", type=int, default=40, help="words typed letter by letter")
    parser.add_argument("--cancels", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="the remote engine's request budget")
    args = parser.parse_args(argv)
    server = None
    url = args.url
    if not url:
        from tests.support.llama_server import start_llama_server

        # No prompt cache in RAM: with it the server restores prompts the in-process engine (four
        # documents, no such cache) decodes again, in other ubatches, so numbers differ slightly.
        server = start_llama_server(slots=4, threads=args.threads, extra_args=("--cache-ram", "0"))
        url = server.url
    try:
        local = Engine.load(EngineConfig(threads=args.threads))
        remote = Engine.load(EngineConfig(model_server=url, model_server_timeout_s=args.timeout_s))
        report = {"seeds": compare(local, remote, [(r.prompt + "|" + r.required, r) for r in seed_requests()])}
        requests = case_requests(args.cases, args.max_tokens) if args.cases else []
        if requests:
            report["cases"] = compare(local, remote, requests)
        if args.keystrokes and requests:
            report["keystrokes"] = keystrokes(remote, requests, args.keystrokes)
        if args.cancels:
            report["cancel"] = cancels(remote, url, args.cancels)
        print(json.dumps(report, indent=1, ensure_ascii=False))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
