"""`python -m bench.firstcontact`: the first contact with a document (issue 10), in tables.

Parts (`--only`, comma-separated):

- ``fresh``: the real server over stdio. Type at 8 characters a second into a freshly opened
  document of about 2,000 tokens, VS Code's way (didChange, then inlineCompletion, with
  ``$/cancelRequest`` for the previous request): time from opening to the first suggestion, with
  prefetch on and off, beside one cold request on the same kind of document (prefetch off, sent
  at once). Then one request 0.5 s, 1 s or 3 s after opening, prefetch on and off.
- ``switch``: open A, B and C, one request each, back to A and type a line break at its end: that
  request's cost against A's cold one. Then typing along the suggestion on A (warm keystrokes).
- ``cancel``: bench.latency's cancellation table (cancel to engine idle) on this code.
- ``speculation``: the engine in this process: generation ms per token with and without
  prompt-lookup drafts, on code and prose, and whether the greedy texts are identical.
- ``build``: cold prompt decode with this build of llama.cpp against an AVX2-only wheel, each in
  its own child process, alternating.

Every document is cut from a different place of a file the machine has, so each first request is
really cold. Results go to bench/results/firstcontact.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from bench import report
from bench.machine import CpuWatch, process_cpu_seconds
from bench.stats import maximum, median, ratio
from tests.support.lsp_client import Editor, LspClient, insert_text, peak_rss_mb
from tests.support.prompts import source_text

ROOT = report.output_root()
RESULTS = ROOT / "bench" / "results" / "firstcontact.json"
PARTS = ("fresh", "switch", "cancel", "speculation", "build")
KEY_INTERVAL_S = 1 / 8  # 8 characters a second
WAITS_S = (0.5, 1.0, 3.0)


def _say(message: str) -> None:
    print(f"[firstcontact] {message}", file=sys.stderr, flush=True)


# --- documents -----------------------------------------------------------------------------------


class Documents:
    """Unique documents of about `tokens` tokens (+-60) from the Python standard library's sources,
    each ending just before a word preceded by a space, with the text that follows it (what gets
    typed). 1,900 keeps them inside the 2,048-token context with the generation budget, so no
    window shift muddles a comparison."""

    def __init__(self, count_tokens, tokens: int = 1900) -> None:
        import sysconfig

        stdlib = Path(sysconfig.get_paths()["stdlib"])
        files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 60_000)
        self._texts = [source_text()] + [p.read_text(encoding="utf-8", errors="replace") for p in files]
        self._count = count_tokens
        self._tokens = tokens
        self._next = (0, 0)

    def take(self) -> tuple[str, str]:
        """(document, the 400 characters that follow it)."""
        file, start = self._next
        while file < len(self._texts):
            text = self._texts[file]
            guess = start + self._tokens * 3
            end = self._cut(text, start, guess)
            if end is not None:
                self._next = (file, text.find("\n", end + 400) + 1 or len(text))
                return text[start:end], text[end : end + 400]
            file, start = file + 1, 0
        raise RuntimeError("out of source text for unique documents")

    def _cut(self, text: str, start: int, guess: int) -> int | None:
        """A cut near `self._tokens` tokens after `start`, before a space-preceded word."""
        end = guess
        for _ in range(12):
            if end + 500 > len(text):
                return None
            n = self._count(text[start:end])
            if abs(n - self._tokens) <= 60:
                break
            end = start + int((end - start) * self._tokens / max(1, n))
        while end < len(text) - 450 and not (text[end - 1] == " " and text[end].isalpha()):
            end += 1
        return end if end < len(text) - 450 else None


# --- the server ------------------------------------------------------------------------------------


def _server(threads: int, max_tokens: int, prefetch: bool = True) -> tuple[LspClient, Editor]:
    log = Path(tempfile.gettempdir()) / "cpc-lsp-firstcontact-server.log"
    client = LspClient(["--log-level", "warning"], stderr_path=log)
    client.initialize({"maxTokens": max_tokens, "threads": threads, "prefetch": prefetch}, wait_loaded=True)
    editor = Editor(client)
    warm = "file:///bench/fc/warmup.txt"
    editor.open(warm, "The server is ready when this sentence gets an ans")
    editor.inline(warm)
    editor.close(warm)
    return client, editor


def set_prefetch(editor: Editor, on: bool) -> None:
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"prefetch": on}}})
    editor.stats()  # a round trip: the notification has been handled


def type_until_suggestion(
    editor: Editor, uri: str, doc: str, typed: str, limit_s: float, language: str = "plaintext"
) -> tuple[float | None, int]:
    """Open `doc` and type `typed` at 8 chars/s the way VS Code does; seconds from opening to the
    first non-empty suggestion (None within `limit_s`), and the keystrokes sent."""
    opened = time.perf_counter()
    editor.open(uri, doc, language)
    pending: list[tuple[Any, Any]] = []
    keys = 0
    for k, ch in enumerate(typed):
        due = opened + (k + 1) * KEY_INTERVAL_S
        while time.perf_counter() < due:
            for msg_id, future in pending:
                if future.done() and insert_text(future.result()):
                    return future.result().received - opened, keys
            time.sleep(0.002)
        if time.perf_counter() - opened > limit_s:
            break
        editor.type(uri, ch)
        for msg_id, future in pending:
            if not future.done():
                editor.client.notify("$/cancelRequest", {"id": msg_id})
        pending = [editor.client.send("textDocument/inlineCompletion", editor.inline_params(uri))]
        keys += 1
    for msg_id, future in pending:  # the last request may still answer
        reply = future.result(120)
        if insert_text(reply):
            return reply.received - opened, keys
    return None, keys


def fresh(editor: Editor, docs: Documents, trials: int, language: str = "plaintext") -> dict[str, Any]:
    """`language`: the documents' languageId, which picks the server's default model (python: the code model)."""
    rows: dict[str, list[float | None]] = {"cold request (prefetch off)": [], "typing, prefetch off": [],
                                          "typing, prefetch on": []}  # fmt: skip
    waits: dict[tuple[float, bool], list[float]] = {}
    tokens = []
    n = 0
    for trial in range(trials):
        set_prefetch(editor, False)
        doc, _ = docs.take()
        tokens.append(docs._count(doc))
        uri = f"file:///bench/fc/cold{trial}.py"
        opened = time.perf_counter()
        editor.open(uri, doc, language)
        reply = editor.inline(uri)
        rows["cold request (prefetch off)"].append(reply.received - opened)
        _say(f"cold request {trial}: {reply.received - opened:.2f} s ({tokens[-1]} tokens)")
        limit = 4 * (reply.received - opened) + 5
        for on in (False, True):
            set_prefetch(editor, on)
            doc, typed = docs.take()
            n += 1
            seconds, keys = type_until_suggestion(editor, f"file:///bench/fc/type{n}.py", doc, typed, limit, language)
            rows[f"typing, prefetch {'on' if on else 'off'}"].append(seconds)
            _say(f"typing, prefetch {on}: first suggestion after {seconds} s, {keys} keys")
        for wait in WAITS_S:
            for on in (False, True):
                set_prefetch(editor, on)
                doc, _ = docs.take()
                n += 1
                uri = f"file:///bench/fc/wait{n}.py"
                opened = time.perf_counter()
                editor.open(uri, doc, language)
                time.sleep(max(0.0, opened + wait - time.perf_counter()))
                reply = editor.inline(uri)
                waits.setdefault((wait, on), []).append(reply.received - opened)
                _say(f"request {wait} s after open, prefetch {on}: {reply.received - opened:.2f} s")
    set_prefetch(editor, True)
    cold = median([s for s in rows["cold request (prefetch off)"] if s is not None])
    typing = [
        {"case": name, "samples": len(v), "answered": sum(s is not None for s in v),
         "first_suggestion_median_s": median([s for s in v if s is not None]),
         "over_cold": ratio(median([s for s in v if s is not None]), cold)}
        for name, v in rows.items()
    ]  # fmt: skip
    after = [
        {"wait_s": wait, "prefetch": on, "open_to_suggestion_median_s": median(v),
         "over_cold": ratio(median(v), cold)}
        for (wait, on), v in sorted(waits.items())
    ]  # fmt: skip
    return {"document_tokens": median(tokens), "cold_request_s": cold, "typing": typing, "waits": after}


def switch(editor: Editor, docs: Documents, trials: int) -> dict[str, Any]:
    cold, back, along = [], [], []
    for trial in range(trials):
        uris = [f"file:///bench/fc/switch{trial}-{name}.py" for name in "ABC"]
        for uri in uris:
            doc, _ = docs.take()
            editor.open(uri, doc)
            started = time.perf_counter()
            reply = editor.inline(uri)
            if uri == uris[0]:
                cold.append((reply.received - started) * 1000)
        editor.type(uris[0], "\n")
        reply = editor.inline(uris[0])
        back.append(reply.ms)
        _say(f"switch {trial}: A cold {cold[-1]:.0f} ms, back to A {back[-1]:.0f} ms")
        shown = insert_text(reply) or ""
        for ch in shown[:8]:  # typing along the suggestion
            if ch in "\r\n":
                break
            editor.type(uris[0], ch)
            along.append(editor.inline(uris[0]).ms)
    return {
        "cold_median_ms": median(cold), "back_median_ms": median(back), "back_max_ms": maximum(back),
        "back_over_cold": ratio(median(back), median(cold)), "samples": len(back),
        "along_median_ms": median(along), "along_keys": len(along),
    }  # fmt: skip


# --- the engine in this process ------------------------------------------------------------------


def speculation(engine, per_kind: int) -> dict[str, Any]:
    """Generation ms per token with and without drafts on the quality cases' documents (greedy,
    multi-line, 32 tokens), each prompt decoded first (untimed) from an empty cache."""
    from engine import CompletionRequest, SamplingConfig
    from engine.core.speculative import DraftConfig
    from lsp_server.split import split
    from tests.support.cases import build_cases

    rows = []
    kinds = {"code": ("python", "javascript", "c"), "prose": ("prose",)}
    for name, kind_list in kinds.items():
        cases = build_cases(per_kind, seed=11, kinds=kind_list)
        ms = {0: 0.0, 2: 0.0}
        generated = {0: 0, 2: 0}
        same = 0
        for case in cases:
            parts = split(case.document(), len(case.document()))
            request = CompletionRequest(prompt=parts.prompt, required=parts.required, max_tokens=32,
                                        sampling=SamplingConfig(single_line=False))  # fmt: skip
            texts = {}
            for draft in (0, 2, 0, 2):  # alternating, twice
                engine.drafts = DraftConfig(max_draft=draft)
                engine.kv.forget()
                engine.prefetch(request)
                started = time.perf_counter()
                done = engine.complete(request)
                ms[draft] += (time.perf_counter() - started) * 1000
                generated[draft] += done.stats.generated_tokens
                texts.setdefault(draft, done.text)
            same += texts[0] == texts[2]
        plain, drafted = ms[0] / max(1, generated[0]), ms[2] / max(1, generated[2])
        rows.append({"text": name, "prompts": len(cases), "plain_ms_per_token": plain,
                     "drafts_ms_per_token": drafted, "speedup": ratio(plain, drafted),
                     "identical": f"{same}/{len(cases)}"})  # fmt: skip
        _say(f"speculation {name}: {rows[-1]}")
    engine.drafts = DraftConfig(max_draft=engine.config.draft_tokens)
    return {"rows": rows}


CHILD = r"""
import json, sys, time
from engine import Engine, EngineConfig
import llama_cpp
text, threads, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
engine = Engine.load(EngineConfig(threads=threads))
tokens = engine.tokenize(text)
times = []
for _ in range(runs):
    engine.kv.forget()
    started = time.perf_counter()
    engine.kv.logits_after(tokens)
    times.append((time.perf_counter() - started) * 1000)
