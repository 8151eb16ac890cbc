"""Mid-line benchmark: a span cut out of one line of a real function, the cursor inside a word and
the rest of the line still after it; finished by the model, judged by the function's own tests
(`python -m bench.midline`).

Who it is for: someone editing code, not only appending to it, who wants to know whether the
suggestion meets the text after the cursor: accepted, does the line read right, or does it stop
a character short or retype what is already there?

Cases: bench.humaneval's problems and its cut (the line and the cursor inside a word, by its
fixed rule; the same sources are kept out of every tuning). From the cursor, a span is cut out
and the rest of the line stays, ending the span at up to three places: the end of the cursor's
word, the start of the next word, and the run of closing brackets, quotes and `:;,` that ends
the line. A case's kind is what the text after the cursor begins with: a closing bracket, a
quote, a word, a space, or other punctuation (an opening bracket, a dot, an operator...).

Who answers, on the same cases, on the same GGUF:

- ours: the real language server over stdio, `textDocument/inlineCompletion` at the cursor, the
  settings of bench.functional's "exact + suffix" (one line, the gate off, `maxTokens` 64, the
  text after the cursor in the FIM prompt), or another of its configurations (`--config`: "exact,
  no suffix" is a model that does not see the rest of the line, as any model without FIM tokens),
  or the gate at its default (`--gate`); the item applied as an editor applies it (its range
  replaced by its insertText, the rest of the line kept);
- with `--baseline DIR`, ours again with the server's code from DIR (a checkout of an earlier
  commit: `git archive COMMIT lsp_server engine | tar -x -C DIR`), beside it in the same run;
- llama.vim: its own request to llama-server's `/infill` (bench.infill), as sent (sampled,
  llama-server seeded) and greedy. What it shows after the cursor is its answer's first line with
  the rest of the line after it, and accepting it keeps that rest (llama.vim appends the line's
  suffix to its last line: `s:fim_render`), so its first line is inserted before the rest;
- the line restored (the cut span put back: must pass 100%, checks the harness).

Each answer is judged by the problem's tests (bench.humaneval.passes) and by its text against the
cut span: exact, *stops short* (a proper prefix of the span: accepted, the line is unfinished;
*at the rest* when what is left out has no word character: spaces, closing brackets, quotes,
which the text after the cursor dictates), *runs past* (the span and more: a repeat of the text after the cursor, or
something else), other, or no suggestion.

Results (merged, resumable): bench/results/midline.json. The page: docs/text-after-cursor.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import report
from bench.functional import BASE, CONFIGS, ask, judged
from bench.humaneval import IDENT, FunctionCase, cut_column, cut_line, load_problems
from bench.infill import SEED_ARGS, InfillPeer
from tests.support.llama_server import LlamaServer
from tests.support.lsp_client import Editor, LspClient

OURS, BEFORE = "ours", "ours, baseline"
PEERS = ("llama.vim /infill", "llama.vim /infill, greedy")
RESTORED = "line restored"
REPLACING = "llama.vim /infill, its line for the rest"  # the same answers, read another way
CLOSING = ")]}\"':;,"
KINDS = ("closing bracket", "quote", "word", "space", "punctuation")
CONFIG = "exact + suffix"


def settings_for(config: str, gate: bool) -> dict[str, Any]:
    """Ours: bench.functional's configuration `config`, the confidence gate off or at its default."""
    settings = {**BASE, **CONFIGS[config]}
    return {k: v for k, v in settings.items() if k != "minConfidence"} if gate else settings


def results_path() -> Path:
    return report.output_root() / "bench" / "results" / "midline.json"


def kind_of(rest: str) -> str:
    """What the text after the cursor begins with."""
    first = rest[0]
    if first in ")]}":
        return "closing bracket"
    if first in "\"'`":
        return "quote"
    if first.isalnum() or first == "_":
        return "word"
    return "space" if first.isspace() else "punctuation"


def span_ends(line: str, column: int, word_end: int) -> list[int]:
    """Where the cut span may end (the rest of the line starts), by the module's rule: the word's
    end, the next word's start, the closing run that ends the line; each after the cursor and
    before the line's last non-blank character, each once."""
    ends = [word_end]
    nxt = next((m.start() for m in IDENT.finditer(line, word_end) if m.start() > word_end), None)
    if nxt is not None:
        ends.append(nxt)
    body = line.rstrip()
    run = len(body)
    while run > 0 and body[run - 1] in CLOSING:
        run -= 1
    if run < len(body):
        ends.append(run)
    found: list[int] = []
    for end in ends:
        if column < end < len(body) and end not in found:
            found.append(end)
    return found


