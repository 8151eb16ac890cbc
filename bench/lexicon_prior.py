"""The lexicon on mid-word cases: choose its prior on one set, check it on another, per language.

A case's document here is the text before the cursor *and* the text after the cut word (up to
`AFTER_CHARS`), as when a word is typed in place: the lexicon sees the words before and after the
cursor, never the rest of the word being typed.

- `tune` (in process, engine only): for every case of the tuning set, the model's own word and
  every document candidate scored once with a generous budget; `sweep` then replays the choice
  for any prior offline, so choosing the prior costs one pass.
- `server_quality` (the real server over LSP): each case asked twice, lexicon off then on (the
  second request reuses the first one's prompt), on any set. The check set is only ever run here.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import report
from bench.quality import LANGUAGES, first_word
from engine.core.sequence import PathRows
from engine.core.word_choice import WordScorer
from lsp_server.document_words import Lexicon
from lsp_server.settings import Settings
from tests.support.asking import alone, asked, shown
from tests.support.cases import KINDS, Case, read_text
from tests.support.lsp_client import Editor, insert_text

AFTER_CHARS = 1_000
PRIORS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)
TUNE_BUDGET = 32


def document(case: Case) -> tuple[str, int]:
    """(text, cursor): before the cursor, then what follows the cut word."""
    text = read_text(Path(case.file)) or ""
    end = case.word_start + len(case.word)
    after = text[end : end + AFTER_CHARS]
    line = after.rfind("\n")
    if line > 0:
        after = after[: line + 1]
    before = text[case.context_start : case.offset]
    return before + after, len(before)


@dataclass(frozen=True)
class Scored:
    case: int
    kind: str
    word: str  # the right answer
    base: str  # the model's own word (exact method, no lexicon)
    base_score: float | None
    base_in_document: bool  # among the candidates the server would send: gets the prior too
    candidates: list[tuple[str, float | None, int]]  # (word, score, count in the document)


def tune(engine, cases: list[Case], max_tokens: int = 8) -> list[Scored]:
    """Score the model's word and every candidate (up to 8, most frequent first) per case."""
    settings = alone(Settings(max_tokens=max_tokens))
    out = []
    for i, case in enumerate(cases):
        text, cursor = document(case)
        lexicon = Lexicon()
        lexicon.opened("doc", text)
        step = asked(text, cursor, settings)
        parts, request = step.snapshot.parts, step.request
        completion = engine.complete(request)
        found = shown(step, completion)
        base = first_word(found.insert_text) if found else parts.word
        whitespace = parts.required[: len(parts.required) - len(parts.word)]
        sent = lexicon.candidates(parts.word)
        candidates = [c for c in sent if c != base]
        tokens = engine.prompt_tokens(request, max_tokens + len(parts.required.encode()) + 64)
        rows = PathRows(engine.kv, tokens, threading.Event())
        scorer = WordScorer(engine.vocab, rows, engine._spell, TUNE_BUDGET)
        base_score = scorer.score((whitespace + base).encode()) if base else None
        scored = [(c, scorer.score((whitespace + c).encode()), lexicon.count(c)) for c in candidates]
        out.append(Scored(i, case.kind, case.word, base, base_score, base in sent, scored))
    return out


def pick(s: Scored, prior: float) -> str:
    """The word the lexicon chooses for one case at `prior`, as engine.core.word_choice.choose does."""
    if s.base_score is None or not s.candidates:
        return s.base
    best, best_score = s.base, s.base_score + (prior if s.base_in_document else 0.0)
    for word, score, _ in s.candidates:
        if s.base.startswith(word):  # engine.core.word_choice.choose skips these: they cannot change the word
            continue
        if score is not None and score + prior > best_score:
            best, best_score = word, score + prior
    return best


def sweep(scored: list[Scored], priors=PRIORS) -> list[dict[str, Any]]:
    """Accuracy per prior (None: no lexicon) and kind, replayed offline from the scores."""
    rows = []
    for prior in (None, *priors):
        row: dict[str, Any] = {"prior": prior}
        by: dict[str, list[bool]] = defaultdict(list)
        for s in scored:
            chosen = s.base if prior is None else pick(s, prior)
            by[s.kind].append(chosen == s.word)
            by["all"].append(chosen == s.word)
        for kind, flags in by.items():
            row[kind] = sum(flags) / len(flags)
        rows.append(row)
    return rows


