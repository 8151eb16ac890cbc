"""Keystroke latency through the real server, side by side with the peer, and cancellation.

For each size (32/214/838 tokens) a fresh document is opened and a word is typed one character
per request: didChange, then textDocument/inlineCompletion at the cursor, then cpcLsp/stats for
what the engine decoded. The first keystroke on a new document is cold (its prompt shares
nothing with the KV cache); the others are warm. After each word, once our server is idle, the
peer, llama-cpp-python's own prefix-cached `Llama.create_completion` on the same model file, gets
the same texts keystroke by keystroke (partial word in the prompt, the naive way), the same token
budget, temperature 0, and a line-break stop (the server suggests one line): right after each of
our keystrokes it would run beside what our server makes after an answer.

Cancellation: a request is sent, `$/cancelRequest` follows while the engine works, and the time
from the cancel to the request's answer is measured, then how long the next request takes.
"""

from __future__ import annotations

import time
from typing import Any

from bench.machine import wait_until_idle
from bench.stats import maximum, median, ratio
from tests.support.lsp_client import Editor, insert_text
from tests.support.prompts import SIZES, Typing, documents


class Peer:
    """llama-cpp-python's high-level API on the same GGUF, with settings matching the engine's."""

    def __init__(self, model_path: str, n_ctx: int = 2048, threads: int | None = None) -> None:
        import os

        from llama_cpp import Llama

        threads = threads or os.cpu_count() or 1
        self.llm = Llama(
            model_path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
            n_threads_batch=threads, swa_full=True, verbose=False,
        )  # fmt: skip

    def complete(self, text: str, max_tokens: int) -> tuple[float, int]:
        """(ms, generated tokens) for one completion of `text`."""
        started = time.perf_counter()
        out = self.llm.create_completion(text, max_tokens=max_tokens, temperature=0.0, stop=["\n"])
        return (time.perf_counter() - started) * 1000, out["usage"]["completion_tokens"]

    def close(self) -> None:
        self.llm.close()


def _type_word(
    editor: Editor, peer: Peer | None, uri: str, doc: Typing, max_tokens: int, max_keys: int
) -> list[dict[str, Any]]:
    editor.open(uri, doc.base)
    keystrokes = []
    shown = None
    answers = (editor.stats() or {}).get("engineAnswers", 0)
    for k, ch in enumerate(doc.word[:max_keys]):
        typed = doc.word[: k + 1]
        editor.type(uri, ch)
        # Did the user just type the next letter of the previous suggestion? Then the engine has
        # usually computed this suggestion's rows already (typing along); otherwise it decodes anew.
        along = shown is not None and shown.startswith(typed)
        reply = editor.inline(uri)
        shown = insert_text(reply)
        stats = editor.stats() or {}
        # cpcLsp/stats describes the last engine call; a keystroke answered without one (the
        # suggestion shown carried, lsp_server.carry, or a hidden one judged again) decoded nothing.
        was_carried = stats.get("engineAnswers", 0) == answers
        answers = stats.get("engineAnswers", answers)
        if was_carried:
            stats = {**stats, "decodedTokens": 0, "coverDecodes": 0, "generatedTokens": 0, "ms": None}
        step = {
            "keystroke": k + 1,
            "ms": reply.ms,
            "typed_along": along,
            "carried": was_carried,
            "suggestion": shown,
            "prompt_tokens": stats.get("promptTokens"),
            "decoded_tokens": stats.get("decodedTokens"),
            "cover_decodes": stats.get("coverDecodes"),
            "generated_tokens": stats.get("generatedTokens"),
            "engine_ms": stats.get("ms"),
        }
        keystrokes.append(step)
    editor.close(uri)
    if peer is not None:  # after ours, once our server is idle: see bench.machine.wait_until_idle
        wait_until_idle([editor.client.pid])
        for k, step in enumerate(keystrokes):
            step["peer_ms"], step["peer_generated"] = peer.complete(doc.base + doc.word[: k + 1], max_tokens)
    return keystrokes


