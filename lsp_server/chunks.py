"""Choosing chunks of other files for the prompt: split, rank by identifier overlap, fill a budget.

Files are split into chunks of CHUNK_LINES lines on line boundaries (fewer when the lines
are long: at most CHUNK_CHARS characters). A chunk's score is its Jaccard similarity with the
identifiers around the cursor (what Copilot and llama.vim use), plus a bonus for defining
identifiers used near the cursor that the current file does not define (the names a model cannot
spell from the current file alone), plus a small one for a region edited lately. Chunks are taken
best first while they fit the token budget, and returned in a stable order (by path, then line),
so the same choice always lays out the same prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from engine import ContextFile
from lsp_server.workspace import Source

CHUNK_LINES = 32  # llama.vim takes 64 with contexts of 8k+; a 2k context holds two of these beside the file
CHUNK_CHARS = 1_024  # about 300 tokens of code
CHARS_PER_TOKEN = 3  # a cautious estimate for code (the engine enforces the real budget)
NEAR_BEFORE, NEAR_AFTER = 24, 8  # lines around the cursor whose identifiers are compared
DEFINES_WEIGHT = 1.0  # a chunk defining every wanted identifier scores one Jaccard point more
EDITED_BONUS = 0.05
MIN_SCORE = 0.05  # below this a chunk is noise that only displaces the current file
MIN_TYPED = 3  # a partial word this long that a chunk's definition begins with counts as wanted

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
_DEFINES = (
    re.compile(
        r"\b(?:def|class|function|struct|enum|union|interface|type|typedef|const|let|var|async function)[ \t]+\*?[ \t]*([A-Za-z_$][\w$]*)"
    ),
    re.compile(r"^#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M),
    re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]+)?=[^=]", re.M),  # a module-level assignment
    re.compile(r"^[ \t]*(?:self|this|exports|module\.exports)\.([A-Za-z_$][\w$]*)[ \t]*=[^=]", re.M),
    re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)[ \t]*\([^;{}\n]*\)?[ \t]*\{?[ \t]*$", re.M),  # C function
    re.compile(
        r"^[ \t]+(?:async[ \t]+|static[ \t]+|get[ \t]+|set[ \t]+)*([A-Za-z_$][\w$]*)[ \t]*\([^)\n]*\)[ \t]*\{", re.M
    ),  # JS method
    re.compile(r"^\}[ \t]*([A-Za-z_]\w*)[ \t]*;", re.M),  # typedef struct {...} name;
    re.compile(r"^[ \t]*([A-Za-z_$][\w$]*)[ \t]*:[ \t]*(?:function|\()", re.M),  # name: function / name: (
)
STOP = frozenset(
    "if else elif for while do return def class import from as in is not and or None True False self "
    "this const let var function new null undefined true false typeof void int char long short unsigned "
    "signed static struct typedef include define sizeof break continue switch case default with try "
    "except finally raise pass lambda yield async await export module require throw catch".split()
)


def identifiers(text: str) -> frozenset[str]:
    return frozenset(w for w in _IDENT.findall(text) if w not in STOP)


def definitions(text: str) -> frozenset[str]:
    return frozenset(name for pattern in _DEFINES for name in pattern.findall(text) if name not in STOP)


@dataclass(frozen=True)
class Chunk:
    key: str  # the source's key and the chunk's first line: stable across keystrokes
    path: str
    start: int  # first line (0-based) in its source
    text: str
    ids: frozenset[str]
    defines: frozenset[str]
    edited: bool = False

    @property
    def tokens(self) -> int:
        return len(self.text) // CHARS_PER_TOKEN + 8  # the path line and separators


def split_lines(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each chunk: CHUNK_LINES lines, cut earlier at CHUNK_CHARS."""
    lines = text.splitlines(keepends=True)
    out: list[tuple[int, str]] = []
    start = 0
    while start < len(lines):
        end, size = start, 0
        while (
            end < len(lines) and end - start < CHUNK_LINES and (size + len(lines[end]) <= CHUNK_CHARS or end == start)
        ):
            size += len(lines[end])
            end += 1
        body = "".join(lines[start:end])
        if body.strip():
            out.append((start, body[:CHUNK_CHARS]))
        start = end
    return out


