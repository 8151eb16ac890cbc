"""Mid-word cases cut from text that no one on the project wrote and that the machine already has.

Four kinds of text, each from files a Debian + Python machine ships:

- ``python``: the Python standard library's own sources (no tests),
- ``javascript``: npm's and corepack's bundled JavaScript (``/usr/lib/node_modules``),
- ``c``: C headers (``/usr/include``),
- ``prose``: English documentation (``/usr/share/common-licenses``, READMEs and notes in
  ``/usr/share/doc``; not the per-package ``copyright`` files, which repeat the same licences).

A case is a real document cut inside a word: the editor's text is the document from a line start
at most ``context_chars`` before the cursor up to the cursor, as if the user were typing that word
now. The selection is seeded and depends only on the sorted file lists and the files' contents, so
the same machine always builds the same cases. Words are runs of the server's word characters
(`lsp_server.split.is_word_char`) containing a letter; the cut leaves at least one character typed
and at least one to guess.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sysconfig
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from lsp_server.split import is_word_char

T = TypeVar("T")

KINDS = ("python", "javascript", "c", "prose")
MIN_BYTES, MAX_BYTES = 2_000, 400_000
MAX_AVG_LINE = 160  # minified bundles are not what people type
MIN_WORD, MAX_WORD = 2, 24
CONTEXT_CHARS = 1_000


@dataclass(frozen=True)
class Case:
    kind: str
    file: str
    offset: int  # the cursor: code points into the file's text
    word_start: int  # where the cut word starts (code points)
    word: str  # the whole original word; the cursor is strictly inside it
    context_start: int  # the document handed to the editor is text[context_start:offset]

    @property
    def typed(self) -> str:
        return self.word[: self.offset - self.word_start]

    def document(self) -> str:
        """The editor's text for this case; the cursor is at its end."""
        return read_text(Path(self.file))[self.context_start : self.offset]


def _walk(root: Path, suffixes: tuple[str, ...], skip_dirs: tuple[str, ...] = ()) -> Iterator[Path]:
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs)
        for name in filenames:
            if name.endswith(suffixes):
                yield Path(dirpath) / name


def _prose_files() -> Iterator[Path]:
    yield from _walk(Path("/usr/share/common-licenses"), ("",))
    for path in _walk(Path("/usr/share/doc"), ("",)):
        name = path.name
        upper = name.upper()
        if name.endswith((".gz", ".html", ".css", ".png", ".js")):
            continue
        if upper.startswith(("README", "NEWS", "TODO", "AUTHORS", "THANKS", "BUGS")) or name.endswith((".txt", ".md")):
            yield path


def source_files(kind: str) -> list[Path]:
    """The candidate files of one kind, sorted, with the size and shape filters applied."""
    if kind == "python":
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        found = _walk(stdlib, (".py",), ("test", "tests", "idle_test", "site-packages", "__pycache__"))
    elif kind == "javascript":
        found = _walk(Path("/usr/lib/node_modules"), (".js",), ("test", "tests"))
    elif kind == "c":
        found = _walk(Path("/usr/include"), (".h",))
    elif kind == "prose":
        found = _prose_files()
    else:
        raise ValueError(f"unknown kind of text: {kind}")
    kept = []
    for path in found:
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if MIN_BYTES <= size <= MAX_BYTES and not path.is_symlink() and not path.name.endswith(".min.js"):
            kept.append(path)
    return sorted(set(kept))


_texts: dict[Path, str | None] = {}


def read_text(path: Path) -> str | None:
    """The file as text (None when it is not UTF-8 or looks minified); newlines normalised to LF."""
    if path not in _texts:
        try:
            text = path.read_bytes().decode("utf-8").replace("\r\n", "\n")
        except (OSError, UnicodeDecodeError):
            text = None
        if text is not None and len(text) / max(1, text.count("\n") + 1) > MAX_AVG_LINE:
            text = None
        _texts[path] = text
    return _texts[path]


def words(text: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """(start, end) of every maximal run of word characters from `start` on that can be a case."""
    i, n = start, len(text)
    while i < n and i > 0 and is_word_char(text[i - 1]) and is_word_char(text[i]):
        i += 1  # never begin inside a word
    while i < n:
        if not is_word_char(text[i]):
            i += 1
            continue
        j = i
        while j < n and is_word_char(text[j]):
            j += 1
        word = text[i:j]
        if MIN_WORD <= len(word) <= MAX_WORD and any(ch.isalpha() for ch in word):
            yield i, j
        i = j


def _context_start(text: str, cursor: int, context_chars: int) -> int:
    """A line start at most `context_chars` before the cursor (the cursor's own line if it is longer)."""
    earliest = max(0, cursor - context_chars)
    if earliest == 0:
        return 0
    line = text.find("\n", earliest - 1)
    if 0 <= line < cursor:
        return line + 1
    own_line = text.rfind("\n", 0, cursor) + 1
    return own_line if cursor - own_line <= 4 * context_chars else earliest


def _case_in(rng: random.Random, kind: str, path: Path, context_chars: int) -> Case | None:
    """The word under a random character (or the next usable one), cut at a random inner point.
    Choosing by character weights words by length, as time spent typing does."""
    text = read_text(path)
    first = context_chars // 2
    if text is None or len(text) < first + 2 * MAX_WORD:
        return None
    at = rng.randrange(first, len(text))
    while at > first and is_word_char(text[at - 1]):
        at -= 1  # back to the start of the word under the random character
    span = next(iter(words(text, at)), None)
    if span is None:
        return None
    start, end = span
    cursor = start + rng.randrange(1, end - start)
    return Case(kind, str(path), cursor, start, text[start:end], _context_start(text, cursor, context_chars))


def build_cases(
    per_kind: int,
    seed: int = 0,
    kinds: tuple[str, ...] = KINDS,
    context_chars: int = CONTEXT_CHARS,
    exclude: frozenset[str] = frozenset(),
) -> list[Case]:
    """`per_kind` cases of each kind (fewer only if a kind has too few usable files), one per file,
    never from a file in `exclude` (paths as in `Case.file`)."""
    return one_per_file(
        kinds, per_kind, f"cpc-lsp bench {seed}", exclude,
        lambda rng, kind, path: _case_in(rng, kind, path, context_chars),
    )  # fmt: skip


def one_per_file(
    kinds: Iterable[str],
    per_kind: int,
    seed: str,
    exclude: Collection[str],
    make: Callable[[random.Random, str, Path], T | None],
) -> list[T]:
    """`per_kind` items of each kind, at most one per file, from the kind's files not in `exclude`
    in an order drawn from `seed` and the kind; `make(rng, kind, path)` returns None for a file
    that has no usable item."""
    found: list[T] = []
    for kind in kinds:
        rng = random.Random(f"{seed} {kind}")
        files = [f for f in source_files(kind) if str(f) not in exclude]
        rng.shuffle(files)
        made = 0
        for path in files:
            if made == per_kind:
                break
            item = make(rng, kind, path)
            if item is not None:
                found.append(item)
                made += 1
    return found


CHECK_SEED = 1  # the check set: never used to choose a weight


def check_cases(per_kind: int, tuning: list[Case]) -> list[Case]:
    """The second quality set, built from files the tuning set does not use."""
    return build_cases(per_kind, CHECK_SEED, exclude=frozenset(c.file for c in tuning))


def fingerprint(cases: list[Case]) -> str:
    """A short hash of the case list, to tell whether two runs scored the same cases."""
    blob = json.dumps([asdict(c) for c in cases], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