def server_quality(
    editor: Editor, cases: list[Case], prior: float, decodes: int, set_name: str
) -> list[dict[str, Any]]:
    """Each case through the real server: lexicon off, then on. One row per case and setting."""
    out = []
    for i, case in enumerate(cases):
        text, cursor = document(case)
        uri = f"file:///bench/lexicon/{set_name}/{i}-{case.kind}.txt"
        editor.open(uri, text, LANGUAGES[case.kind])
        line = text.count("\n", 0, cursor)
        column = len(text[text.rfind("\n", 0, cursor) + 1 : cursor].encode("utf-16-le")) // 2
        params = {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": column},
            "context": {"triggerKind": 2},
        }
        typed = case.typed
        for on in (False, True):
            settings = {"lexicon": on, "lexiconPrior": prior, "lexiconDecodes": decodes}
            editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": settings}})
            reply = editor.client.request("textDocument/inlineCompletion", params)
            shown = insert_text(reply)
            stats = editor.stats() or {}
            finished = first_word(shown) if shown is not None else typed
            out.append({
                "set": set_name, "case": i, "kind": case.kind, "lexicon": on, "suggestion": shown,
                "correct": finished == case.word, "begins_with_typed": shown is None or shown.startswith(typed),
                "lexicon_decodes": stats.get("lexiconDecodes"), "changed": stats.get("lexiconChanged"),
                "ms": reply.ms,
            })  # fmt: skip
        editor.close(uri)
    return out


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accuracy per set, lexicon off/on and kind; the gain in points."""
    by: dict[tuple[str, bool, str], list[bool]] = defaultdict(list)
    begins: dict[tuple[str, bool], list[bool]] = defaultdict(list)
    for r in rows:
        for kind in (r["kind"], "all"):
            by[(r["set"], r["lexicon"], kind)].append(r["correct"])
        begins[(r["set"], r["lexicon"])].append(r["begins_with_typed"])
    table = []
    for set_name in dict.fromkeys(r["set"] for r in rows):
        for on in (False, True):
            row: dict[str, Any] = {"set": set_name, "lexicon": on}
            for kind in (*KINDS, "all"):
                flags = by.get((set_name, on, kind))
                row[kind] = sum(flags) / len(flags) if flags else None
            row["cases"] = len(by[(set_name, on, "all")])
            row["begins_with_typed"] = sum(begins[(set_name, on)]) / len(begins[(set_name, on)])
            table.append(row)
    return table


def scored_json(scored: list[Scored]) -> list[dict[str, Any]]:
    return [asdict(s) for s in scored]


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.lexicon_prior tune|check`: the prior sweep on the tuning set (in process), or both
    sets through the real server at one prior. Results go to bench/results/lexicon.json."""
    import argparse
    import json
    import sys
    import time

    from bench.machine import CpuWatch, process_cpu_seconds
    from tests.support.cases import build_cases, check_cases, fingerprint

    parser = argparse.ArgumentParser(prog="python -m bench.lexicon_prior", description=main.__doc__.split("\n")[0])
    parser.add_argument("what", choices=("tune", "check"))
    parser.add_argument("--per-kind", type=int, default=50)
    parser.add_argument("--prior", type=float, default=Settings().lexicon_prior)
    parser.add_argument("--decodes", type=int, default=Settings().lexicon_decodes)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "lexicon.json")
    args = parser.parse_args(argv)
    tuning = build_cases(args.per_kind, 0)
    check = check_cases(args.per_kind, tuning)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results["sets"] = {"tuning": {"seed": 0, "count": len(tuning), "fingerprint": fingerprint(tuning)},
                       "check": {"seed": 1, "count": len(check), "fingerprint": fingerprint(check),
                                 "files_shared_with_tuning": len({c.file for c in check} & {c.file for c in tuning})}}  # fmt: skip
    watch, started = CpuWatch.start(), time.perf_counter()
    if args.what == "tune":
        from engine import Engine, EngineConfig

        engine = Engine.load(EngineConfig(threads=args.threads))
        try:
            scored = tune(engine, tuning)
        finally:
            engine.close()
        results["tune"] = {"sweep": sweep(scored), "scored": scored_json(scored)}
        for row in results["tune"]["sweep"]:
            print(row)
    else:
        from tests.support.lsp_client import LspClient

        with LspClient(["--log-level", "warning"]) as client:
            client.initialize({"cpcLsp": {"maxTokens": 8, "threads": args.threads}})
            editor = Editor(client)
            rows = server_quality(editor, tuning, args.prior, args.decodes, "tuning")
            rows += server_quality(editor, check, args.prior, args.decodes, "check")
            cpu = process_cpu_seconds(client.pid) or 0.0
        results["check"] = {"prior": args.prior, "decodes": args.decodes, "table": summarize(rows), "rows": rows,
                            "other_processes_cpu_share": watch.others_share(cpu)}  # fmt: skip
        for row in results["check"]["table"]:
            print(row)
    results.setdefault("seconds", {})[args.what] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(f"{time.perf_counter() - started:.0f} s; {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