print(json.dumps({"tokens": len(tokens), "ms": sorted(times)[len(times) // 2], "where": llama_cpp.__file__}))
"""


def _baseline_wheel() -> Path | None:
    """The newest AVX2-only wheel in the cache (scripts/llama-wheel.sh's wheelhouses)."""
    cache = Path(
        os.environ.get("CPC_LSP_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cpc-lsp"
    )
    found = [w for w in (cache / "wheels").glob("*/llama_cpp_python-*.whl") if not w.parent.name.startswith("avx512")]
    return max(found, key=lambda w: w.stat().st_mtime) if found else None


def build(threads: int, rounds: int, wheel: Path | None) -> dict[str, Any]:
    wheel = wheel or _baseline_wheel()
    if wheel is None:
        return {"error": "no AVX2-only wheel found (build one with CPC_LSP_LLAMA_ISA=avx2 scripts/llama-wheel.sh)"}
    with tempfile.TemporaryDirectory(prefix="cpc-lsp-avx2-") as folder:  # removed afterwards
        unpacked = Path(folder)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        for lib in (unpacked / "llama_cpp" / "lib").glob("*"):
            lib.chmod(0o755)
        text = source_text()[20_000:23_300]  # about 840 tokens
        runs: dict[str, list[float]] = {"this build": [], "AVX2-only": []}
        tokens = None
        repo = str(ROOT)
        for _ in range(rounds):
            for name in runs:
                path = repo if name == "this build" else f"{unpacked}{os.pathsep}{repo}"
                env = {**os.environ, "PYTHONPATH": path}
                out = subprocess.run([sys.executable, "-c", CHILD, text, str(threads), "3"], env=env,
                                     capture_output=True, text=True, check=True)  # fmt: skip
                got = json.loads(out.stdout.strip().splitlines()[-1])
                tokens = got["tokens"]
                runs[name].append(got["ms"])
                _say(f"cold decode, {name}: {got['ms']:.0f} ms ({got['where']})")
    ours, base = median(runs["this build"]), median(runs["AVX2-only"])
    flags = subprocess.run(
        [str(ROOT / "scripts" / "llama-wheel.sh"), "--flags"], capture_output=True, text=True
    ).stdout.split()
    return {"tokens": tokens, "this_build_ms": ours, "avx2_ms": base, "speedup": ratio(base, ours),
            "rounds": rounds, "level": flags[0] if flags else None, "baseline_wheel": str(wheel)}  # fmt: skip


# --- tables ----------------------------------------------------------------------------------------


def tables(results: dict[str, Any]) -> list[report.Table]:
    num, times = report.num, report.times
    out: list[report.Table] = []
    for key, model in (("fresh", "the prose model"), ("fresh_code", "Python, the code model")):
        if key not in results:
            continue
        f = results[key]
        body = [[r["case"], num(r["samples"]), num(r["answered"]), num(r["first_suggestion_median_s"], 2),
                 times(r["over_cold"])] for r in f["typing"]]  # fmt: skip
        out.append((f"{key} ({model}): typing at 8 chars/s into a just-opened {num(f['document_tokens'], 0)}-token "
                    "document, s from opening to the first suggestion", ["case", "samples", "answered", "median s", "/ cold request"], body))  # fmt: skip
        body = [[num(r["wait_s"]), "on" if r["prefetch"] else "off", num(r["open_to_suggestion_median_s"], 2),
                 times(r["over_cold"])] for r in f["waits"]]  # fmt: skip
        out.append((f"{key} ({model}): one request some time after opening, s from opening to its suggestion",
                    ["request after s", "prefetch", "open -> suggestion s", "/ cold request"], body))  # fmt: skip
    if "switch" in results:
        s = results["switch"]
        out.append(("switch: back to A after B and C (a line break typed at A's end), ms",
                    ["A cold", "back to A med", "back max", "back / cold", "samples", "then typing along med (keys)"],
                    [[num(s["cold_median_ms"]), num(s["back_median_ms"]), num(s["back_max_ms"]), times(s["back_over_cold"]),
                      num(s["samples"]), f"{num(s['along_median_ms'])} ({s['along_keys']})"]]))  # fmt: skip
    if "cancel" in results:
        out.append(report.cancel_table(results["cancel"]))
    if "speculation" in results:
        body = [[r["text"], num(r["prompts"]), num(r["plain_ms_per_token"]), num(r["drafts_ms_per_token"]),
                 times(r["speedup"]), r["identical"]] for r in results["speculation"]["rows"]]  # fmt: skip
        out.append(("generation: ms per token, plain vs prompt-lookup drafts (verify batch <= 3), greedy, 32 tokens",
                    ["text", "prompts", "plain", "drafts", "speedup", "identical texts"], body))  # fmt: skip
    if "build" in results and "error" not in results["build"]:
        b = results["build"]
        out.append((f"build: cold decode of {num(b['tokens'], 0)} tokens, ms, this build ({b['level']}) vs AVX2-only, "
                    f"child processes alternating ({b['rounds']} rounds)",
                    ["this build", "AVX2-only", "speedup"], [[num(b["this_build_ms"]), num(b["avx2_ms"]), times(b["speedup"])]]))  # fmt: skip
    if "memory" in results:
        m = results["memory"]
        out.append(("memory: server peak RSS, MiB (default memory budget)", ["peak RSS", "KV per 1,000 tokens", "budget"],
                    [[num(m["peak_rss_mib"]), num(m["kv_mib_per_1000_tokens"], 1), f"{m['budget_mib']} MiB"]]))  # fmt: skip
    if results.get("machine"):
        out.append(("machine: threads per part, and the share of the 2 CPUs other processes used meanwhile",
                    ["part", "threads", "other processes' CPU share"],
                    [[part, num(m["threads"]), report.pct(m["others_share"])] for part, m in results["machine"].items()]))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.firstcontact", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {','.join(PARTS)}")
    parser.add_argument("--trials", type=int, default=2, help="documents per fresh/switch case")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--per-kind", type=int, default=6, help="speculation prompts per kind of text")
    parser.add_argument("--rounds", type=int, default=3, help="build comparison rounds")
    parser.add_argument("--baseline-wheel", type=Path, default=None, help="AVX2-only llama-cpp-python wheel")
    parser.add_argument(
        "--code",
        action="store_true",
        help="fresh: the documents opened as Python (the default code model answers), tokens by its count",
    )
    parser.add_argument("--tokens", type=int, default=1900, help="fresh/switch documents' tokens")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    parts = [p for p in args.only.split(",") if p]
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    from engine.local.llama import LlamaModel
    from engine.model_files import resolve_model

    model = LlamaModel(resolve_model(None))
    counter = LlamaModel(resolve_model("qwen2.5-coder-0.5b")) if args.code else model
    count = lambda text: len(counter.tokenize(text.encode(), add_bos=True))  # noqa: E731
    docs = Documents(count, args.tokens)
    machine = results.setdefault("machine", {})
    server_parts = [p for p in ("fresh", "switch", "cancel") if p in parts]
    if server_parts:
        watch = CpuWatch.start()
        client, editor = _server(args.threads, args.max_tokens)
        try:
            if "fresh" in parts:
                key = "fresh_code" if args.code else "fresh"
                results[key] = fresh(editor, docs, args.trials, "python" if args.code else "plaintext")
            if "switch" in parts:
                results["switch"] = switch(editor, docs, args.trials + 1)
            if "cancel" in parts:
                from bench import latency

                results["cancel"] = latency.cancellation(editor, count, quick=False)
            results["memory"] = {"peak_rss_mib": peak_rss_mb(client.pid),
                                 "kv_mib_per_1000_tokens": model.kv_bytes_per_token() * 1000 / 2**20,
                                 "budget_mib": 128, "after": ", ".join(server_parts)}  # fmt: skip
            server_cpu = process_cpu_seconds(client.pid) or 0.0
        finally:
            client.shutdown()
        share = watch.others_share(server_cpu)
        machine.update({part: {"threads": args.threads, "others_share": share} for part in server_parts})
    if "speculation" in parts:
        from engine import Engine, EngineConfig

        watch = CpuWatch.start()
        engine = Engine.load(EngineConfig(threads=args.threads))
        try:
            results["speculation"] = speculation(engine, args.per_kind)
        finally:
            engine.close()
        machine["speculation"] = {"threads": args.threads, "others_share": watch.others_share()}
    if "build" in parts:
        watch = CpuWatch.start()
        before = os.times()
        results["build"] = build(args.threads, args.rounds, args.baseline_wheel)
        after = os.times()
        children = after.children_user + after.children_system - before.children_user - before.children_system
        machine["build"] = {"threads": args.threads, "others_share": watch.others_share(children)}
    report.write_json(args.out, results)
    for table in tables(results):
        print(report.render(table) + "\n")


if __name__ == "__main__":
    main()
