"""What KV reuse survives FIM prompts: replay passages in place, keystroke by keystroke, through the
server's own split / request / suggestion code and the engine, on the tiny FIM model the tests
generate (the default model has no FIM tokens; no code model with them ships on PyPI).

Per layout (plain prompt, PSM, SPM) and per keystroke: prompt tokens decoded (the KV held the
rest). Inside a word nothing changes in any layout; the difference is the keystroke that starts a
new word, where PSM decodes the suffix again and SPM does not. Run: `python -m bench.fim_reuse`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.replay import Passage
from bench.stats import median
from lsp_server.settings import Settings
from tests.support.asking import alone, asked

LAYOUTS = {
    "plain (no suffix)": (0, "psm"),
    "FIM psm": (8, "psm"),
    "FIM spm": (8, "spm"),
    "FIM psm-line": (8, "psm-line"),
}


def measure(items: list[Passage], suffix_tokens: int = 64) -> list[dict[str, Any]]:
    from engine import Engine, EngineConfig
    from tests.support.tiny_gguf import write_model

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        engine = Engine.load(
            EngineConfig(model_path=write_model(Path(folder) / "fim.gguf", True), context_tokens=2048, threads=1)
        )
        try:
            for name, (lines, order) in LAYOUTS.items():
                settings = alone(
                    Settings(max_tokens=8, fim_suffix_tokens=suffix_tokens, fim_order=order), fim_suffix_lines=lines
                )
                decoded, prompts = [], []
                for passage in items:
                    engine.kv.forget()
                    for k in range(len(passage.text) + 1):
                        before = passage.before + passage.text[:k]
                        result = engine.complete(asked(before + passage.after, len(before), settings).request)
                        if k:  # the first request is cold
                            decoded.append(result.stats.decoded_tokens)
                            prompts.append(result.stats.prompt_tokens)
                rows.append({
                    "layout": name, "keystrokes": len(decoded), "prompt_tokens_median": median(prompts),
                    "decoded_median": median(decoded), "decoded_mean": sum(decoded) / len(decoded),
                    "decoded_max": max(decoded), "zero_share": sum(d == 0 for d in decoded) / len(decoded),
                })  # fmt: skip
        finally:
            engine.close()
    return rows


def table(rows: list[dict[str, Any]]):
    from bench.report import num, pct

    header = [
        "layout",
        "keystrokes",
        "prompt tokens med",
        "decoded med",
        "decoded mean",
        "decoded max",
        "no prompt decode",
    ]
    body = [[r["layout"], num(r["keystrokes"]), num(r["prompt_tokens_median"], 0), num(r["decoded_median"], 0),
             num(r["decoded_mean"]), num(r["decoded_max"]), pct(r["zero_share"])] for r in rows]  # fmt: skip
    return "FIM KV reuse: prompt tokens decoded per keystroke, typing in place (tiny generated FIM model)", header, body


def main() -> int:
    from bench import replay, report
    from tests.support.cases import build_cases, check_cases

    tuning = build_cases(50, 0)
    items = replay.passages(1, replay.used_files(tuning, check_cases(50, tuning)))
    print(report.render(table(measure(items))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
