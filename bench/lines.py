"""Line replay: code typed keystroke by keystroke, a whole line accepted when it is exactly right.

A mode of the typing replay (bench/replay.py: the same passages, the same `_Cursor`), for
multi-line suggestions. Each passage of code is typed *in place* (the rest of its file stays after
the cursor, so a suggestion can retype it). After every keystroke the server is asked; the
simulated user takes the suggestion's lines for as long as each is exactly right to its end (the
first one is the rest of the cursor's line), in one accept, and asks again. Otherwise one
character is typed.

Server variants: `multiLine` "off", "block" and "always". The peer is llama-cpp-python's own
`create_completion` on the same model (text before the cursor, partial word in it, temperature 0),
once single-line (a line-break stop, `maxTokens`) and once multi-line (`multiLineTokens`, no stop).

Counted: lines accepted (with something on them), characters accepted, and for every multi-line
suggestion shown whether accepting all of it would leave the document's brackets less balanced
(checked here, independently of lsp_server.block: unmatched brackets of the text around the
cursor, strings and comments left out, with and without the insertion) or retype the next line
after the cursor. The request right after each accept is timed apart: "after accept" (deliverable
5: the rest is answered from what was shown, with no engine work).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.quality import LANGUAGES
from bench.replay import Passage, _Cursor, accepts, next_word
from bench.stats import median, ratio
from tests.support.lsp_client import Editor

CODE_KINDS = ("python", "javascript", "c")
WINDOW = 2_000  # characters around the cursor whose brackets are compared
_STRING = re.compile(r"""'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"|`(?:\\.|[^`\\\n])*`|//[^\n]*|#\s[^\n]*""")
_PAIRS = {")": "(", "]": "[", "}": "{"}


def accepted_lines(added: str, rest: str) -> tuple[int, int]:
    """(characters, lines) taken from a suggestion adding `added` where the code goes on with
    `rest`: its lines in order while each is exactly right to its end (the first is the rest of
    the cursor's line; an empty one is passed over), counting lines with something on them."""
    taken = lines = pos = 0
    for i, line in enumerate(added.split("\n")):
        piece = line if i == 0 else "\n" + line
        end = pos + len(piece)
        if not rest.startswith(piece, pos) or (end < len(rest) and rest[end] != "\n"):
            break
        pos = end
        if line.strip():
            lines += 1
            taken = pos
    return taken, lines


def unmatched(text: str) -> int:
    """Brackets that match nothing in `text` (strings and line comments left out)."""
    stack: list[str] = []
    lost = 0
    for ch in _STRING.sub("", text):
        if ch in "([{":
            stack.append(ch)
        elif ch in _PAIRS:
            if stack and stack[-1] == _PAIRS[ch]:
                stack.pop()
            else:
                lost += 1
    return lost + len(stack)


def unbalances(before: str, added: str, after: str) -> bool:
    """Accepting `added` leaves more unmatched brackets around the cursor than there were."""
    head, tail = before[-WINDOW:], after[:WINDOW]
    return unmatched(head + added + tail) > unmatched(head + tail)


def retypes(added: str, after: str) -> bool:
    """A line of `added` after its first is the next non-blank line after the cursor's line."""
    following = next((line.strip() for line in after.split("\n")[1:] if line.strip()), None)
    return following is not None and any(line.strip() == following for line in added.split("\n")[1:])


@dataclass
class _Tally:
    typed: int = 0
    accepted: int = 0
    lines: int = 0
    accepts: int = 0
    shown: int = 0
    multi: int = 0  # suggestions spanning lines
    unbalanced: int = 0
    retyped: int = 0
    ms: list[float] = field(default_factory=list)
    after_accept_ms: list[float] = field(default_factory=list)
    after_accept_carried: int = 0
    words: bool = False  # the word rule (bench.replay's: the next word, when exactly right) instead of lines

    def step(self, before: str, after: str, rest: str, added: str | None) -> int:
        """One suggestion (`added`, None: nothing shown): check it, accept its right lines or type a character."""
        if added:
            self.shown += 1
            if "\n" in added.rstrip():
                self.multi += 1
                self.unbalanced += unbalances(before, added, after)
                self.retyped += retypes(added, after)
        if self.words:
            chunk = next_word(added or "")
            taken, lines = (len(chunk), 0) if accepts(chunk, rest) else (0, 0)
        else:
            taken, lines = accepted_lines(added or "", rest)
        if taken:
            self.accepted += taken
            self.lines += lines
            self.accepts += 1
            return taken
        self.typed += 1
        return 1

    def result(self, chars: int, passage_lines: int) -> dict[str, Any]:
        return {
            "chars": chars, "passage_lines": passage_lines, "typed": self.typed, "accepted": self.accepted,
            "lines": self.lines, "accepts": self.accepts, "shown": self.shown, "multi": self.multi,
            "unbalanced": self.unbalanced, "retyped": self.retyped, "ms": self.ms,
            "after_accept_ms": self.after_accept_ms, "after_accept_carried": self.after_accept_carried,
        }  # fmt: skip


