"""Why a cross-file probe is missed: is the name's definition in the prompt, and does the model use it?

For the probes of bench.crossfile, at each request the server would make (the line start, then 1
to 3 letters of the identifier), this replays the server's own context chooser with its state
(lsp_server.context.ContextChooser: the choice kept between line starts), builds the request the
server would send (its pipeline, one line: tests.support.asking) and, with `--model`, the
exact prompt tokens the engine decodes (Engine.prompt_tokens). Per request it reports:

- whether the chosen context *defines* the identifier (bench.crossfile.defined_in) or mentions it;
- the model's log-probability of the identifier's rest, with the context and without it, at the
  same cursor (teacher-forced, on the engine's KV cache), and what the engine suggests.

If the definition is in view and the probability does not move, the layout is at fault; if it is
not in view, the chooser is. `--dump DIR` writes each prompt's text. Run it on the tune split only.

`python -m bench.crossfile_why --split tune --targets 1 --per-target 6 --first-use --model qwen2.5-coder-0.5b`
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from bench import report
from bench.crossfile import UNSEEN_BEFORE_CHARS, WORK, Probe, Project, defined_in, probes, projects, states

BASE = {"maxTokens": 16, "minConfidence": 0, "alternatives": 0, "contextTokens": 2048, "prefetch": False}


def server_settings(extra_context: bool, budget: int, window: int):
    from lsp_server.settings import apply

    settings, problems = apply(__import__("lsp_server.settings", fromlist=["Settings"]).Settings(),
                               {**BASE, "contextTokens": window, "extraContext": extra_context,
                                "extraContextTokens": budget})  # fmt: skip
    assert not problems, problems
    return settings


class Replay:
    """The server's context state for one target: the siblings open, the target typed probe by probe."""

    def __init__(self, project: Project, target: str, budget: int, window: int = 2048) -> None:
        from lsp_server.context import ContextChooser
        from lsp_server.documents import Document

        self.project, self.target, self.budget, self.window = project, target, budget, window
        self.chooser = ContextChooser()
        self.chooser.workspace.set_roots([str(project.root)])
        self.docs = {(project.root / rel).as_uri(): Document((project.root / rel).as_uri(), (project.root / rel).read_text())
                     for rel in project.files if rel != target}  # fmt: skip
        self.uri = (project.root / target).as_uri()

    def context(self, text: str, cursor: int):
        from lsp_server.documents import Document

        return self.chooser.context_for(
            self.uri, Document(self.uri, text), cursor, self.docs.items(), self.budget, self.window
        )


def request(text: str, cursor: int, settings, context):
    from tests.support.asking import asked, one_line

    return asked(
        text, cursor, one_line(settings), context=context
    ).request  # the server's request, one line (as measured)


def word_logprob(engine, prompt: tuple[int, ...], rest: str) -> tuple[float, int]:
    """log P(the tokens spelling `rest`) after `prompt`, teacher-forced; and the first token's rank."""
    import numpy as np

    tokens = engine.suffix_tokens(rest)
    total, rank = 0.0, -1
    for i, token in enumerate(tokens):
        logits = np.asarray(engine.kv.logits_after(prompt + tuple(tokens[:i])), dtype=np.float64)
        top = logits.max()
        logz = top + math.log(np.exp(logits - top).sum())
        total += float(logits[token] - logz)
        if i == 0:
            rank = int((logits > logits[token]).sum())
    return total, rank


VARIANTS = ("off", "server", "line", "typed", "oracle")


def contexts(replay: Replay, text: str, cursor: int, line_text: str, line_cursor: int, word: str, server_context):
    """The context of each variant at this request: the server's (kept state), chosen afresh at
    this line's start, chosen at this very request (the typed letters count), and the server's
    with the identifier's own definition lines added (does the model copy what it is shown?)."""
    from engine import RepoContext
    from lsp_server.context import Chosen, budget_for, view_chars
    from lsp_server.documents import Document

    chooser, uri, budget = replay.chooser, replay.uri, replay.budget
    path, _ = chooser.workspace.describe(uri)

    def fresh(t: str, c: int, extra=()):
        chooser.view_chars = view_chars(replay.window, budget_for(t, c, budget, replay.window))
        chosen = chooser.choose(uri, Document(uri, t), c, replay.docs.items(), budget_for(t, c, budget, replay.window))
        if extra:
            chosen = Chosen(tuple(sorted({*chosen.entries, *extra}, key=lambda e: (e.path, e.line))), chosen.chunks)
        return RepoContext(
            chosen.files(), path=path, name=chooser.workspace.name, max_tokens=budget_for(t, c, budget, replay.window)
        )

    doc = Document(uri, text)
    defining = tuple(
        e for s in chooser.sources(uri, doc, replay.docs.items()) for e in chooser.outliner.entries(s) if e.name == word
    )
    return {"off": None, "server": server_context, "line": fresh(line_text, line_cursor), "typed": fresh(text, cursor),
            "oracle": fresh(line_text, line_cursor, defining[:2])}  # fmt: skip


