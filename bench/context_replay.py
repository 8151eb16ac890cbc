"""Multi-file replay: type a file of a real project with its siblings open, with and without context.

Projects (none of them this one): Python, the standard library's ``json`` and ``email`` packages
(copied into the work folder);
JavaScript, the npm package ``semver`` (installed with npm into the work folder); C, the ``ujson``
sdist from PyPI (its ``lib/`` and ``python/`` C files). Each project's folder is the workspace
folder; every file of the project's set is opened (didOpen) and then passages of a target file
are typed in place, one character per keystroke, through the real server, with the rest of the
file after the cursor. A suggestion whose next word is exactly right is accepted (one key), as in
bench.replay. Passages are lines that use identifiers another file of the project defines and the
target file does not.

Per request, the cursor is classed: *cross-file* when it is inside an identifier (some of it
typed, more to come) that another file defines and the target does not; *all* is every request.
Reported per model and variant (context off / on): first word right (the share of requests whose
suggested next word is exactly right), characters saved, the cold cost of a request (the first
request of a passage with nothing of it in the KV cache: an unrelated document was served just
before, and the server keeps no other document's KV) and the warm cost of a keystroke inside a
word (prompt tokens decoded, from cpcLsp/stats, and the latency).

The llama.vim-style peer (optional, `--peer`): llama-server with the same model, `/infill` with
the text before and after the cursor and `input_extra` from its own ring buffer: the first 64
lines of each file opened, at most 16 chunks, as llama.vim picks a chunk when a buffer is entered.

`python -m bench.context_replay --models gemma,/path/to/qwen.gguf --limit 2 --threads 1`
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import report
from bench.replay import accepts, next_word
from bench.stats import median, ratio
from lsp_server.chunks import STOP, definitions
from lsp_server.settings import Settings
from lsp_server.split import is_word_char
from tests.support.lsp_client import Editor, LspClient, insert_text

PASSAGE_CHARS = 160
AFTER_CHARS = 1_500
RING_CHUNKS, RING_LINES = 16, 64  # llama.vim's defaults (ring_n_chunks, ring_chunk_size)
LANGUAGE_IDS = {".py": "python", ".js": "javascript", ".c": "c", ".h": "c"}


@dataclass(frozen=True)
class Project:
    name: str
    kind: str  # python | javascript | c
    root: Path
    files: tuple[str, ...]  # opened, relative to root
    targets: tuple[str, ...]  # typed


@dataclass(frozen=True)
class Passage:
    project: Project
    target: str
    start: int
    end: int
    before: str
    text: str
    after: str
    cross: frozenset[str]  # identifiers other files define and the target does not


def projects(work: Path, say) -> list[Project]:
    # The standard library's packages, copied into a plain folder: where Python is installed may be
    # in a git work tree that ignores it (pyenv's), and the server rightly reads nothing git ignores.
    stdlib = work / "python"
    for package in ("json", "email"):
        if not (stdlib / package).is_dir():
            shutil.copytree(Path(sysconfig.get_paths()["stdlib"]) / package, stdlib / package,
                            ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    json_files = tuple(f"json/{n}" for n in ("__init__.py", "decoder.py", "encoder.py", "scanner.py"))
    email_files = tuple(f"email/{n}" for n in ("message.py", "_policybase.py", "charset.py", "utils.py", "errors.py",
                                               "_encoded_words.py", "iterators.py", "generator.py"))  # fmt: skip
    found = [
        Project("json (stdlib)", "python", stdlib, json_files, ("json/__init__.py", "json/decoder.py")),
        Project("email (stdlib)", "python", stdlib, email_files, ("email/message.py", "email/generator.py")),
    ]
    semver = work / "js" / "node_modules" / "semver"
    if not semver.is_dir():
        say("installing the npm package semver@7.6.3 into the work folder")
        (work / "js").mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "semver@7.6.3", "--no-audit", "--no-fund", "--prefix", str(work / "js")],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    found.append(Project("semver (npm)", "javascript", semver,
                         ("classes/range.js", "classes/comparator.js", "classes/semver.js", "internal/re.js",
                          "internal/parse-options.js", "internal/constants.js", "internal/debug.js"),
                         ("classes/range.js", "classes/comparator.js")))  # fmt: skip
    ujson = work / "c" / "ujson-5.10.0"
    if not ujson.is_dir():
        say("downloading the ujson 5.10.0 sdist from PyPI into the work folder")
        (work / "c").mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "ujson==5.10.0",
                        "-d", str(work / "c")], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        with tarfile.open(work / "c" / "ujson-5.10.0.tar.gz") as tar:
            tar.extractall(work / "c", filter="data")
    found.append(Project("ujson (PyPI sdist)", "c", ujson,
                         ("lib/ultrajson.h", "lib/ultrajsonenc.c", "lib/ultrajsondec.c", "python/objToJSON.c",
                          "python/JSONtoObj.c", "python/ujson.c"), ("python/objToJSON.c", "python/JSONtoObj.c")))  # fmt: skip
    return found


def cross_identifiers(project: Project, target: str) -> frozenset[str]:
    own = definitions((project.root / target).read_text())
    others = set()
    for name in project.files:
        if name != target:
            others |= definitions((project.root / name).read_text())
    return frozenset(n for n in others - own if len(n) >= 4 and n not in STOP)


def passages(project: Project, per_target: int, chars: int = PASSAGE_CHARS, targets: int | None = None) -> list[Passage]:
    """`per_target` passages per target (the first `targets` of them): whole lines from a line
    using a cross-file identifier, spread evenly over the file after its first 20 lines."""
    out = []
    for target in project.targets[:targets]:
        text = (project.root / target).read_text()
        cross = cross_identifiers(project, target)
        pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, cross))) + r")\b") if cross else None
        lines = text.splitlines(keepends=True)
        starts = [sum(map(len, lines[:i])) for i in range(len(lines))]
        candidates = [i for i in range(20, len(lines) - 3) if pattern and pattern.search(lines[i]) and _is_code(lines[i])]
        if not candidates:
            continue
        step = max(1, len(candidates) // per_target)
        picked, last_end = [], -1
        for i in candidates[step // 2 :: step]:
            if i <= last_end:
                continue
            j = i
            while j < len(lines) and sum(map(len, lines[i:j])) < chars:
                j += 1
            start, end = starts[i], starts[i] + len("".join(lines[i:j]).rstrip("\n"))
            picked.append(Passage(project, target, start, end, text[:start], text[start:end],
                                  text[end : end + AFTER_CHARS], cross))  # fmt: skip
            last_end = j
            if len(picked) == per_target:
                break
        out += picked
    return out


def _is_code(line: str) -> bool:
    """Not blank and not a comment line (docstrings are let through: they are hard to tell by line)."""
    body = line.strip()
    return bool(body) and not body.startswith(("#", "//", "/*", "*"))


def cursor_class(before: str, rest: str, cross: frozenset[str]) -> str:
    """"cross" inside an identifier another file defines, "word" inside another word, else "other"."""
    if not (before and is_word_char(before[-1]) and rest and is_word_char(rest[0])):
        return "other"
    i = len(before)
    while i > 0 and is_word_char(before[i - 1]):
        i -= 1
    j = 0
    while j < len(rest) and is_word_char(rest[j]):
        j += 1
    return "cross" if before[i:] + rest[:j] in cross else "word"


class Document:
    """An open document with the cursor at its offset (LSP positions in UTF-16, one didChange per insert)."""

    def __init__(self, client: LspClient, uri: str, before: str, after: str, language: str) -> None:
        self.client, self.uri, self.text, self.offset, self.version = client, uri, before + after, len(before), 1
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": self.text}})

    def position(self) -> dict[str, int]:
        before = self.text[: self.offset]
        line_start = before.rfind("\n") + 1
        return {"line": before.count("\n"), "character": len(before[line_start:].encode("utf-16-le")) // 2}

    def insert(self, chars: str) -> None:
        at = self.position()
        self.version += 1
        change = {"range": {"start": at, "end": at}, "text": chars}
        self.client.notify("textDocument/didChange", {"textDocument": {"uri": self.uri, "version": self.version}, "contentChanges": [change]})
        self.text = self.text[: self.offset] + chars + self.text[self.offset :]
        self.offset += len(chars)

    def close(self) -> None:
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": self.uri}})


def start_server(model: str | None, root: Path, threads: int, settings: dict[str, Any]) -> LspClient:
    client = LspClient(["--log-level", "warning"])
    options = {"cpcLsp": {**settings, "threads": threads, **({"model": model} if model else {})}}
    capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}, "synchronization": {}}}
    client.call("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": capabilities,
                               "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
                               "initializationOptions": options})  # fmt: skip
    client.notify("initialized", {})
    message = client.wait_loaded(timeout=300)
    if not message.startswith("loaded"):
        raise RuntimeError(message)
    return client


def _ask(client: LspClient, doc: Document) -> tuple[str | None, float, dict[str, Any]]:
    before = client.call("cpcLsp/stats", None) or {}
    params = {"textDocument": {"uri": doc.uri}, "position": doc.position(), "context": {"triggerKind": 2}}
    reply = client.request("textDocument/inlineCompletion", params, timeout=900)  # a cold one on a loaded machine
    after = client.call("cpcLsp/stats", None) or {}
    engine = after.get("engineAnswers", 0) > before.get("engineAnswers", 0)
    return insert_text(reply), reply.ms, {"decoded": after.get("decodedTokens", 0) if engine else 0,
                                          "prompt": after.get("promptTokens", 0) if engine else None}  # fmt: skip


def replay(client: LspClient, passage: Passage, uri: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The cold request (prefetch off), then the passage typed with prefetch on."""
    language = LANGUAGE_IDS.get(Path(passage.target).suffix, "plaintext")
    # cold: an unrelated document is served first, so nothing of this one is in the KV cache
    cold_uri = "untitled:unrelated"
    unrelated = Document(client, cold_uri, "Nothing in this sentence is like the project's files, so the cache is", "", "plaintext")
    _ask(client, unrelated)
    unrelated.close()
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {**settings, "prefetch": False}}})
    doc = Document(client, uri, passage.before, passage.after, language)
    shown, cold_ms, cold = _ask(client, doc)
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {**settings, "prefetch": True}}})
    requests = []
    pos, target, typed_last = 0, passage.text, False
    try:
        while pos < len(target):
            if requests or pos:  # the cold request above answered the first cursor
                shown, ms, stats = _ask(client, doc)
            else:
                ms, stats = cold_ms, cold
            word_start = doc.offset
            while word_start > 0 and is_word_char(doc.text[word_start - 1]):
                word_start -= 1
            word = doc.text[word_start : doc.offset]
            chunk = next_word(shown[len(word) :]) if shown is not None and shown.startswith(word) else ""
            before, rest = passage.before + target[:pos], target[pos:]
            right = accepts(chunk, rest)
            cls = cursor_class(before, rest, passage.cross)
            requests.append({"class": cls, "right": right, "ms": ms, "decoded": stats["decoded"],
                             "warm": typed_last and len(word) >= 2 and cls != "other"})  # fmt: skip
            took = len(chunk) if right else 1
            doc.insert(target[pos : pos + took])
            typed_last = not right
            pos += took
    finally:
        doc.close()
    saved = len(target) - sum(1 for r in requests if not r["right"])
    return {"cold_ms": cold_ms, "cold_decoded": cold["decoded"], "cold_prompt": cold["prompt"], "chars": len(target),
            "saved": saved, "requests": requests}  # fmt: skip


