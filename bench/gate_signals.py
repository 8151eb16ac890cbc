"""Why the headline's gate decides differently remote and in-process: the gate's inputs side by side.

`python -m bench.gate_signals [RESULT]` reads a headline result (bench.remote_vs_local, default
bench/results/remote_headline-gemma-3-270m.json), takes the held-out cases whose suggestions
differed with the gate on, and asks each of them of an in-process engine and of a remote one
(llama-server as bench.remote_vs_local starts it) from a cold cache, engine to engine. Printed per case:
the completion, what the model's gate shows of it, and the signals the gate reads
(engine.signals: the margin, the log-probability of the typed prefix, the first word ends'
log-probabilities given it), then how many cases have the same completion, the same signals (to
0.01: two programs computing the same logits differ by about 0.001) and the same shown text.
`--cases 7,49` asks those cases instead, `--all` every case. Nothing is fitted: it is a lens for
one question. Results: bench/results/gate_signals.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.remote_vs_local import SLOTS, headline_cases
from tests.support.llama_server import start_llama_server

RESULT = Path(__file__).parent / "results" / "remote_headline-gemma-3-270m.json"
OUT = Path(__file__).parent / "results" / "gate_signals.json"
NOISE = 0.01  # nats: what two programs computing the same logits may differ by


def _same(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= NOISE


def same_signals(a, b) -> bool:
    """The gate's inputs agree: log p(typed), the margin, and every word end (offset, log-probability)."""
    if a is None or b is None:
        return a is b
    ends = len(a.word_ends) == len(b.word_ends) and all(
        x.chars == y.chars and _same(x.log_prob, y.log_prob) for x, y in zip(a.word_ends, b.word_ends)
    )
    return ends and _same(a.typed_log_prob, b.typed_log_prob) and _same(a.margin, b.margin)


def main(argv: list[str] | None = None) -> int:
    from engine import Engine, EngineConfig
    from lsp_server import confidence_gate as gates
    from lsp_server.settings import Settings
    from tests.support.asking import alone, asked
    from tests.support.asking import shown as shown_by

    parser = argparse.ArgumentParser(prog="python -m bench.gate_signals", description=__doc__.split("\n")[0])
    parser.add_argument("result", type=Path, nargs="?", default=RESULT)
    parser.add_argument("--cases", default=None, help="case numbers (comma-separated) instead of the differing ones")
    parser.add_argument("--all", action="store_true", help="every case of the headline")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text())
    model = result.get("model", "gemma-3-270m")
    wanted = [r["case"] for r in result["gate_on"]["differ"] if r["kind"] != "seed"]
    cases = headline_cases(result["cases"] < 26 * 4)
    if args.cases:
        wanted = [int(n) for n in args.cases.split(",")]
    elif args.all:
        wanted = list(range(len(cases)))
    rows = []
    server = start_llama_server(slots=SLOTS, ctx=2048, threads=2, model=model)
    try:
        engines = {
            "in-process": Engine.load(EngineConfig(model_path=model, threads=2)),
            "remote": Engine.load(EngineConfig(model_path=model, model_server=server.url, model_server_timeout_s=120)),
        }
        settings = alone(
            Settings(model=model), min_confidence=None, fim_suffix_lines=Settings().fim_suffix_lines
        )  # the model's gate
        gate = gates.gate_for(model)
        for i in wanted:
            case = cases[i]
            text = case.document()
            step = asked(text, len(text), settings)
            request = step.request
            print(f"case {i} ({case.kind}, {case.word!r})")
            got = {}
            for who, engine in engines.items():
                engine.kv.forget()
                engine.prefetch(request)
                completion = engine.complete(request)
                shown = shown_by(step, completion, model)  # the gate of `model`, at its own threshold
                got[who] = (completion, shown.insert_text if shown else None)
                s = completion.signals
                ends = [(w.chars, round(w.log_prob, 3)) for w in s.word_ends[:3]] if s else None
                print(f"  {who:10} {completion.text!r} shown {got[who][1]!r}  fallback {completion.stats.fallback}")
                if s is not None:
                    print(f"  {'':10} margin {s.margin:.3f}  typed {s.typed_log_prob:.3f}  word ends {ends}")
            (a, shown_a), (b, shown_b) = got.values()
            rows.append({"case": i, "kind": case.kind, "text": a.text == b.text, "signals": same_signals(a.signals, b.signals),
                         "shown": shown_a == shown_b, "fallback": b.stats.fallback})  # fmt: skip
        for engine in engines.values():
            engine.close()
    finally:
        server.stop()
    summary = {k: sum(r[k] for r in rows) for k in ("text", "signals", "shown")}
    print(f"of {len(rows)} cases: the same completion {summary['text']}, the same signals (to {NOISE}) "
          f"{summary['signals']}, the same shown text (gate {gate.threshold:g}) {summary['shown']}")  # fmt: skip
    args.out.write_text(json.dumps({"model": model, "threshold": gate.threshold, "cases": len(rows), **summary,
                                    "rows": rows}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
