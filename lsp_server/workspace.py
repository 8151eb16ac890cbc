"""Where context from the rest of the project may come from: only text the user already has here.

Three sources, and nothing else:

- the editor's open documents (the server's documents store), when they lie under a workspace
  folder (or have no file at all: an untitled buffer);
- recently edited regions of documents since closed (a small ring, as llama.vim keeps);
- the files the current one imports (Python ``import``/``from``, JavaScript ``import``/``require``
  of a relative path, C ``#include "..."``), resolved under the workspace folders only.

A file is read from disk only when its resolved path (symlinks followed) lies under a resolved
workspace folder, it is a regular file of at most MAX_FILE_BYTES, it looks like text (no NUL byte,
valid UTF-8), it is not inside ``.git`` and, when its folder is in a git work tree, git does not
ignore it (`GitIgnore`: git's ignore files, matched in-process). Open documents pass the same
folder and ignore checks (an open ``.env`` stays out).

What reads the disk (`read`, `describe`, `imports`, `set_roots`, `keep_regions`) the server
calls on its context worker (lsp_server.context.Background), never on the event loop; the edit
bookkeeping (`edited`, `edits`, `take_edits`) is memory only and stays on the loop.

With no workspace folder (``rootUri`` null: one file opened outside a project), the folder of the
document the context is for stands in for one, with every rule above: the open documents under it
count, and its imports are read from under it (`scope`). The filesystem's root and the home
folder never stand in (they hold everything the user has, not a project): a file there gets
context from untitled buffers only.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from pathspec import GitIgnoreSpec, PathSpec

logger = logging.getLogger(__name__)

MAX_FILE_BYTES = 256 * 1024  # a bigger file is generated or data, not something the user wrote
SNIFF_BYTES = 8192  # a NUL byte in these means binary
MAX_IMPORTS = 16  # imported files read per document
IMPORT_SCAN_CHARS = 32_768  # imports are looked for in the document's start only (O(1) per keystroke)
EDITS_KEPT = 8  # edited lines remembered per document
RING = 16  # regions of closed documents kept
REGION_LINES = 64  # the lines kept around an edit of a document that closes
MAX_IGNORE_BYTES = 1024 * 1024  # an ignore file bigger than this is not read (as if absent)

PYTHON = frozenset({".py", ".pyi"})
JAVASCRIPT = frozenset({".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".mts", ".cts"})
C_LIKE = frozenset({".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".m"})
JS_RESOLVE = ("", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", "/index.js", "/index.ts", "/index.mjs")

_PY_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\(?([^)#\n]*)", re.M)
_PY_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w. \t,]+)", re.M)
_JS_SPEC = re.compile(r"""(?:\bfrom|\bimport|\brequire[ \t]*\(|\bimport[ \t]*\()[ \t]*['"](\.{1,2}/[^'"\n]*)['"]""")
_C_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.M)
# A build's include path (`-Ilib`, `-Iinclude`) is not known here: a header is also looked for in
# the workspace folders' own subfolders, at most this many of each (`#include <ultrajson.h>` from
# python/ names lib/ultrajson.h). System headers (`<stdio.h>`) are not in the workspace: not found.
INCLUDE_SUBFOLDERS = 32


@dataclass(frozen=True)
class Source:
    """A text that may give context: `key` identifies it (stable across keystrokes), `path` is
    what the model is shown (relative to its workspace folder), `edited` the lines edited lately."""

    key: str
    path: str
    text: str
    edited: tuple[int, ...] = ()
    imported: bool = False  # the current document imports it (lsp_server.context: drawn on before any use)


def uri_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI; None for any other scheme (an untitled buffer)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if re.match(r"^/[A-Za-z]:", path):  # file:///C:/x on Windows
        path = path[1:]
    return Path(path)


def language_of(path: str) -> str | None:
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in PYTHON:
        return "python"
    if suffix in JAVASCRIPT:
        return "javascript"
    if suffix in C_LIKE:
        return "c"
    return None


@dataclass(frozen=True)
class Patterns:
    """One ignore file's lines, compiled twice by pathspec: matched against a folder (plain
    last-match-wins) and against a file (git's precedence of file lines over folder lines)."""

    folders: PathSpec
    files: GitIgnoreSpec


class GitIgnore:
    """Whether git ignores a path, decided in-process (no `git` process) from the files git reads
    for it: the default global excludes file (``$XDG_CONFIG_HOME/git/ignore``), the repository's
    ``info/exclude``, and each ``.gitignore`` from the work tree's top down to the path's folder,
    a deeper one overriding a higher one, the last matching line of a file deciding (``!``
    negates). As in git, a path inside an ignored folder is ignored: git never looks inside it,
    so no negation below brings it back. Only in folders that are in a git work tree (the nearest
    one above the path holding ``.git``). Unlike ``git check-ignore`` it does not read git's index:
    a tracked file that the patterns match counts as ignored (left out of the context).
    An ignore file is read again when it changes."""

    def __init__(self) -> None:
        self._tops: dict[Path, Path | None] = {}  # folder -> its work tree's top (None: not in one)
        self._git_dirs: dict[Path, Path | None] = {}  # work tree's top -> its repository's common folder
        self._specs: dict[Path, tuple[tuple[int, int], Patterns | None]] = {}  # file -> (stat, patterns)
        config = os.environ.get("XDG_CONFIG_HOME") or (str(Path.home() / ".config") if home() else "")
        self._global = Path(config) / "git" / "ignore" if config else None  # core.excludesFile's default

    def ignored(self, path: Path, root: Path | None = None) -> bool:
        """True when git ignores the (resolved) `path`. `root`, the folder it lies under, is not
        needed: the work tree is the nearest one above the path."""
        top = self._top(path.parent)
        if top is None or path == top:
            return False
        parts = path.relative_to(top).parts
        levels = [*self._outer(top), *((parts[:k], self._spec(top.joinpath(*parts[:k], ".gitignore")))
                                       for k in range(len(parts)))]  # fmt: skip
        for end in range(1, len(parts)):  # each folder on the way down
            if self._decides(parts[:end], True, [lv for lv in levels if len(lv[0]) < end]):
                return True
        return self._decides(parts, path.is_dir(), levels)

    @staticmethod
    def _decides(parts: tuple[str, ...], is_dir: bool, levels: list[tuple[tuple[str, ...], Patterns | None]]) -> bool:
        """Whether the entry at `parts` is excluded: the deepest ignore file with a line matching
        it decides, by its last matching line. A folder is matched as a folder (``name/``, last
        line wins); a file with pathspec's git rules, where a line naming a file outranks a
        folder line (``!*/`` re-includes folders, not the files in them)."""
        for base, patterns in reversed(levels):
            if patterns is None:
                continue
            rel = "/".join(parts[len(base) :])
            spec = patterns.folders if is_dir else patterns.files
            include = spec.check_file(rel + "/" if is_dir else rel).include
            if include is not None:
                return include
        return False

    def _outer(self, top: Path) -> list[tuple[tuple[str, ...], Patterns | None]]:
        """The ignore files below every ``.gitignore`` in precedence: global, then info/exclude."""
        files = [] if self._global is None else [self._global]
        if top not in self._git_dirs:
            self._git_dirs[top] = _git_dir(top)
        git_dir = self._git_dirs[top]
        if git_dir is not None:
            files.append(git_dir / "info" / "exclude")
        return [((), self._spec(f)) for f in files]

    def _top(self, folder: Path) -> Path | None:
        """The top of the work tree `folder` is in: the nearest folder upward holding ``.git``."""
        if folder not in self._tops:
            try:
                here = (folder / ".git").exists()
            except OSError:
                here = False
            parent = folder.parent
            self._tops[folder] = folder if here else (None if parent == folder else self._top(parent))
        return self._tops[folder]

    def _spec(self, path: Path) -> Patterns | None:
        """The patterns of one ignore file (None: none there, or not a regular file of text)."""
        try:
            info = path.stat()
        except OSError:
            self._specs.pop(path, None)
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        cached = self._specs.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        spec = None
        if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_IGNORE_BYTES:  # never a FIFO: it could block
            try:
                lines = path.read_bytes().decode("utf-8", "replace").splitlines()
                spec = Patterns(PathSpec.from_lines("gitignore", lines), GitIgnoreSpec.from_lines(lines))
            except (OSError, ValueError):
                spec = None  # unreadable, or a line pathspec refuses: as if there were no such file
        self._specs[path] = (stamp, spec)
        return spec


def _git_dir(top: Path) -> Path | None:
    """The repository's common folder for a work tree's top: ``.git`` itself, or where a ``.git``
    file points (a linked work tree or a submodule: ``gitdir: ...``, then its ``commondir``)."""
    dot_git = top / ".git"
    try:
        if dot_git.is_dir():
            return dot_git
        if not dot_git.is_file() or dot_git.stat().st_size > 4096:
            return None
        line = dot_git.read_text(errors="replace").strip()
        if not line.startswith("gitdir:"):
            return None
        git_dir = top / line[len("gitdir:") :].strip()
        common = git_dir / "commondir"
        if common.is_file() and common.stat().st_size <= 4096:
            git_dir = git_dir / common.read_text(errors="replace").strip()
        return git_dir
    except OSError:
        return None


def home() -> Path | None:
    try:
        return Path.home().resolve()
    except (OSError, RuntimeError, KeyError):
        return None


class Workspace:
    """The workspace folders and the reading rules above; remembers what it read by mtime."""

    def __init__(self, ignore: GitIgnore | None = None) -> None:
        self.roots: tuple[Path, ...] = ()
        self._subfolders: dict[Path, tuple[Path, ...]] = {}  # a root's subfolders (_include_folders)
        self._wide = frozenset(p for p in (Path("/").resolve(), home()) if p is not None)  # never a stand-in
        self.ignore = ignore or GitIgnore()
        self._files: dict[Path, tuple[int, int, str | None]] = {}  # path -> (mtime_ns, size, text)
        self._edits: dict[str, deque[int]] = {}  # document key -> lines edited lately
        self._ring: OrderedDict[str, Source] = OrderedDict()  # regions of closed documents

    def set_roots(self, folders: Iterable[str]) -> None:
        """The workspace folders, as URIs or paths; resolved once (a folder that is gone is skipped)."""
        roots = []
        for folder in folders:
            path = uri_path(folder) if "://" in folder else Path(folder)
            if path is None:
                continue
            try:
                resolved = path.resolve(strict=True)
            except (OSError, RuntimeError):
                continue
            if resolved.is_dir() and resolved not in roots:
                roots.append(resolved)
        self.roots = tuple(roots)
        self._subfolders.clear()

    def scope(self, current: str | None = None) -> tuple[Path, ...]:
        """The folders whose files may be used for the document at `current`: the workspace
        folders; with none, that document's own folder (resolved; not the filesystem's root nor
        the home folder); else none."""
        if self.roots or current is None:
            return self.roots
        path = uri_path(current)
        if path is None:
            return ()
        try:
            folder = path.parent.resolve(strict=True)
        except (OSError, RuntimeError):
            return ()
        return () if folder in self._wide or not folder.is_dir() else (folder,)

    def name_for(self, current: str | None = None) -> str:
        """The project's name as the model is shown it: the (first) folder's."""
        roots = self.scope(current)
        return roots[0].name if roots else ""

    @property
    def name(self) -> str:
        return self.name_for()

    def place(self, path: Path, roots: tuple[Path, ...] | None = None) -> tuple[Path, str] | None:
        """(its folder, its path relative to it, POSIX) for a path under one of `roots` (the
        workspace folders by default) after resolving symlinks; None outside every folder, inside
        ``.git``, or unresolvable (a symlink loop)."""
        try:
            resolved = path.resolve()  # symlinks followed; a file not saved yet keeps its name
        except (OSError, RuntimeError):
            return None
        for root in self.roots if roots is None else roots:
            if resolved == root or not resolved.is_relative_to(root):
                continue
            rel = resolved.relative_to(root)
            if ".git" in rel.parts:
                return None
            return root, rel.as_posix()
        return None

    def allowed(self, path: Path, roots: tuple[Path, ...] | None = None) -> str | None:
        """The relative path of `path` when its text may be used (under a folder, not ignored)."""
        placed = self.place(path, roots)
        if placed is None or self.ignore.ignored(path.resolve(), placed[0]):
            return None
        return placed[1]

    def read(self, path: Path, roots: tuple[Path, ...] | None = None) -> tuple[str, str] | None:
        """(relative path, text) of a file under `roots` (the workspace folders by default) that
        passes every rule; None otherwise."""
        rel = self.allowed(path, roots)
        if rel is None:
            return None
        resolved = path.resolve()
        try:
            info = resolved.stat()
        except OSError:
            return None
        if not resolved.is_file() or info.st_size > MAX_FILE_BYTES:
            return None
        cached = self._files.get(resolved)
        if cached is None or cached[:2] != (info.st_mtime_ns, info.st_size):
            cached = (info.st_mtime_ns, info.st_size, text_of(resolved))
            self._files[resolved] = cached
        return None if cached[2] is None else (rel, cached[2])

    def describe(self, uri: str, current: str | None = None) -> tuple[str, bool]:
        """(the path a document is shown as, whether its text may be used as context for the
        document at `current`: under the folders of its `scope`)."""
        path = uri_path(uri)
        if path is None:
            return PurePosixPath(urlparse(uri).path or uri).name or "untitled", True
        roots = self.scope(current)
        rel = self.allowed(path, roots) if roots else None
        return (rel, True) if rel is not None else (path.name, False)

    # --- edits ---------------------------------------------------------------------------------

    def edited(self, key: str, line: int) -> None:
        lines = self._edits.setdefault(key, deque(maxlen=EDITS_KEPT))
        if not lines or lines[-1] != line:
            lines.append(line)

    def edits(self, key: str) -> tuple[int, ...]:
        return tuple(self._edits.get(key, ()))

    def closed(self, key: str, uri: str, text: str) -> None:
        """Keep the regions around the lines edited in a document that closes (newest last)."""
        self.keep_regions(key, uri, text, self.take_edits(key))

    def take_edits(self, key: str) -> tuple[int, ...]:
        """The lines edited lately in a document that closes, forgotten here."""
        return tuple(self._edits.pop(key, ()))

    def keep_regions(self, key: str, uri: str, text: str, lines: tuple[int, ...]) -> None:
        """Keep the regions of `text` (the document at `uri`, closed) around the edited `lines`."""
        if not lines:
            return
        path, usable = self.describe(uri)
        if not usable:
            return
        all_lines = text.splitlines(keepends=True)
        for line in lines:
            start = (line // REGION_LINES) * REGION_LINES
            region = "".join(all_lines[start : start + REGION_LINES])
            if not region.strip():
                continue
            name = f"{key}#{start}"
            self._ring.pop(name, None)
            self._ring[name] = Source(name, path, region, (line - start,))
            while len(self._ring) > RING:
                self._ring.popitem(last=False)

    def ring(self) -> tuple[Source, ...]:
        return tuple(self._ring.values())

    # --- imports -------------------------------------------------------------------------------

    def imports(self, uri: str, text: str) -> list[Source]:
        """The files `text` (the document at `uri`) imports, that pass the reading rules, under
        the folders of its `scope`."""
        path = uri_path(uri)
        roots = self.scope(uri)
        if path is None or not roots or self.place(path, roots) is None:
            return []
        language = language_of(path.name)
        head = text[:IMPORT_SCAN_CHARS]
        if language == "python":
            candidates = python_imports(head, path.parent, self._python_bases(path, roots))
        elif language == "javascript":
            candidates = [c for spec in _JS_SPEC.findall(head) for c in js_candidates(path.parent, spec)]
        elif language == "c":
            folders = self._include_folders(roots)
            candidates = [base / (quoted or angled) for quoted, angled in _C_INCLUDE.findall(head)
                          for base in ((path.parent,) if quoted else ()) + folders]  # fmt: skip
        else:
            return []
        found: list[Source] = []
        seen: set[str] = set()
        for candidate in candidates:
            if len(found) >= MAX_IMPORTS:
                break
            read = self.read(candidate, roots)
            if read is None or read[0] in seen or candidate.resolve() == path.resolve():
                continue
            seen.add(read[0])
            found.append(Source(read[0], read[0], read[1]))
        return found

    def _include_folders(self, roots: tuple[Path, ...]) -> tuple[Path, ...]:
        """Where a C header is looked for: the folders, then their subfolders (listed once, at
        most INCLUDE_SUBFOLDERS each, `.git` and other hidden ones left out)."""
        subs: list[Path] = []
        for root in roots:
            if root not in self._subfolders:
                try:
                    found = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
                except OSError:
                    found = []
                self._subfolders[root] = tuple(found[:INCLUDE_SUBFOLDERS])
            subs += self._subfolders[root]
        return (*roots, *subs)

    def _python_bases(self, path: Path, roots: tuple[Path, ...]) -> list[Path]:
        """Where an absolute import may start: the file's folder and its parents up to its
        folder of `roots`, then those folders."""
        bases = []
        here = path.parent
        root = self.place(path, roots)
        top = root[0] if root else None
        while top is not None and here.resolve().is_relative_to(top):
            bases.append(here)
            if here.resolve() == top:
                break
            here = here.parent
        return bases + [r for r in roots if r not in bases]


def python_imports(text: str, folder: Path, bases: list[Path]) -> list[Path]:
    """Candidate files for the imports in `text`, in order of appearance."""
    out: list[Path] = []
    for dots, module, names in _PY_FROM.findall(text):
        parts = [p for p in module.split(".") if p]
        if dots:
            base = folder
            for _ in range(len(dots) - 1):
                base = base.parent
            starts = [base]
        else:
            starts = bases
        for start in starts:
            target = start.joinpath(*parts)
            out += [target.with_suffix(".py") if parts else start / "__init__.py", target / "__init__.py"]
            for name in names.split(","):
                name = name.split(" as ")[0].strip()
                if name.isidentifier():
                    out.append(target / f"{name}.py")
    for modules in _PY_IMPORT.findall(text):
        for module in modules.split(","):
            parts = [p for p in module.split(" as ")[0].strip().split(".") if p]
            if not parts or not all(p.isidentifier() for p in parts):
                continue
            for start in bases:
                target = start.joinpath(*parts)
                out += [target.with_suffix(".py"), target / "__init__.py"]
    return out


def js_candidates(folder: Path, spec: str) -> list[Path]:
    """The files a relative JavaScript/TypeScript import may name (Node's and bundlers' endings)."""
    return [Path(str(folder / spec) + ending) for ending in JS_RESOLVE]


def text_of(path: Path) -> str | None:
    """The file's text, or None when it looks binary or is not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:SNIFF_BYTES]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