def diagnose(
    project: Project, target: str, items: list[Probe], args, engine=None, dump: Path | None = None
) -> list[dict[str, Any]]:
    """One row per request (probe, letters typed) with the replayed context."""
    full = (project.root / target).read_text()
    replay = Replay(project, target, args.context_tokens, args.window)
    on = server_settings(True, args.context_tokens, args.window)
    rows = []
    last_choice_line = None
    choices = replay.chooser.choices
    variants = args.variants.split(",")
    for probe in items:
        line_state = None
        for text, cursor, k in states(full, probe, args.place == "typing"):
            context = replay.context(text, cursor)
            if replay.chooser.choices != choices:
                choices, last_choice_line = replay.chooser.choices, text.count("\n", 0, cursor) + 1
            if not k:
                line_state = (text, cursor)
                continue
            if k > args.letters:
                continue
            row: dict[str, Any] = {
                "project": project.name, "target": target, "word": probe.word, "cls": probe.cls, "k": k,
                "line": full.count("\n", 0, probe.start) + 1, "chosen_at_line": last_choice_line,
                "in_file_before": re.search(rf"\b{re.escape(probe.word)}\b", full[: probe.line_start]) is not None,
                "in_view": re.search(rf"\b{re.escape(probe.word)}\b", full[: probe.line_start][-UNSEEN_BEFORE_CHARS:]) is not None,
            }  # fmt: skip
            for name, ctx in contexts(replay, text, cursor, *line_state, probe.word, context).items():
                if name not in variants:
                    continue
                shown = "".join(f.text for f in ctx.files) if ctx else ""
                row[f"defines_{name}"] = probe.word in defined_in(shown, project.kind)
                if name == "server":
                    row["context_files"] = [f.path for f in ctx.files] if ctx else []
                    row["context_chars"] = len(shown)
                if engine is None:
                    continue
                req = request(text, cursor, on, ctx)
                prompt = engine.request_prompt(req)
                body = b"".join(engine.vocab.pieces[t] for t in prompt).decode("utf-8", "replace")
                before_file = body.split("<|fim_prefix|>")[0] if ctx else ""
                row[f"in_prompt_{name}"] = probe.word in defined_in(before_file, project.kind)
                lp, rank = word_logprob(engine, prompt, req.required + probe.word[k:])
                answer = engine.complete(req)
                said = (answer.text or "")[len(req.required) - k :]  # from the word's start
                row[f"logp_{name}"], row[f"rank_{name}"] = round(lp, 2), rank
                row[f"said_{name}"] = said[:30]
                row[f"right_{name}"] = (
                    said.startswith(probe.word) and re.match(r"\w", said[len(probe.word) : len(probe.word) + 1]) is None
                )
                row[f"prompt_tokens_{name}"] = len(prompt)
                if dump is not None:
                    dump.mkdir(parents=True, exist_ok=True)
                    (dump / f"{project.name}-{row['line']}-{probe.word}-k{k}-{name}.txt").write_text(body)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.crossfile_why", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--split",
        default="tune",
        choices=("tune", "tune2"),
        help="the tune splits only: never look into the held-out projects",
    )
    parser.add_argument("--projects", default=None)
    parser.add_argument("--targets", type=int, default=1)
    parser.add_argument("--per-target", type=int, default=6)
    parser.add_argument("--first-use", action="store_true")
    parser.add_argument("--place", default="typing", choices=("in place", "typing"))
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--context-tokens", type=int, default=1024, help="extraContextTokens (the server default)")
    parser.add_argument("--cross-only", action="store_true", help="only the cross probes")
    parser.add_argument(
        "--unseen-only",
        action="store_true",
        help="only the cross probes at a name's first use (not in the UNSEEN_BEFORE_CHARS before)",
    )
    parser.add_argument("--model", default=None, help="with a model: the prompt tokens, log-probabilities and answers")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="off, server (the server's kept choice), line (chosen afresh at the line start), typed (at the request), oracle",
    )
    parser.add_argument("--letters", type=int, default=3, help="requests after 1..N letters")
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "crossfile-why.json")
    args = parser.parse_args(argv)
    chosen = [p for p in projects(WORK, lambda m: None) if p.split == args.split
              and (args.projects is None or p.name in args.projects.split(","))]  # fmt: skip
    engine = None
    if args.model:
        from engine import Engine, EngineConfig

        engine = Engine.load(
            EngineConfig(model_path=args.model, context_tokens=args.window, threads=args.threads, memory_budget_mib=0)
        )
    rows = []
    for project in chosen:
        for target in project.targets[: args.targets]:
            items = probes(project, target, args.per_target, first_use=args.first_use)
            if args.cross_only or args.unseen_only:
                items = [p for p in items if p.cls == "cross"]
            if args.unseen_only:
                text = (project.root / target).read_text()
                items = [
                    p
                    for p in items
                    if not re.search(rf"\b{re.escape(p.word)}\b", text[: p.line_start][-UNSEEN_BEFORE_CHARS:])
                ]
            rows += diagnose(project, target, items, args, engine, args.dump)
    report.write_json(args.out, {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows})
    print(report.render(summary(rows, args.variants.split(","))))
    return 0


def summary(rows: list[dict[str, Any]], variants: list[str]) -> report.Table:
    """Per kind of cross probe (unseen: not in the file's text before the line; repeat), the
    requests whose prompt holds the identifier's definition, and (with a model) those right."""
    header = ["probes", "requests", *[f"{v}: defined" for v in variants if v != "off"],
              *[f"{v}: right" for v in variants if rows and f"right_{v}" in rows[0]]]  # fmt: skip
    body = []
    for kind in ("unseen", "repeat"):
        rs = [r for r in rows if r["cls"] == "cross" and r["in_view"] == (kind == "repeat")]
        body.append([kind, str(len(rs)), *[f"{sum(r[f'defines_{v}'] for r in rs)}" for v in variants if v != "off"],
                     *[f"{sum(r[f'right_{v}'] for r in rs)}" for v in variants if rows and f"right_{v}" in rows[0]]])  # fmt: skip
    return "cross probes of the tune split(s): is the definition in the prompt, is the word right", header, body


if __name__ == "__main__":
    raise SystemExit(main())
