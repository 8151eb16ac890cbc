"""Prompt layouts: the text before the cursor alone, or fill-in-the-middle (FIM) with the text after it.

A model trained for FIM (Qwen2.5-Coder, StarCoder2, CodeGemma, DeepSeek-Coder, CodeLlama...) has
three control tokens, read from its GGUF by llama.cpp: PRE, SUF and MID. The middle is generated
after MID, and it begins with the required prefix (boundary whitespace + partial word), exactly as
a plain prompt's continuation does. Two orders exist:

- PSM, ``PRE prefix SUF suffix MID``: what most models are trained on. A new word in the prefix
  changes the prompt before the suffix, so the suffix is decoded again (hence its token bound).
- SPM, ``SUF suffix PRE prefix MID``: for models trained on it (CodeLlama, and models trained on
  both orders). The suffix sits first, so a new word in the prefix decodes only that word.
- PSM with the cursor's line in the middle, ``PRE prefix up to the line SUF suffix MID line``
  (`psm-line`, what llama.cpp's `/infill` does with llama.vim's `prompt`): the model sees the
  PSM order it was trained on, with the middle's first characters given. A new word changes only
  the tokens after MID, so it decodes only itself; a new line decodes the suffix again.

Either way, typing inside a word changes nothing here (the word-boundary split keeps the prefix
and the suffix as they are), so the whole prompt's KV is reused on every such keystroke.

Other files' text (a `RepoContext`) goes first, before the current file, so it is a prefix that
the KV cache keeps while the user types. Two layouts:

- *repo-level*, for a model with repository tokens (Qwen2.5-Coder: ``<|repo_name|>`` and
  ``<|file_sep|>``, found by llama.cpp from the vocabulary by their text, as the FIM tokens are),
  the layout it was trained on::

      <|repo_name|>name\n<|file_sep|>path\ntext\n ... <|file_sep|>current path\n
      <|fim_prefix|>prefix<|fim_suffix|>suffix<|fim_middle|>

- *plain*, for any other model: each file's text after a comment line naming its path (in the
  file's own comment syntax), then the current file's path the same way, inside the FIM prefix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from engine.types import RepoContext

PSM, SPM, PSM_LINE = "psm", "spm", "psm-line"
ORDERS = (PSM, SPM, PSM_LINE)


@dataclass(frozen=True)
class FimTokens:
    """A model's FIM token ids (llama.cpp's fim_pre / fim_suf / fim_mid)."""

    pre: int
    suf: int
    mid: int

    @classmethod
    def of(cls, pre: int, suf: int, mid: int) -> FimTokens | None:
        """The model's FIM tokens, or None when it lacks any of the three (llama.cpp reports -1)."""
        if min(pre, suf, mid) < 0:
            return None
        return cls(pre, suf, mid)


def fim_prompt(
    head: tuple[int, ...],
    prefix: tuple[int, ...],
    suffix: tuple[int, ...],
    fim: FimTokens,
    order: str = PSM,
    line: tuple[int, ...] = (),
) -> tuple[int, ...]:
    """The FIM prompt in the model's order; `head` (BOS, if the model adds one) goes first. `line`:
    the tokens of the cursor's line before the cursor, which `prefix` leaves out in `psm-line`
    (they go after MID); the other orders take the whole prefix and no `line`."""
    if order == SPM:
        return head + (fim.suf,) + suffix + (fim.pre,) + prefix + (fim.mid,)
    if order not in (PSM, PSM_LINE):
        raise ValueError(f"unknown FIM order {order!r}; expected one of {', '.join(ORDERS)}")
    return head + (fim.pre,) + prefix + (fim.suf,) + suffix + (fim.mid,) + line


FIM_EXTRA_TOKENS = 3  # PRE, SUF and MID


@dataclass(frozen=True)
class RepoTokens:
    """A model's repository-level token ids (llama.cpp's fim_rep / fim_sep)."""

    name: int  # <|repo_name|>
    sep: int  # <|file_sep|>

    @classmethod
    def of(cls, name: int, sep: int) -> RepoTokens | None:
        if min(name, sep) < 0:
            return None
        return cls(name, sep)


HASH_COMMENT = frozenset("py pyi sh bash zsh rb pl r yaml yml toml cfg ini mk cmake make".split())
DASH_COMMENT = frozenset("sql lua hs elm ada".split())


def comment_line(path: str) -> str:
    """A line naming `path` in its file's comment syntax (`//` for C-like files and unknown ones)."""
    name = PurePosixPath(path)
    ext = name.suffix.lstrip(".").lower()
    if ext in HASH_COMMENT or name.name in ("Makefile", "Dockerfile"):
        return f"# {path}\n"
    if ext in DASH_COMMENT:
        return f"-- {path}\n"
    return f"// {path}\n"


# A line as `comment_line` writes it: a comment mark, a space, one path-like word (a `.` or `/` in it).
_HEADER_LINE = re.compile(r"[\r\n](?://|#|--) [^\s./]*[./]\S*[ \t]*(?:[\r\n]|$)")


