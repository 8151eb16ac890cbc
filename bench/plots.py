"""PNGs for the README (matplotlib, Agg): latency vs prompt length, accuracy by method and text, the
confidence gate's characters saved against precision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


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
    return _save(fig, path)


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
    return _save(fig, path)


def gate_plot(curves: dict[str, list[dict[str, Any]]], default: float, path: Path, model: str = "") -> Path:
    """Characters saved against precision over the gate's thresholds, one line per replay set."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for (name, curve), color in zip(curves.items(), ("tab:blue", "tab:orange")):
        pts = [r for r in curve if r["precision"] is not None]
        ax.plot(
            [100 * r["saved"] for r in pts],
            [100 * r["precision"] for r in pts],
            "o-",
            ms=3,
            color=color,
            label=f"{name} set",
        )
        at = next(r for r in pts if r["threshold"] == default)
        ax.plot([100 * at["saved"]], [100 * at["precision"]], "*", ms=12, color=color)
        off = pts[0]
        ax.annotate(
            "gate off",
            (100 * off["saved"], 100 * off["precision"]),
            fontsize=7,
            xytext=(4, -10),
            textcoords="offset points",
        )
    ax.set_xlabel("characters saved (%)")
    ax.set_ylabel("precision of shown suggestions (%)")
    ax.set_title(
        f"Confidence gate{' on ' + model if model else ''}: minConfidence 0-0.95 (star: default {default:g})",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