def _lines_of(text: str) -> int:
    return sum(1 for line in text.split("\n") if line.strip())


def replay_server(editor: Editor, passage: Passage, uri: str, words: bool = False) -> dict[str, Any]:
    cursor = _Cursor(editor, uri, passage.before, passage.after, LANGUAGES[passage.kind])
    target, pos = passage.text, 0
    tally = _Tally(words=words)
    after_accept = False
    try:
        while pos < len(target):
            params = {"textDocument": {"uri": uri}, "position": cursor.position(), "context": {"triggerKind": 2}}
            carried = (editor.stats() or {}).get("carried", 0) if after_accept else 0
            reply = editor.client.request("textDocument/inlineCompletion", params)
            tally.ms.append(reply.ms)
            if after_accept:
                tally.after_accept_ms.append(reply.ms)
                tally.after_accept_carried += (editor.stats() or {}).get("carried", 0) > carried
            items = reply.result or []
            added = items[0]["insertText"][len(cursor.word()) :] if items else None
            took = tally.step(passage.before + target[:pos], passage.after, target[pos:], added)
            after_accept = took > 1
            cursor.insert(target[pos : pos + took])
            pos += took
    finally:
        cursor.close()
    return tally.result(len(target), _lines_of(target))


def replay_peer(peer, passage: Passage, max_tokens: int, multi_line: bool, words: bool = False) -> dict[str, Any]:
    """The peer's completion of the text before the cursor at each step. While the typed text
    follows its last output, the rest of that output stands for its next answer (at temperature 0
    it is the same continuation, up to a token boundary) and no call is made: this keeps a
    multi-line peer's run short. Latency is measured on the calls made."""
    target, pos = passage.text, 0
    tally = _Tally(words=words)
    after_accept = False
    last_prompt, last_output = None, ""
    while pos < len(target):
        prompt = passage.before + target[:pos]
        typed = prompt[len(last_prompt) :] if last_prompt is not None and prompt.startswith(last_prompt) else None
        if typed is not None and last_output.startswith(typed) and last_output[len(typed) :].strip():
            added = last_output[len(typed) :]
        else:
            started = time.perf_counter()
            out = peer.llm.create_completion(
                prompt, max_tokens=max_tokens, temperature=0.0, stop=[] if multi_line else ["\n"]
            )
            ms = (time.perf_counter() - started) * 1000
            tally.ms.append(ms)
            if after_accept:
                tally.after_accept_ms.append(ms)
            added = out["choices"][0]["text"]
            last_prompt, last_output = prompt, added
        took = tally.step(prompt, passage.after, target[pos:], added if added.strip() else None)
        after_accept = took > 1
        pos += took
    return tally.result(len(target), _lines_of(target))


def run(
    editor: Editor, peer, items: list[Passage], settings: dict[str, Any], say=print, save=None, words: bool = False
) -> dict[str, Any]:
    """Every code passage for each `multiLine` variant and the two peers; `save(results)` after
    each passage (a long run leaves what it measured so far). With `words`: the word rule, the
    default `multiLine` and the one-line peer only (the keystroke after accept-next-word)."""
    runs = []
    variants = ("block",) if words else ("off", "block", "always")
    peers = (
        ((False, settings["maxTokens"]),)
        if words
        else ((False, settings["maxTokens"]), (True, settings["multiLineTokens"]))
    )
    for n, passage in enumerate(items):
        for mode in variants:
            editor.client.notify(
                "workspace/didChangeConfiguration", {"settings": {"cpcLsp": {**settings, "multiLine": mode}}}
            )
            uri = f"file:///bench/lines/{n}-{mode}{Path(passage.file).suffix}"
            runs.append(
                {
                    "passage": n,
                    "kind": passage.kind,
                    "who": f"server {mode}",
                    **replay_server(editor, passage, uri, words),
                }
            )
            say(_brief(runs[-1]))
        if peer is not None:
            for multi, budget in peers:
                result = replay_peer(peer, passage, budget, multi, words)
                runs.append(
                    {
                        "passage": n,
                        "kind": passage.kind,
                        "who": f"peer {'multi-line' if multi else 'one line'}",
                        **result,
                    }
                )
                say(_brief(runs[-1]))
        say(f"lines: passage {n + 1}/{len(items)} ({passage.kind}) done")
        if save is not None:
            save(_results(items[: n + 1], runs))
    return _results(items, runs)


def _results(items: list[Passage], runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"passages": [{"kind": p.kind, "file": p.file, "start": p.start, "chars": len(p.text)} for p in items],
            "runs": runs, "table": summarize(runs)}  # fmt: skip