def midline_cases(limit: int | None = None) -> list[tuple[str, FunctionCase]]:
    """(case id, case) for the first `limit` problems; `case.rest` is the cut span and
    `case.after` begins with the rest of the line."""
    out = []
    for problem in load_problems()[:limit]:
        prompt, solution = problem["prompt"], problem["canonical_solution"]
        text = prompt + solution
        first_line = prompt.count("\n")
        lines = text.split("\n")
        part = lines[first_line:]
        if not prompt.endswith("\n"):
            part = [""] + part[1:]
        index = cut_line(part)
        if index is None:
            continue
        line_no = first_line + index
        line = lines[line_no]
        cut = cut_column(line)
        if cut is None:
            continue
        column, word = cut
        word_end = column + next(m for m in re.finditer(r"\w+", line[column:]) if m.start() == 0).end()
        line_start = sum(len(x) + 1 for x in lines[:line_no])
        line_end = line_start + len(line)
        for end in span_ends(line, column, word_end):
            case = FunctionCase(
                task_id=problem["task_id"], entry_point=problem["entry_point"], before=text[: line_start + column],
                after=line[end:] + text[line_end:], rest=line[column:end], line=line_no, column=column, word=word,
                test=problem["test"],
            )  # fmt: skip
            out.append((f"{problem['task_id']}@{end}", case))
    return out


def outcome(inserted: str, span: str, rest: str) -> str:
    """How an inserted text compares with the cut span (module docstring)."""
    if inserted == span:
        return "exact"
    if not inserted:
        return "none"
    if span.startswith(inserted):
        left = span[len(inserted) :]
        return "short" if any(ch.isalnum() or ch == "_" for ch in left) else "short at the rest"
    if inserted.startswith(span):
        return (
            "past, retyping the rest"
            if rest.startswith(inserted[len(span) :].rstrip()) or inserted[len(span) :].startswith(rest.rstrip())
            else "past"
        )
    return "other"


def run(args: argparse.Namespace, todo: list[tuple[str, FunctionCase]], out: dict[str, Any], save: Callable[[], None],
        say: Callable[[str], None]) -> None:  # fmt: skip
    part = out.setdefault("cases", {})
    model = {"model": args.model, "threads": args.threads}
    settings = settings_for(args.config, args.gate)
    clients = {OURS: start_server({**settings, **model})}
    if args.baseline:
        clients[BEFORE] = start_server({**settings, **model}, args.baseline)
    server = LlamaServer(slots=1, model=args.model, threads=args.threads, extra_args=SEED_ARGS).start(600)
    peer = InfillPeer(server, slot=0)
    out["llama_server"] = server.command()[1:]
    try:
        editors = {name: Editor(client, encoding="utf-8") for name, client in clients.items()}
        for n, (key, case) in enumerate(todo):
            if key in part:
                continue
            rest = case.after.split("\n")[0]
            row: dict[str, Any] = {"typed": case.before[case.before.rfind("\n") + 1 :], "span": case.rest, "rest": rest,
                                   "kind": kind_of(rest)}  # fmt: skip
            row[RESTORED] = _judge(case, {"inserted": case.rest}, rest)
            uri = f"file:///bench/midline/{key.replace('/', '_').replace('@', '_')}.py"
            for name, editor in editors.items():
                editor.open(uri, case.document, "python")
                row[name] = _judge(case, ask(editor, case, uri), rest)
                editor.close(uri)
            for name, greedy in zip(PEERS, (False, True)):
                ms, line, answer = peer.llama_vim(case.document, case.cursor, greedy=greedy)
                row[name] = _judge(case, {"inserted": line, "ms": ms, "content": answer.get("content")}, rest)
            row[REPLACING] = replacing(case, row[PEERS[0]]["inserted"])
            part[key] = row
            save()
            say(f"{n + 1}/{len(todo)} {key} [{row['kind']}] " + " ".join(
                f"{name}={'P' if row[name]['pass'] else '.'}:{row[name]['outcome']}" for name in (*clients, PEERS[0])))  # fmt: skip
    finally:
        peer.close()
        server.stop()
        for client in clients.values():
            client.shutdown()


def start_server(settings: dict[str, Any], code: Path | None = None) -> LspClient:
    """Our server over stdio, initialized with `settings` and its model loaded; with `code`, the
    server's code from that folder first on its import path (the baseline)."""
    client = LspClient(["--log-level", "warning"], code=code)
    client.initialize({"cpcLsp": settings}, encoding="utf-8", wait_loaded=True, timeout=600)
    return client


def replacing(case: FunctionCase, line: str) -> dict[str, Any]:
    """llama.vim's first line judged as if it replaced the rest of the line (what its accept
    does when its answer has several lines; a one-line answer keeps the rest after it): a reading
    kinder to a model that retypes the rest, for comparison."""
    rest = case.after.split("\n")[0]
    whole = replace(case, after=case.after[len(rest) :], rest=case.rest + rest)
    return {**judged(whole, {"inserted": line}), "span": whole.rest, "rest": "\n",
            "outcome": outcome(line, whole.rest, "\n")}  # fmt: skip


def rejudge(out: dict[str, Any]) -> None:
    """Add the derived rows to the cases already measured (no model work)."""
    cases = dict(midline_cases())
    for key, row in out.get("cases", {}).items():
        if PEERS[0] in row and REPLACING not in row:
            row[REPLACING] = replacing(cases[key], row[PEERS[0]]["inserted"])


