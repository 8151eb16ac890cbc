"""Why a remote suggestion differs from the in-process one: the prompt, the numbers or the path.

Both engines (in-process, and on a llama-server) are asked what the language server asks them for
a case (lsp_server.suggestion.request_for with the document's words as lexicon candidates, after
the prefetch it sends when a document opens), in one process, and every row each side read is
recorded by token path. For a case whose texts differ:

- "prompt": the two engines laid out other prompt tokens;
- else the first token where the two token paths (covering, then generation) part, the log-prob
  gap between the two tokens there (in-process token minus remote token, on each side's row: how
  near a tie the choice was), and there the two rows: when the remote's listed log-probabilities differ from the in-process row's by more
  than the float noise of the softmax (NOISE), "numbers", with the largest difference; else
  "path" (both saw the same numbers and chose differently: the search, the lexicon or a bound).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from bench.remote_same import Cursor
from engine import Engine
from lsp_server import block as blocks
from lsp_server.document_words import Lexicon
from lsp_server.settings import Settings, apply
from lsp_server.split import split
from lsp_server.suggestion import request_for, suggestion_for

TIMEOUT_MS = 120_000  # a loaded 2-core machine: a slow answer is not what is compared here
NOISE = 2e-3  # nats: llama-server's float32 normalisation against the engine's float64 (docs/shared-server.md)


class _Recorder:
    """Every row an engine's cache handed out, by token path (the instance's own `logits_after`)."""

    def __init__(self, engine: Engine) -> None:
        self.paths: list[tuple[int, ...]] = []
        kv = engine.kv
        original = kv.logits_after

        def logits_after(tokens, cancel=None):
            row = original(tokens, cancel)
            self.paths.append(tuple(tokens))
            return row

        kv.logits_after = logits_after  # type: ignore[method-assign]


def _settings(model: str, max_tokens: int, gate: bool, server: str | None) -> Settings:
    raw = {"model": model, "maxTokens": max_tokens, "modelServerTimeoutMs": TIMEOUT_MS} | (
        {} if gate else {"minConfidence": 0}
    )
    if server:
        raw["modelServer"] = server
    settings, problems = apply(Settings(), {"cpcLsp": raw})
    assert not problems, problems
    return settings


def _ask(engine: Engine, settings: Settings, case: Cursor) -> dict[str, Any]:
    text, cursor, uri = case.text, case.cursor, f"file:///why/{case.kind}.txt"
    parts = split(text, cursor, settings.fim_suffix_lines or None)
    lexicon = Lexicon()
    lexicon.opened(uri, text)
    engine.prefetch(request_for(parts, settings, language=case.language, document=uri))
    block = blocks.at(text, cursor, settings.line_mode())
    next_line = blocks.next_line_at(text, cursor, settings.line_mode())
    request = request_for(
        parts, settings, lexicon.candidates(parts.word), block, alternatives=settings.alternatives,
        language=case.language, document=uri, next_line=next_line,
    )  # fmt: skip
    recorder = _Recorder(engine)
    completion = engine.complete(request)
    del engine.kv.logits_after  # back to the class's method
    prompt = engine.request_prompt(request)
    path = max((p for p in recorder.paths if p[: len(prompt)] == prompt), key=len, default=prompt)[len(prompt) :]
    shown = suggestion_for(parts, completion, block=block)
    return {
        "prompt": prompt, "path": path, "text": completion.text, "shown": shown.insert_text if shown else None,
        "lexicon_changed": completion.stats.lexicon_changed, "fallback": completion.stats.fallback,
    }  # fmt: skip


def _local_row(engine: Engine, context: tuple[int, ...]) -> np.ndarray:
    row = np.asarray(engine.kv.logits_after(context), dtype=np.float64)
    top = row.max()
    return row - (top + math.log(np.exp(row - top).sum()))


def explain(local: Engine, remote: Engine, settings: Settings, case: Cursor) -> dict[str, Any]:
    """Both engines on one case: their answers and, when they differ, why."""
    a, b = _ask(local, settings, case), _ask(remote, settings, case)
    out: dict[str, Any] = {
        "kind": case.kind, "typed": case.typed, "local": a["text"], "remote": b["text"],
        "lexicon_changed": [a["lexicon_changed"], b["lexicon_changed"]], "fallback": b["fallback"],
    }  # fmt: skip
    if a["text"] == b["text"]:
        out["cause"] = None
        return out
    if a["prompt"] != b["prompt"]:
        i = next(
            (k for k, (x, y) in enumerate(zip(a["prompt"], b["prompt"])) if x != y),
            min(len(a["prompt"]), len(b["prompt"])),
        )
        out.update(cause="prompt", at=i, prompt_lengths=[len(a["prompt"]), len(b["prompt"])])
        return out
    prompt = a["prompt"]
    pa, pb = a["path"], b["path"]
    i = next((k for k, (x, y) in enumerate(zip(pa, pb)) if x != y), min(len(pa), len(pb)))
    context = prompt + pa[:i]
    pieces = local.vocab.pieces
    out.update(at=i, local_token=_piece(pieces, pa, i), remote_token=_piece(pieces, pb, i))
    node = remote.kv.node(context)
    if node is None:
        out["cause"] = "path"
        out["note"] = "the remote never read the row where the paths part"
        return out
    row = _local_row(local, context)
    listed = sorted(node.exact.items(), key=lambda kv: -kv[1])
    moved = max(abs(row[t] - lp) for t, lp in listed)
    out["max_moved"] = round(float(moved), 5)
    for side, path in (("local", pa), ("remote", pb)):
        if i < len(path):
            t = path[i]
            out[f"{side}_token_lp"] = {"in_process": round(float(row[t]), 5), "server": node.exact.get(t)}
    if i < len(pa) and i < len(pb):  # how near a tie the two tokens are, on each side's numbers
        server = [node.exact.get(pa[i]), node.exact.get(pb[i])]
        out["gap"] = {
            "in_process": round(float(row[pa[i]] - row[pb[i]]), 5),
            "server": None if None in server else round(server[0] - server[1], 5),
        }
    out["cause"] = "numbers" if moved > NOISE else "path"
    return out


def _piece(pieces, path: tuple[int, ...], i: int) -> str | None:
    return pieces[path[i]].decode("utf-8", "replace") if i < len(path) else None


def run(server_url: str, cases: list[Cursor], model: str = "gemma-3-270m", max_tokens: int = 8, gate: bool = False,
        say=print) -> list[dict[str, Any]]:  # fmt: skip
    settings = _settings(model, max_tokens, gate, None)
    local = Engine.load(settings.engine_config())
    remote = Engine.load(replace(settings, model_server=server_url).engine_config())
    found = []
    try:
        for i, case in enumerate(cases):
            got = explain(local, remote, settings, case)
            got["case"] = i
            found.append(got)
            if got["cause"] is not None:
                say(f"{i} {case.kind} {got}")
    finally:
        local.close()
        remote.close()
    return found
