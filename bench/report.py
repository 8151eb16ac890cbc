"""Tables in a stable text format (one per concern), the targets they are held to, and the JSON file.

Every table is a title line (``## name: what``), a header row and aligned rows; missing numbers
print as ``-``. The same rows go to the JSON file and to the markdown snippet for the README.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Table = tuple[str, list[str], list[list[str]]]


def output_root(package: Path = Path(__file__).resolve().parent) -> Path:
    """Where results, plots and snippets are written: the source checkout when the benchmarks run
    from one (an editable install included), else the current directory, never site-packages."""
    checkout = package.parent
    return checkout if (checkout / "pyproject.toml").is_file() else Path.cwd()


def num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# --- the tables --------------------------------------------------------------------------------


def latency_table(rows: list[dict[str, Any]], max_tokens: int, threads: int | None = None) -> Table:
    header = ["tokens", "cold", "warm med", "warm max", "warm med along (n)", "warm med off (n)", "peer cold",
              "peer warm med", "peer warm max", "warm/peer", "cold/warm", "prompt tok decoded per warm key (max)",
              "keys"]  # fmt: skip
    body = [[num(r["tokens"], 0), num(r["cold_ms"]), num(r["warm_median_ms"]), num(r["warm_max_ms"]),
             f"{num(r['warm_along_median_ms'])} ({r['warm_along_keystrokes']})",
             f"{num(r['warm_off_median_ms'])} ({r['warm_off_keystrokes']})",
             num(r["peer_cold_ms"]), num(r["peer_warm_median_ms"]), num(r["peer_warm_max_ms"]),
             times(r["warm_over_peer"]), times(r["cold_over_warm"]),
             num(r["warm_decoded_prompt_tokens_max"], 0), num(r["warm_keystrokes"] + r["documents"])]
            for r in rows]  # fmt: skip
    title = (f"keystroke latency, ms: server over LSP vs peer (llama-cpp-python create_completion, "
             f"prefix cache), max {max_tokens} tokens, temperature 0"
             + (f", {threads} threads each" if threads else ""))  # fmt: skip
    return title, header, body


def step_table(step: dict[str, Any]) -> Table:
    header = ["vocab", "index+choose med", "index max", "python pass", "numpy pass", "python/index", "numpy/index",
              "same token", "target"]  # fmt: skip
    body = [[num(step["vocab_size"]), num(step["indexed_us"]), num(step["indexed_max_us"]),
             num(step["python_pass_us"], 0), num(step["numpy_pass_us"], 0),
             f"{step['python_pass_over_indexed']:,.0f}x", f"{step['numpy_pass_over_indexed']:,.0f}x",
             step["same_choice"], f"<= {step['target_us']}"]]  # fmt: skip
    title = f"one constrained (mask) step, µs: vocabulary index vs a per-step pass over the vocabulary ({step['prefixes']} prefixes)"
    return title, header, body


def cover_table(cover: dict[str, Any]) -> Table:
    header = ["cases", "median", "max", "zero extra", "budget"]
    body = [
        [
            num(cover["cases"]),
            num(cover["median"], 0),
            num(cover["max"]),
            pct(cover["zero_share"]),
            num(cover["budget"]),
        ]
    ]
    return "covering search: extra decodes per mid-word request (exact, via server stats)", header, body


def decode_table(rows: list[dict[str, Any]]) -> Table:
    header = ["tokens", "cold", "warm same prompt", "warm +next word", "decoded (+next word)", "cold/warm+word", "runs"]
    body = [[num(r["tokens"]), num(r["cold_ms"]), num(r["warm_same_ms"], 3), num(r["warm_next_word_ms"]),
             num(r["next_word_decoded"], 0), times(r["cold_over_warm_next_word"]), num(r["runs"])] for r in rows]  # fmt: skip
    return (
        "prompt decode, ms, engine: cold (KV cleared) vs warm (the same prompt again; and with the next word appended)",
        header,
        body,
    )


def cancel_table(cancel: dict[str, Any]) -> Table:
    header = ["phase", "samples", "cancel->answer med", "cancel->answer max", "answered -32800",
              "cancel->engine idle med", "cancel->engine idle max", "same request again med"]  # fmt: skip
    body = [[p["phase"], num(p["samples"]), num(p["answer_median_ms"]), num(p["answer_max_ms"]), p["code_-32800"],
             num(p["idle_median_ms"]), num(p["idle_max_ms"]), num(p["next_median_ms"])] for p in cancel["phases"]]  # fmt: skip
    return (
        f"cancel: $/cancelRequest to the request's answer, ms ({num(cancel['document_tokens'], 0)}-token document)",
        header,
        body,
    )


def memory_table(memory: dict[str, Any]) -> Table:
    header = ["peak RSS MiB", "model file MiB", "when"]
    body = [[num(memory["peak_rss_mib"]), num(memory["model_mib"]), memory["when"]]]
    return "memory: server process with the default model", header, body


def quality_table(quality: dict[str, Any], max_tokens: int) -> Table:
    kinds = quality["kinds"]
    header = ["method", "via", *kinds, "shown", "begins with typed"]
    body = [[r["method"], r["via"], *(pct(r[k]) for k in kinds), pct(r["shown"]),
             "n/a (in prompt)" if r["method"] == "naive" else pct(r["begins_with_typed"])]
            for r in quality["rows"]]  # fmt: skip
    counts = ", ".join(f"{k} {n}" for k, n in quality["per_kind_cases"].items())
    title = (f"quality: first word after a mid-word cursor is the original word; naive vs mask (per-step) vs "
             f"exact; {quality['rows'][0]['cases']} cases ({counts}), max {max_tokens} tokens")  # fmt: skip
    return title, header, body


def targets_table(checks: list[tuple[str, str, bool | None]]) -> Table:
    body = [[name, value, "-" if ok is None else ("PASS" if ok else "MISS")] for name, value, ok in checks]
    return "targets", ["target", "measured", "result"], body


# --- output ----------------------------------------------------------------------------------


def render(table: Table) -> str:
    title, header, body = table
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = [f"## {title}", "  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in body]
    return "\n".join(lines)


def markdown(table: Table) -> str:
    title, header, body = table
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def write_json(path: Path, results: dict[str, Any]) -> None:
    """Compact (no indent): results are kept in git small; `python -m json.tool` reads them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, ensure_ascii=False, default=str, separators=(",", ":")) + "\n")


def write_markdown(
    path: Path,
    tables: Sequence[Table],
    command: str,
    plots: Sequence[str],
    notes: Sequence[str],
    updates: Sequence[str] = (),
) -> None:
    parts = ["## Benchmarks", "", f"Measured with `{command}` (full run; `--quick` for a one-minute sample)."]
    parts += [f"Then re-measured with `{command} --update --only {','.join(u)}`." for u in updates] + [""]
    parts += [f"- {note}" for note in notes] + [""]
    for table in tables:
        parts += [markdown(table), ""]
    parts += [f"![{Path(p).stem}]({p})" for p in plots]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")
