"""How many alternatives are worth offering: `python -m bench.alternatives_count [--per-kind N]`.

On the mid-word quality cases (tests.support.cases: the author's word cut inside), the engine in this
process with the server's own split and request code, alternatives asked for: is the author's word
the suggestion's first word, or among the first k alternatives (k = 1..MAX)? And what finishing
them cost in decodes and time (the primary's cost is measured alone first, on a fresh prompt
each, so the difference is the alternatives' own). Results: bench/results/alternatives.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench import report
from bench.quality import first_word
from bench.stats import median
from lsp_server.settings import Settings
from tests.support.asking import alone, asked
from tests.support.cases import build_cases

MAX = 5
OUT = report.output_root() / "bench" / "results" / "alternatives.json"


def measure(engine, cases, max_tokens: int) -> dict:
    settings = alone(Settings(max_tokens=max_tokens))
    hits = [0] * (MAX + 1)  # hits[k]: the word is the first word or among the first k alternatives
    decodes, extra_ms = [], []
    for case in cases:
        document = case.document()
        step = asked(document, len(document), settings)
        parts, request = step.snapshot.parts, step.request
        engine.kv.forget()  # both runs cold, so the difference is the alternatives' own cost
        started = time.perf_counter()
        engine.complete(request)
        alone_ms = (time.perf_counter() - started) * 1000
        engine.kv.forget()
        started = time.perf_counter()
        completion = engine.complete(replace(request, alternatives=MAX))
        extra_ms.append((time.perf_counter() - started) * 1000 - alone_ms)
        decodes.append(completion.stats.alternative_decodes)
        typed = len(parts.required) - len(parts.word)  # the boundary whitespace before the word
        words = [first_word(completion.text[typed:])] + [first_word(a.text[typed:]) for a in completion.alternatives]
        for k in range(MAX + 1):
            hits[k] += case.word in words[: k + 1]
    n = len(cases)
    return {
        "cases": n,
        "right_within": {k: hits[k] / n for k in range(MAX + 1)},
        "alternative_decodes_median": median(decodes),
        "alternative_decodes_max": max(decodes, default=0),
        "extra_ms_median": median(extra_ms),
        "max_cover_decodes": settings.max_cover_decodes,
    }


def main(argv: list[str] | None = None) -> int:
    from bench.machine import CpuWatch
    from engine import Engine, EngineConfig

    parser = argparse.ArgumentParser(prog="python -m bench.alternatives_count", description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-kind", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    cases = build_cases(args.per_kind, args.seed)
    watch = CpuWatch.start()
    engine = Engine.load(EngineConfig(threads=args.threads))
    try:
        results = measure(engine, cases, args.max_tokens)
    finally:
        engine.close()
    results["other_processes_cpu_share"] = watch.others_share(0.0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1), file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