def keystrokes(editor: Editor, peer: Peer | None, count_tokens, max_tokens: int, quick: bool) -> list[dict[str, Any]]:
    """One row per size: cold, warm median/max, the peer's, decoded prompt tokens per warm keystroke."""
    docs_per_size = 1 if quick else 5
    rows = []
    for size in SIZES:
        docs = documents(count_tokens, size, docs_per_size, min_word=5 if quick else 7, first_line=40 + size // 4)
        cold, warm, peer_cold, peer_warm, decoded, tokens, generated, peer_generated = ([] for _ in range(8))
        all_steps, along, off = [], [], []
        for d, doc in enumerate(docs):
            uri = f"file:///bench/latency/{size}-{d}.py"
            steps = _type_word(editor, peer, uri, doc, max_tokens, 6 if quick else len(doc.word))
            all_steps.append(steps)
            first, rest = steps[0], steps[1:]
            cold.append(first["ms"])
            tokens.append(first["prompt_tokens"])
            warm += [s["ms"] for s in rest]
            along += [s["ms"] for s in rest if s["typed_along"]]
            off += [s["ms"] for s in rest if not s["typed_along"]]
            decoded += [s["decoded_tokens"] for s in rest]
            generated += [s["generated_tokens"] for s in steps]
            if peer is not None:
                peer_cold.append(first["peer_ms"])
                peer_warm += [s["peer_ms"] for s in rest]
                peer_generated += [s["peer_generated"] for s in steps]
        rows.append({
            "steps": all_steps,
            "tokens": median(tokens),
            "documents": len(docs),
            "warm_keystrokes": len(warm),
            "cold_ms": median(cold),
            "warm_median_ms": median(warm),
            "warm_max_ms": maximum(warm),
            "warm_along_median_ms": median(along),
            "warm_along_keystrokes": len(along),
            "warm_off_median_ms": median(off),
            "warm_off_keystrokes": len(off),
            "peer_cold_ms": median(peer_cold),
            "peer_warm_median_ms": median(peer_warm),
            "peer_warm_max_ms": maximum(peer_warm),
            "warm_over_peer": ratio(median(warm), median(peer_warm)),
            "cold_over_warm": ratio(median(cold), median(warm)),
            "warm_decoded_prompt_tokens_max": maximum(decoded),
            "warm_decoded_prompt_tokens_median": median(decoded),
            "generated_median": median(generated),
            "peer_generated_median": median(peer_generated),
        })  # fmt: skip
    return rows


UNLIKELY = "qxzjkvw"


def _engine_idle_after(editor: Editor, since: float, timeout_s: float = 120.0) -> float | None:
    """ms from `since` until the server's stats show the cancelled completion (the engine let go)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        stats = editor.stats() or {}
        if stats.get("stopReason") == "cancelled":
            return (time.perf_counter() - since) * 1000
        time.sleep(0.002)
    return None


def cancellation(editor: Editor, count_tokens, quick: bool, delay_s: float = 0.15) -> dict[str, Any]:
    """`$/cancelRequest` while a request works: a cold one (cancelled while its prompt decodes) and
    a warm one (cancelled while it generates, after typing a letter the suggestion did not expect).
    Measured: cancel to the request's answer, cancel to the engine being idle (its stats show the
    cancelled completion), and the same request sent again right after."""
    runs, size = (1, SIZES[1]) if quick else (5, SIZES[-1])
    docs = documents(count_tokens, size, runs, min_word=5, first_line=1500)
    found: dict[str, dict[str, list]] = {
        p: {"answer": [], "code": [], "idle": [], "next": []} for p in ("cold", "warm")
    }
    for d, doc in enumerate(docs):
        uri = f"file:///bench/cancel/{d}.py"
        editor.open(uri, doc.base + doc.word[0])
        for phase in ("cold", "warm"):
            if phase == "warm":
                shown = insert_text(editor.inline(uri)) or ""
                expected = shown[1:2]
                editor.type(uri, next(c for c in UNLIKELY if c != expected))
            msg_id, future = editor.client.send("textDocument/inlineCompletion", editor.inline_params(uri))
            time.sleep(delay_s if phase == "cold" else 0.02)
            cancel_sent = editor.client.notify("$/cancelRequest", {"id": msg_id})
            reply = future.result(120)
            if reply.received < cancel_sent:  # answered before the cancel left: not a sample
                editor.inline(uri)
                continue
            idle = _engine_idle_after(editor, cancel_sent)
            found[phase]["answer"].append((reply.received - cancel_sent) * 1000)
            found[phase]["code"].append((reply.error or {}).get("code"))
            found[phase]["idle"].append(idle)
            found[phase]["next"].append(editor.inline(uri).ms)  # the same request again (also warms the prompt)
        editor.close(uri)
    phases = []
    for phase, got in found.items():
        idle = [i for i in got["idle"] if i is not None]
        phases.append({
            "phase": f"{phase} ({'prompt decode' if phase == 'cold' else 'generation'})",
            "samples": len(got["answer"]),
            "answer_median_ms": median(got["answer"]),
            "answer_max_ms": maximum(got["answer"]),
            "code_-32800": f"{sum(c == -32800 for c in got['code'])}/{len(got['code'])}",
            "idle_median_ms": median(idle),
            "idle_max_ms": maximum(idle),
            "next_median_ms": median(got["next"]),
        })  # fmt: skip
    return {
        "phases": phases,
        "document_tokens": median([d.tokens for d in docs]),
        "delay_before_cancel_ms": {"cold": delay_s * 1000, "warm": 20.0},
    }
