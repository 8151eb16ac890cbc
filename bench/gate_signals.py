"""Why the headline's gate decides differently remote and in-process: the gate's inputs side by side.

`python -m bench.gate_signals [RESULT]` reads a headline result (bench.remote, default
bench/results/remote_headline-gemma-3-270m.json), takes the held-out cases whose suggestions
differed with the gate on, and asks each of them of an in-process engine and of a remote one
(llama-server as bench.remote starts it) from a cold cache, engine to engine. Printed per case:
the completion, what the model's gate shows of it, and the signals the gate reads
(engine.signals: the margin, the log-probability of the typed prefix, the first word ends'
log-probabilities given it). Nothing is fitted or asserted: it is a lens for one question.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.llama_server import start_llama_server
from bench.remote import SLOTS, headline_cases

RESULT = Path(__file__).parent / "results" / "remote_headline-gemma-3-270m.json"


def main(argv: list[str] | None = None) -> int:
    from engine import Engine, EngineConfig
    from lsp_server import gate as gates
    from lsp_server.settings import Settings
    from lsp_server.split import split
    from lsp_server.suggestion import request_for, suggestion_for

    parser = argparse.ArgumentParser(prog="python -m bench.gate_signals", description=__doc__.split("\n")[0])
    parser.add_argument("result", type=Path, nargs="?", default=RESULT)
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text())
    model = result.get("model", "gemma-3-270m")
    wanted = [r["case"] for r in result["gate_on"]["differ"] if r["kind"] != "seed"]
    cases = headline_cases(result["cases"] < 26 * 4)
    server = start_llama_server(slots=SLOTS, ctx=2048, threads=2, model=model)
    try:
        engines = {
            "in-process": Engine.load(EngineConfig(model_path=model, threads=2)),
            "remote": Engine.load(EngineConfig(model_path=model, model_server=server.url, model_server_timeout_s=120)),
        }
        settings = Settings(model=model)
        gate = gates.gate_for(model)
        for i in wanted:
            case = cases[i]
            text = case.document()
            parts = split(text, len(text), settings.fim_suffix_lines or None)
            request = request_for(parts, settings)
            print(f"case {i} ({case.kind}, {case.word!r})")
            for who, engine in engines.items():
                engine.kv.forget()
                engine.prefetch(request)
                completion = engine.complete(request)
                shown = suggestion_for(parts, completion, min_confidence=gate.threshold, calibration=gate.calibration)
                s = completion.signals
                ends = [(w.chars, round(w.log_prob, 3)) for w in s.word_ends[:3]] if s else None
                print(f"  {who:10} {completion.text!r} shown {shown.insert_text if shown else None!r}")
                if s is not None:
                    print(f"  {'':10} margin {s.margin:.3f}  typed {s.typed_log_prob:.3f}  word ends {ends}")
        for engine in engines.values():
            engine.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