class Chunker:
    """Chunks of each source, remembered while its text is the same object (open documents are
    replaced on every edit, so an unchanged one costs a dictionary look-up)."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, list[Chunk]]] = {}

    def chunks(self, source: Source) -> list[Chunk]:
        cached = self._cache.get(source.key)
        if cached is None or cached[0] is not source.text:
            made = [
                Chunk(f"{source.key}:{start}", source.path, start, body, identifiers(body), definitions(body))
                for start, body in split_lines(source.text)
            ]
            cached = (source.text, made)
            self._cache[source.key] = cached
        edited = source.edited
        if not edited:
            return cached[1]
        return [
            Chunk(c.key, c.path, c.start, c.text, c.ids, c.defines, True)
            if any(c.start <= line < c.start + c.text.count("\n") + 1 for line in edited)
            else c
            for c in cached[1]
        ]

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._cache.pop(key, None)


def near_cursor(text: str, cursor: int) -> str:
    """The lines around the cursor (NEAR_BEFORE before, NEAR_AFTER after)."""
    start = cursor
    for _ in range(NEAR_BEFORE):
        start = text.rfind("\n", 0, start)
        if start <= 0:
            start = 0
            break
    end = cursor
    for _ in range(NEAR_AFTER):
        end = text.find("\n", end + 1)
        if end < 0:
            end = len(text)
            break
    return text[start:end]


def score(chunk: Chunk, near: frozenset[str], wanted: frozenset[str], typed: str = "") -> float:
    """Jaccard with the cursor's neighbourhood, plus the share of the wanted identifiers the chunk
    defines (the word being typed counts as defined by a definition it begins)."""
    union = len(near | chunk.ids)
    jaccard = len(near & chunk.ids) / union if union else 0.0
    hits = len(chunk.defines & wanted)
    if typed and typed not in chunk.defines and any(d.startswith(typed) for d in chunk.defines):
        hits += 1
    defines = hits / len(wanted) if wanted else 0.0
    return jaccard + DEFINES_WEIGHT * defines + (EDITED_BONUS if chunk.edited else 0.0)


def choose(
    chunks: list[Chunk], near: frozenset[str], defined_here: frozenset[str], budget: int, typed: str = ""
) -> list[Chunk]:
    """The best chunks within `budget` tokens, in a stable order (path, then line). `typed`: the
    partial word at the cursor (at least MIN_TYPED characters to count)."""
    typed = typed if len(typed) >= MIN_TYPED and typed not in defined_here else ""
    wanted = near - defined_here
    ranked = sorted(
        ((score(c, near, wanted, typed), c) for c in chunks), key=lambda sc: (-sc[0], sc[1].path, sc[1].start)
    )
    chosen: list[Chunk] = []
    left = budget
    for value, chunk in ranked:
        if value < MIN_SCORE:
            break
        if chunk.tokens <= left:
            chosen.append(chunk)
            left -= chunk.tokens
    return sorted(chosen, key=lambda c: (c.path, c.start, c.key))


RELATED_CHUNKS = 8  # the chunks most like the cursor's neighbourhood whose names count as related


def related(chunks: list[Chunk], near: frozenset[str]) -> dict[str, float]:
    """Names the other files use in the code most like the cursor's neighbourhood: per name, the
    share of the RELATED_CHUNKS most similar chunks that use it, weighted by their Jaccard
    similarity (0 to 1). Code like the code being written calls what it will call (RepoCoder's
    retrieval, as names rather than whole chunks)."""
    if not near:
        return {}
    scored = []
    for chunk in chunks:
        union = len(near | chunk.ids)
        value = len(near & chunk.ids) / union if union else 0.0
        if value >= MIN_SCORE:
            scored.append((value, chunk))
    scored.sort(key=lambda vc: -vc[0])
    top = scored[:RELATED_CHUNKS]
    if not top:
        return {}
    total = sum(value for value, _ in top)
    out: dict[str, float] = {}
    for value, chunk in top:
        for name in chunk.ids - near:
            out[name] = out.get(name, 0.0) + value / total
    return out


def as_files(chosen: list[Chunk]) -> tuple[ContextFile, ...]:
    """One entry per run of adjacent chunks of the same file (in the given order)."""
    files: list[ContextFile] = []
    last: Chunk | None = None
    for chunk in chosen:
        if (
            last is not None
            and last.path == chunk.path
            and last.key.rsplit(":", 1)[0] == chunk.key.rsplit(":", 1)[0]
            and last.start + last.text.count("\n") == chunk.start
        ):
            files[-1] = ContextFile(chunk.path, files[-1].text + chunk.text)
        else:
            files.append(ContextFile(chunk.path, chunk.text))
        last = chunk
    return tuple(files)