def header_line(text: str) -> int | None:
    """Where a line that looks like a file's header (`comment_line`) begins in `text`, at the end
    of the text before it; None if none does. After other files laid out with such lines, the model
    may start another file of its own (`// long.txt`, a name it made up), never text the user
    wants in this one: the suggestion ends there."""
    found = _HEADER_LINE.search(text)
    return None if found is None else len(text[: found.start()].rstrip())  # the blank lines before it too


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def context_tokens(
    context: RepoContext, tokenize: Callable[[str], tuple[int, ...]], repo: RepoTokens | None, budget: int
) -> tuple[int, ...]:
    """The tokens that go before the current file's text: the files in their given order, as many
    as fit in `budget` tokens, then the current file's header. The first file that does not fit
    keeps as many of its first lines as do and ends the list (the caller's estimate of the
    tokens may run a little over: it costs a few lines, not a file), so the kept ones stay a
    prefix of what a larger budget keeps. When every file ranks its lines (ContextFile.ranks),
    the worst-ranked lines are left out instead, wherever they are (_fit_by_rank)."""
    if repo is not None:
        head = (repo.name, *tokenize(f"{context.name or 'repo'}\n"))
        tail = (repo.sep, *tokenize(f"{context.path}\n"))

        def part(path: str, text: str) -> tuple[int, ...]:
            return (repo.sep, *tokenize(f"{path}\n{text}"))
    else:
        head = ()
        tail = tokenize(comment_line(context.path)) if context.path else ()

        def part(path: str, text: str) -> tuple[int, ...]:
            return tuple(tokenize(f"{comment_line(path)}{text}\n"))

    ranked = _ranked_lines(context)
    if ranked is not None:
        whole = sum((part(f.path, _with_newline(f.text)) for f in context.files), head)
        if len(whole) + len(tail) > budget:
            return _fit_by_rank(ranked, part, head, tuple(tail), budget)
        return whole + tuple(tail)  # every file fits: the loop below would tokenize them again
    out = head
    for f in context.files:
        text = _with_newline(f.text)
        tokens = part(f.path, text)
        room = budget - len(out) - len(tail)
        if len(tokens) > room:  # the first file that does not fit: as many of its first lines as do, then stop
            lines = text.splitlines(keepends=True)
            low, high = 0, len(lines) - 1  # the most lines known to fit / that might
            while low < high:
                mid = (low + high + 1) // 2
                if len(part(f.path, "".join(lines[:mid]))) <= room:
                    low = mid
                else:
                    high = mid - 1
            if low:
                out += part(f.path, "".join(lines[:low]))
            break
        out += tokens
    if len(out) + len(tail) > budget:
        return ()
    return out + tuple(tail)


def _ranked_lines(context: RepoContext) -> list[tuple[str, list[tuple[int, str]]]] | None:
    """Per file, its path and its lines with their ranks; None unless every file ranks every line."""
    out = []
    for f in context.files:
        lines = _with_newline(f.text).splitlines(keepends=True)
        if not f.ranks or len(f.ranks) != len(lines):
            return None
        out.append((f.path, list(zip(f.ranks, lines))))
    return out


def _fit_by_rank(
    ranked: list[tuple[str, list[tuple[int, str]]]], part: Callable[[str, str], tuple[int, ...]],
    head: tuple[int, ...], tail: tuple[int, ...], budget: int,
) -> tuple[int, ...]:  # fmt: skip
    """The files without their worst-ranked lines (the highest rank first; among equals, the
    later file and line first), as few left out as lets them fit `budget` with `head` and `tail`;
    a file left with no line is left out. The rest keep their order."""
    worst = sorted(
        ((rank, f, i) for f, (_, lines) in enumerate(ranked) for i, (rank, _) in enumerate(lines)), reverse=True
    )

    def build(dropped: int) -> tuple[int, ...]:
        gone = {(f, i) for _, f, i in worst[:dropped]}
        out = head
        for f, (path, lines) in enumerate(ranked):
            kept = "".join(line for i, (_, line) in enumerate(lines) if (f, i) not in gone)
            if kept:
                out += part(path, kept)
        return out + tail

    low, high = 0, len(worst)  # leaving out `high` lines fits (nothing but the head and tail)
    while low < high:
        mid = (low + high) // 2
        if len(build(mid)) <= budget:
            high = mid
        else:
            low = mid + 1
    fitted = build(high)
    return fitted if len(fitted) <= budget else ()


def layout(
    head: tuple[int, ...],
    context: tuple[int, ...],
    prefix: tuple[int, ...],
    suffix: tuple[int, ...] | None,
    fim: FimTokens | None,
    repo: RepoTokens | None,
    order: str = PSM,
    line: tuple[int, ...] = (),
) -> tuple[int, ...]:
    """The whole prompt: `context` (from `context_tokens`) before the current file. In the
    repo-level layout it precedes the FIM tokens (the current file is the last file of the
    repository); in the plain one it is the start of the FIM prefix. `suffix` None: no FIM (and
    `line` follows `prefix`). `line`: see `fim_prompt`."""
    if fim is None or suffix is None:
        return head + context + prefix + line
    if repo is not None:
        return fim_prompt(head + context, prefix, suffix, fim, order, line)
    if order == SPM:
        return head + (fim.suf,) + suffix + (fim.pre,) + context + prefix + line + (fim.mid,)
    return fim_prompt(head, context + prefix, suffix, fim, order, line)