def _brief(run: dict[str, Any]) -> str:
    return (f"{run['kind']} {run['who']}: {run['lines']}/{run['passage_lines']} lines, {run['accepted']}/{run['chars']} "
            f"chars, {run['multi']} multi-line, {run['unbalanced']} unbalanced, {run['retyped']} retyped, "
            f"median {median(run['ms']) or 0:.0f} ms")  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["who"], r["kind"])].append(r)
        groups[(r["who"], "all")].append(r)
    best_peer = {}
    for (who, kind), rs in groups.items():
        if who.startswith("peer"):
            best_peer[kind] = max(best_peer.get(kind, 0), sum(r["lines"] for r in rs))
    rows = []
    for (who, kind), rs in groups.items():
        total = lambda key: sum(r[key] for r in rs)  # noqa: E731
        lines = total("lines")
        rows.append({
            "who": who, "kind": kind, "chars": total("chars"), "passage_lines": total("passage_lines"),
            "lines_accepted": lines, "saved": total("accepted") / total("chars"),
            "lines_over_best_peer": ratio(lines, best_peer.get(kind)), "shown": total("shown"),
            "multi_line": total("multi"), "unbalanced": total("unbalanced"), "retyped": total("retyped"),
            "median_ms": median([m for r in rs for m in r["ms"]]),
            "after_accept_median_ms": median([m for r in rs for m in r["after_accept_ms"]]),
            "after_accept": sum(len(r["after_accept_ms"]) for r in rs),
            "after_accept_carried": total("after_accept_carried"),
        })  # fmt: skip
    order = {k: i for i, k in enumerate((*CODE_KINDS, "prose", "all"))}
    rows.sort(key=lambda r: (order.get(r["kind"], 99), r["who"]))
    return rows


def table(rows: list[dict[str, Any]]):
    from bench.report import num, pct, times

    header = ["kind", "who", "lines accepted (of)", "chars saved", "lines / best peer", "shown", "multi-line",
              "unbalanced", "retyped", "median ms", "after accept: median ms (n, carried)"]  # fmt: skip
    body = [[r["kind"], r["who"], f"{r['lines_accepted']} ({r['passage_lines']})", pct(r["saved"]),
             times(r["lines_over_best_peer"]) if r["who"].startswith("server") else "", num(r["shown"]),
             num(r["multi_line"]), num(r["unbalanced"]), num(r["retyped"]), num(r["median_ms"]),
             f"{num(r['after_accept_median_ms'])} ({r['after_accept']}, {r['after_accept_carried']})"]
            for r in rows]  # fmt: skip
    return (
        (
            "line replay (code typed in place, a line accepted when exactly right): server multiLine "
            "variants vs peer (llama-cpp-python create_completion)"
        ),
        header,
        body,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.lines`: the line replay on code; results in bench/results/lines.json."""
    import argparse
    import json
    import sys

    from bench import report
    from bench.latency import Peer
    from bench.machine import CpuWatch, process_cpu_seconds
    from bench.replay import passages, ready_editor, used_files
    from engine.model_files import resolve_model
    from tests.support.cases import build_cases, check_cases
    from tests.support.lsp_client import LspClient

    parser = argparse.ArgumentParser(prog="python -m bench.lines", description=main.__doc__.split(":")[0])
    parser.add_argument("--per-kind", type=int, default=2, help="passages per code language")
    parser.add_argument("--chars", type=int, default=240, help="about this many characters a passage")
    parser.add_argument("--kinds", default=",".join(CODE_KINDS))
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--multi-line-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1, help="which passages (the word replay uses 0)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument(
        "--words", action="store_true", help="accept the next word (not lines): the keystroke after accept-next-word"
    )
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "lines.json")
    args = parser.parse_args(argv)

    tuning = build_cases(50, 0)
    used = used_files(tuning, check_cases(50, tuning))
    kinds = tuple(args.kinds.split(","))
    items = [p for p in passages(args.per_kind, used, seed=args.seed, chars=args.chars) if p.kind in kinds]
    settings = {"maxTokens": args.max_tokens, "multiLineTokens": args.multi_line_tokens, "threads": args.threads}
    watch = CpuWatch.start()
    peer = None if args.no_peer else Peer(str(resolve_model(None)), threads=args.threads)
    say = lambda m: print(f"[lines] {m}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        with LspClient(["--log-level", "warning"]) as client:
            editor = ready_editor(client, settings)
            args.out.parent.mkdir(parents=True, exist_ok=True)

            def save(partial: dict) -> None:
                args.out.write_text(json.dumps({**partial, "settings": settings, "partial": True}, indent=1) + "\n")

            results = run(editor, peer, items, settings, say, save, args.words)
            server_cpu = process_cpu_seconds(client.pid) or 0.0
    finally:
        if peer is not None:
            peer.close()
    results["other_processes_cpu_share"] = watch.others_share(server_cpu)
    results["settings"] = settings
    print(report.render(table(results["table"])))
    print(f"other processes used {100 * (results['other_processes_cpu_share'] or 0):.0f}% of the CPUs")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