class RingPeer:
    """llama.vim's request on llama-server: `/infill` with the prefix, the suffix and `input_extra`
    from its ring buffer (the first RING_LINES lines of each file opened, at most RING_CHUNKS)."""

    def __init__(self, server, max_tokens: int) -> None:
        from bench.remote_vs_local import InfillPeer

        self.infill = InfillPeer(server, max_tokens)
        self.max_tokens = max_tokens
        self.ring: list[dict[str, str]] = []

    def opened(self, name: str, text: str) -> None:
        chunk = "".join(text.splitlines(keepends=True)[:RING_LINES])
        self.ring = [c for c in self.ring if c["filename"] != name][-(RING_CHUNKS - 1) :] + [{"filename": name, "text": chunk}]

    def complete(self, before: str, after: str, extra: bool) -> tuple[float, str]:
        """(ms, the text after the cursor it suggests). The body is llama.vim's own
        (bench.infill.llama_vim_request: prefix lines, the line up to the cursor as `prompt`, the
        suffix lines) with the ring in `input_extra`, greedy and without its time limits. A refusal
        raises: an earlier version sent its own body and silently scored every refusal as a miss."""
        from bench.infill import llama_vim_request, local_context

        text = before + after
        ctx = local_context(text, len(before))
        body = {**llama_vim_request(ctx, 0), "input_extra": self.ring if extra else [], "n_predict": self.max_tokens,
                "top_k": 1, "t_max_prompt_ms": 600_000, "t_max_predict_ms": 600_000}  # fmt: skip
        started = time.perf_counter()
        status, answer = self.infill._post(body)
        ms = (time.perf_counter() - started) * 1000
        if status != 200 or not isinstance(answer, dict):
            raise RuntimeError(f"llama-server refused the /infill request ({status}): {str(answer)[:300]}")
        return ms, answer.get("content", "")

    def replay(self, passage: Passage, extra: bool) -> dict[str, Any]:
        requests = []
        pos, target = 0, passage.text
        while pos < len(target):
            before, rest = passage.before + target[:pos], target[pos:]
            ms, added = self.complete(before, passage.after, extra)  # the document: before, typed, after
            chunk = next_word(added)
            right = accepts(chunk, rest)
            requests.append({"class": cursor_class(before, rest, passage.cross), "right": right, "ms": ms, "decoded": None, "warm": False})
            pos += len(chunk) if right else 1
        saved = len(target) - sum(1 for r in requests if not r["right"])
        return {"cold_ms": requests[0]["ms"] if requests else None, "cold_decoded": None, "cold_prompt": None,
                "chars": len(target), "saved": saved, "requests": requests}  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for run in runs:
        for kind in (run["kind"], "all"):
            groups.setdefault((run["model"], run["variant"], kind), []).append(run)
    rows = []
    for (model, variant, kind), rs in groups.items():
        reqs = [q for r in rs for q in r["requests"]]
        cross = [q for q in reqs if q["class"] == "cross"]
        warm = [q for q in reqs if q["warm"]]
        rows.append({
            "model": model, "variant": variant, "kind": kind, "passages": len(rs), "requests": len(reqs),
            "cross_requests": len(cross), "cross_right": sum(q["right"] for q in cross) / len(cross) if cross else None,
            "all_right": sum(q["right"] for q in reqs) / len(reqs) if reqs else None,
            "saved": sum(r["saved"] for r in rs) / sum(r["chars"] for r in rs),
            "cold_ms": median([r["cold_ms"] for r in rs if r["cold_ms"] is not None]),
            "cold_tokens": median([r["cold_decoded"] for r in rs if r["cold_decoded"] is not None]),
            "warm_ms": median([q["ms"] for q in warm]),
            "warm_decoded_median": median([q["decoded"] for q in warm if q["decoded"] is not None]),
            "warm_decoded_zero": sum(q["decoded"] == 0 for q in warm) / len(warm) if warm else None,
            "warm_keystrokes": len(warm),
        })  # fmt: skip
    base = {(r["model"], r["kind"]): r for r in rows if r["variant"] == "context off"}
    for r in rows:
        b = base.get((r["model"], r["kind"]))
        r["cold_over_off"] = ratio(r["cold_ms"], b["cold_ms"]) if b and r["variant"].startswith("context on") else None
    rows.sort(key=lambda r: (r["model"], r["kind"] != "all", r["kind"], r["variant"]))
    return rows


