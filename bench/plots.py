"""Two PNGs for the README (matplotlib, Agg): latency vs prompt length, accuracy by method and text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def latency_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    tokens = [r["tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    series = [
        ("cold_ms", "server, cold (first keystroke)", "o--", "tab:red"),
        ("warm_median_ms", "server, warm median", "o-", "tab:blue"),
        ("warm_off_median_ms", "server, warm median off the suggestion", "o:", "tab:cyan"),
        ("peer_warm_median_ms", "peer (llama-cpp-python), warm median", "s-", "tab:gray"),
        ("peer_cold_ms", "peer, cold", "s--", "silver"),
    ]
    for key, label, style, color in series:
        values = [r.get(key) for r in rows]
        if all(v is not None for v in values):
            ax.plot(tokens, values, style, label=label, color=color)
    ax.set_xlabel("document length before the cursor (tokens)")
    ax.set_ylabel("request latency (ms, median; log scale)")
    ax.set_yscale("log")
    ax.set_title("Keystroke latency vs prompt length")
    ax.set_xticks(tokens)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def accuracy_plot(quality: dict[str, Any], path: Path) -> Path:
    kinds = quality["kinds"]
    rows = quality["rows"]
    width = 0.8 / len(rows)
    colors = {"naive": "tab:gray", "mask": "tab:orange", "exact": "tab:blue"}
    fig, ax = plt.subplots(figsize=(7.0, 4.3), dpi=120)
    for i, row in enumerate(rows):
        xs = [k + (i - (len(rows) - 1) / 2) * width for k in range(len(kinds))]
        values = [100 * (row[k] or 0) for k in kinds]
        bars = ax.bar(xs, values, width, label=f"{row['method']} ({row['via']})", color=colors.get(row["method"]))
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("first word right (%)")
    ax.set_ylim(0, 108)
    ax.set_title(f"Mid-word accuracy by method and kind of text ({rows[0]['cases']} cases)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(rows), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