def _judge(case: FunctionCase, row: dict[str, Any], rest: str) -> dict[str, Any]:
    return {**judged(case, row), "outcome": outcome(row["inserted"], case.rest, rest)}


# --- summaries and tables ----------------------------------------------------------------------

OUTCOMES = ("exact", "short at the rest", "short", "past, retyping the rest", "past", "other", "none")


def summary(cases: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """who -> kind (and "all") -> cases, passed, and a count per outcome."""
    rows = list(cases.values())
    names = [k for k in (rows[0] if rows else {}) if isinstance(rows[0][k], dict)]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        per: dict[str, dict[str, Any]] = {}
        for kind in (*KINDS, "all"):
            got = [r for r in rows if name in r and (kind == "all" or r["kind"] == kind)]
            if not got:
                continue
            seen = [
                outcome(r[name]["inserted"], r[name].get("span", r["span"]), r[name].get("rest", r["rest"]))
                for r in got
            ]
            entry = {"cases": len(got), "passed": sum(r[name]["pass"] for r in got)}
            entry.update({o: seen.count(o) for o in OUTCOMES})
            per[kind] = entry
        out[name] = per
    return out


def tables(out: dict[str, Any]) -> list[report.Table]:
    s = summary(out.get("cases", {}))
    if not s:
        return []
    model = Path(str(out.get("model", ""))).name + f", ours: {out.get('config', CONFIG)}"
    model += (
        ", the gate at its default"
        if "minConfidence" not in out.get("settings", {"minConfidence": 0})
        else ", the gate off"
    )
    names = [n for n in (OURS, BEFORE, *PEERS, REPLACING, RESTORED) if n in s]
    by_kind = []
    for kind in (*KINDS, "all"):
        row = [kind, report.num(s[names[0]].get(kind, {}).get("cases"))]
        for name in names[:-1]:
            e = s[name].get(kind)
            row.append("-" if e is None else f"{report.pct(e['passed'] / e['cases'])} ({e['passed']})")
        by_kind.append(row)
    first = ((f"midline: HumanEval lines with a span cut out, cursor inside a word, the rest of the line after it; "
              f"the function's tests pass ({model})"),
             ["text after the cursor begins with", "cases", *names[:-1]], by_kind)  # fmt: skip
    outcome_rows = []
    for name in names[:-1]:
        for kind in (*KINDS, "all"):
            e = s[name].get(kind)
            if e is not None:
                outcome_rows.append([name, kind, report.num(e["cases"]), *(report.num(e[o]) for o in OUTCOMES)])
    second = (
        "midline: the suggestion against the cut span (short: a proper prefix of it; past: it and more)",
        ["who", "kind", "cases", *OUTCOMES],
        outcome_rows,
    )
    restored = s[RESTORED]["all"]
    third = (
        "midline: the harness (the cut span put back)",
        ["cases", "passed"],
        [[report.num(restored["cases"]), report.num(restored["passed"])]],
    )
    return [first, second, third]


def print_tables(out: dict[str, Any], markdown: bool = False) -> None:
    for table in tables(out):
        print(("\n" + report.markdown(table)) if markdown else ("\n" + report.render(table)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.midline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="catalogue name or GGUF path (needs FIM tokens)")
    parser.add_argument("--limit", type=int, default=None, help="the first N HumanEval problems (default: all 164)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", type=Path, default=None, help="also ours with the server's code from this folder")
    parser.add_argument(
        "--config",
        default=CONFIG,
        choices=list(CONFIGS),
        help='ours: a configuration of bench.functional ("exact, no suffix": the model does not see the rest of the line)',
    )
    parser.add_argument("--gate", action="store_true", help="ours with the confidence gate at its default (else off)")
    parser.add_argument(
        "--out", type=Path, default=None, help="results JSON (resumed; default bench/results/midline.json)"
    )
    parser.add_argument("--fresh", action="store_true", help="start anew instead of resuming from the results file")
    parser.add_argument("--render", action="store_true", help="measure nothing: print the results file's tables")
    parser.add_argument("--markdown", action="store_true", help="with --render: the tables as markdown")
    parser.add_argument(
        "--rejudge", action="store_true", help="measure nothing: add the derived rows to the results file"
    )
    args = parser.parse_args(argv)
    path = args.out or results_path()
    out: dict[str, Any] = json.loads(path.read_text()) if path.is_file() and not args.fresh else {}
    if args.render:
        print_tables(out, args.markdown)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    if args.rejudge:
        rejudge(out)

    def save() -> None:
        out["summary"] = summary(out.get("cases", {}))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        os.replace(tmp, path)

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    if args.rejudge:
        save()
        print_tables(out)
        return 0
    todo = midline_cases(args.limit)
    out.update({"model": args.model, "threads": args.threads, "settings": settings_for(args.config, args.gate), "config": args.config, "cases_total": len(todo),
                "command": "python -m bench.midline " + " ".join(sys.argv[1:] if argv is None else argv)})  # fmt: skip
    run(args, todo, out, save, say)
    save()
    print_tables(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