def table(rows: list[dict[str, Any]]) -> report.Table:
    from bench.report import num, pct, times

    header = ["model", "kind", "variant", "passages", "requests", "cross-file cursors", "first word right (cross)",
              "first word right (all)", "chars saved", "cold ms", "cold tokens", "cold / off", "warm ms",
              "warm decoded (median)", "warm keys with 0 decoded"]  # fmt: skip
    body = [[r["model"], r["kind"], r["variant"], num(r["passages"]), num(r["requests"]), num(r["cross_requests"]),
             pct(r["cross_right"]), pct(r["all_right"]), pct(r["saved"]), num(r["cold_ms"], 0), num(r["cold_tokens"], 0),
             times(r["cold_over_off"]), num(r["warm_ms"], 0), num(r["warm_decoded_median"], 0),
             f"{pct(r['warm_decoded_zero'])} of {r['warm_keystrokes']}"] for r in rows]  # fmt: skip
    return "multi-file replay: first word right, characters saved, cold and warm cost, context off vs on", header, body


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.context_replay`: the multi-file replay; results in bench/results/context.json."""
    parser = argparse.ArgumentParser(prog="python -m bench.context_replay", description=main.__doc__.split(":")[0])
    parser.add_argument("--models", default="default", help="comma-separated: 'default' (the server's own) or a path or catalogue name")
    parser.add_argument("--limit", type=int, default=1, help="passages per target file")
    parser.add_argument("--targets", type=int, default=1, help="target files per project (of two)")
    parser.add_argument("--chars", type=int, default=PASSAGE_CHARS, help="about this many characters a passage")
    parser.add_argument("--window", type=int, default=2048, help="contextTokens (the model's context window)")
    parser.add_argument("--kinds", default="python,javascript,c")
    parser.add_argument("--projects", default=None, help="comma-separated project names' first words (json,email,semver,ujson)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--context-tokens", type=int, default=Settings().extra_context_tokens, help="extraContextTokens of the 'on' variant (the server default)")
    parser.add_argument("--peer", action="store_true", help="also the llama.vim-style peer (llama-server, /infill, input_extra)")
    parser.add_argument("--peer-only", action="store_true", help="the peer alone (its rows join an earlier run's with --merge)")
    parser.add_argument("--merge", type=Path, nargs="*", default=[], help="earlier results whose runs join this table")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "cpc-lsp-bench-context")
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "context.json")
    args = parser.parse_args(argv)
    say = lambda m: print(f"[context] {m}", file=sys.stderr, flush=True)  # noqa: E731
    kinds = set(args.kinds.split(","))
    wanted = None if args.projects is None else set(args.projects.split(","))
    items = [p for project in projects(args.work, say) if project.kind in kinds
             and (wanted is None or project.name.split()[0] in wanted)
             for p in passages(project, args.limit, args.chars, args.targets)]  # fmt: skip
    say(f"{len(items)} passages")
    base = {"maxTokens": args.max_tokens, "minConfidence": 0, "alternatives": 0, "memoryBudgetMib": 0,
            "contextTokens": args.window}
    variants = {"context off": {"extraContext": False},
                "context on": {"extraContext": True, "extraContextTokens": args.context_tokens}}  # fmt: skip
    runs: list[dict[str, Any]] = []
    for earlier in args.merge:
        runs += json.loads(earlier.read_text())["runs"]
    for model in filter(None, args.models.split(",")):  # --models "" with --merge: the table of earlier runs
        model_path = None if model == "default" else model
        if args.peer_only:
            runs += peer_runs(model_path, items, args, say, Path(model).name) if model_path else []
            continue
        label = Path(model).name if model_path else "default (Gemma 3 270M)"
        by_project: dict[str, list[Passage]] = {}
        for p in items:
            by_project.setdefault(p.project.name, []).append(p)
        for name, group in by_project.items():
            project = group[0].project
            client = start_server(model_path, project.root, args.threads, base)
            opened: dict[str, Document] = {}
            try:
                for n, passage in enumerate(group):
                    # the siblings open, the target typed in its own place (never open with its whole text)
                    if passage.target in opened:
                        opened.pop(passage.target).close()
                    for rel in project.files:
                        if rel != passage.target and rel not in opened:
                            language = LANGUAGE_IDS.get(Path(rel).suffix, "plaintext")
                            opened[rel] = Document(client, (project.root / rel).as_uri(), (project.root / rel).read_text(), "", language)
                    for variant, settings in variants.items():
                        uri = (project.root / passage.target).as_uri()
                        result = replay(client, passage, uri, {**base, **settings})
                        runs.append({"model": label, "variant": variant, "kind": project.kind, "project": name,
                                     "target": passage.target, "passage": n, **result})  # fmt: skip
                        report.write_json(args.out.with_suffix(".partial.json"), {"runs": runs})  # survives a stop
                        say(f"{label} {name} {passage.target} #{n} {variant}: "
                            f"{sum(q['right'] for q in result['requests'])}/{len(result['requests'])} right, cold {result['cold_ms']:.0f} ms")
            finally:
                client.shutdown()
        if args.peer and model_path:
            runs += peer_runs(model_path, items, args, say, label)
    rows = summarize(runs)
    print(report.render(table(rows)))
    report.write_json(args.out, {"settings": {**base, "threads": args.threads, "context_tokens": args.context_tokens,
                                              "models": args.models, "limit": args.limit,
                                              "targets": args.targets, "chars": args.chars}, "table": rows, "runs": runs})
    return 0


def peer_runs(model: str, items: list[Passage], args, say, label: str) -> list[dict[str, Any]]:
    from tests.support.llama_server import start_llama_server

    runs = []
    server = start_llama_server(slots=1, ctx=args.window, model=model, threads=args.threads,
                                extra_args=("--batch-size", "1024", "--ubatch-size", "512", "--n-predict", str(args.max_tokens)))
    # --n-predict: llama-server sizes input_extra as n_ctx - n_batch - 2 * its own n_predict; its default
    # (-1) made every ring request 3 tokens too long for the context, and the server refused them all
    try:
        peer = RingPeer(server, args.max_tokens)
        for n, passage in enumerate(items):
            peer.ring = []  # the project's siblings only (never the file being typed)
            for rel in passage.project.files:
                if rel != passage.target:
                    peer.opened(rel, (passage.project.root / rel).read_text())
            for variant, extra in (("peer, no ring", False), ("peer, ring (input_extra)", True)):
                result = peer.replay(passage, extra)
                runs.append({"model": label, "variant": variant, "kind": passage.project.kind, "project": passage.project.name,
                             "target": passage.target, "passage": n, **result})  # fmt: skip
                report.write_json(args.out.with_suffix(".partial.json"), {"runs": runs})  # survives a stop
                say(f"peer {passage.project.name} #{n} {variant}: {sum(q['right'] for q in result['requests'])}/{len(result['requests'])} right")
    finally:
        server.stop()
    return runs


if __name__ == "__main__":
    raise SystemExit(main())
