"""Cross-file cursors: the identifiers another file of the project defines, typed with the siblings open.

A typing replay (bench.replay) meets such a cursor only when the model misses a word's first
letter, so it sees a handful. This benchmark aims at them (CrossCodeEval's question, on real
projects none of which is this one): in a target file of a project, with the project's other
files open, each *probe* is an identifier occurrence. The user starts its line afresh (the line's
text removed after its indentation; a request there, which is where the server chooses the
context again), types the line up to the identifier and its first letters (requests after 1, 2
and 3 of them while more remain: the first is a new word, the next ones warm keystrokes). A
request is right when the next word it suggests is exactly the rest of the identifier.

Probes are *cross* (the identifier is defined in another file of the project and not in the
target) or *local* (any other identifier of 4+ characters: the control, "no worse on all
cursors"). The projects have a split decided before any run: `tune` (looked at while improving
the choice of chunks), `held` (run only to check) and, from round 4, `tune2` (a fresh tune split,
so that `held` stays unseen). Python: the standard library's `email`, `json`, `asyncio`, `http`,
`logging` and `concurrent` (copied to a plain folder: pyenv's git ignores its versions/);
JavaScript: npm's own `semver`, `cacache`, `minipass-fetch` and `pacote`; C: the `ujson` and `lz4`
sdists from PyPI, nettle's examples (Debian's nettle-dev) and the reference Argon2 library (the
argon2-cffi-bindings sdist's `extras/libargon2`).

Per request: right or not, ms, prompt tokens decoded (cpcLsp/stats). The cold cost is the first
request of each target after an unrelated document (nothing of it in the KV cache, memoryBudgetMib 0).
`--peer` adds llama.vim's /infill request on llama-server (same model, same probes) with its ring
buffer in `input_extra`, and without it.

`python -m bench.crossfile --models qwen2.5-coder-0.5b --split tune`
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import report
from bench.replay import accepts, next_word
from bench.stats import median, ratio
from lsp_server.chunks import STOP
from lsp_server.settings import Settings
from lsp_server.split import is_word_char
from tests.support.lsp_client import LspClient, insert_text

WORK = Path("/tmp/cpc-lsp-bench-crossfile")
REGION_LINES = 150  # the probes of a target lie in this many consecutive lines
TYPED = 3  # requests after 1..TYPED letters of the identifier (while at least one letter remains)
RING_CHUNKS, RING_LINES = 16, 64  # llama.vim's ring_n_chunks, ring_chunk_size
NOT_PROJECT = frozenset({"NULL", "exports", "module", "require"})  # defined by the language, whoever repeats them
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


LANGUAGE_IDS = {".py": "python", ".js": "javascript", ".c": "c", ".h": "c"}


def is_code(line: str) -> bool:
    """Not blank and not a comment line (docstrings are let through: they are hard to tell by line)."""
    body = line.strip()
    return bool(body) and not body.startswith(("#", "//", "/*", "*"))


def start_server(model: str | None, root: Path, threads: int, settings: dict[str, Any]) -> LspClient:
    """The real server over stdio with `root` as its workspace folder, loaded."""
    client = LspClient(["--log-level", "warning"])
    options = {"cpcLsp": {**settings, "threads": threads, **({"model": model} if model else {})}}
    capabilities = {
        "general": {"positionEncodings": ["utf-16"]},
        "textDocument": {"inlineCompletion": {}, "synchronization": {}},
    }
    client.call("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": capabilities,
                               "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
                               "initializationOptions": options})  # fmt: skip
    client.notify("initialized", {})
    message = client.wait_loaded(timeout=300)
    if not message.startswith("loaded"):
        raise RuntimeError(message)
    return client


@dataclass(frozen=True)
class Project:
    name: str
    kind: str  # python | javascript | c
    split: str  # tune | tune2 | held
    root: Path
    files: tuple[str, ...]  # opened (the targets among them are typed in turn)
    targets: tuple[str, ...]


@dataclass(frozen=True)
class Probe:
    target: str
    line_start: int  # offset of the line's first character
    indent_end: int  # offset after its indentation: where the user starts the line
    line_end: int  # offset of its newline
    start: int  # the identifier's offset
    word: str
    cls: str  # cross | local


def _stdlib(work: Path, package: str) -> Path:
    folder = work / "python"
    if not (folder / package).is_dir():
        shutil.copytree(Path(sysconfig.get_paths()["stdlib"]) / package, folder / package,
                        ignore=shutil.ignore_patterns("__pycache__", "tests"))  # fmt: skip
    return folder


def _npm(work: Path, package: str) -> Path:
    """npm's own copy of a package (it ships with Node), copied so the package is the workspace."""
    folder = work / "js" / package
    if not folder.is_dir():
        npm_modules = Path(shutil.which("npm") or "/usr/bin/npm").resolve().parent.parent / "node_modules"
        shutil.copytree(npm_modules / package, folder)
    return folder


def _sdist(work: Path, name: str, version: str, say) -> Path:
    folder = work / "c" / f"{name}-{version}"
    if not folder.is_dir():
        say(f"downloading the {name} {version} sdist from PyPI")
        (work / "c").mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", f"{name}=={version}",
                        "-d", str(work / "c")], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        with tarfile.open(work / "c" / f"{name}-{version}.tar.gz") as tar:
            tar.extractall(work / "c", filter="data")
    return folder


def _nettle(work: Path) -> Path:
    folder = work / "c" / "nettle-examples"
    if not folder.is_dir():
        shutil.copytree("/usr/share/doc/nettle-dev/examples", folder)
    return folder


def _argon2(work: Path, say) -> Path:
    """The reference Argon2 library as the argon2-cffi-bindings 21.2.0 sdist ships it: its own folder
    is the workspace (include/argon2.h one level down, as a `-Iinclude` build finds it)."""
    return _sdist(work, "argon2-cffi-bindings", "21.2.0", say) / "extras" / "libargon2"


def projects(work: Path, say) -> list[Project]:
    """The projects, their open files and targets; the split is fixed here, before any run."""
    email = tuple(f"email/{n}" for n in ("message.py", "_policybase.py", "charset.py", "utils.py", "errors.py",
                                         "_encoded_words.py", "iterators.py", "generator.py", "header.py"))  # fmt: skip
    asyncio = tuple(f"asyncio/{n}" for n in ("base_events.py", "events.py", "futures.py", "tasks.py", "coroutines.py",
                                             "exceptions.py", "base_futures.py", "base_tasks.py", "transports.py",
                                             "protocols.py", "streams.py", "constants.py", "log.py"))  # fmt: skip
    http = tuple(f"http/{n}" for n in ("__init__.py", "client.py", "server.py", "cookiejar.py", "cookies.py"))
    json_ = tuple(f"json/{n}" for n in ("__init__.py", "decoder.py", "encoder.py", "scanner.py"))
    semver = ("classes/range.js", "classes/comparator.js", "classes/semver.js", "internal/re.js",
              "internal/parse-options.js", "internal/constants.js", "internal/debug.js", "internal/identifiers.js")  # fmt: skip
    cacache = tuple(f"lib/{n}" for n in ("get.js", "put.js", "index.js", "entry-index.js", "memoization.js", "verify.js",
                                         "rm.js", "content/read.js", "content/write.js", "content/rm.js",
                                         "content/path.js", "util/tmp.js", "util/glob.js", "util/hash-to-segments.js"))  # fmt: skip
    fetch = tuple(f"lib/{n}" for n in ("index.js", "body.js", "request.js", "response.js", "headers.js",
                                       "fetch-error.js", "abort-error.js", "blob.js"))  # fmt: skip
    ujson = ("lib/ultrajson.h", "lib/ultrajsonenc.c", "lib/ultrajsondec.c", "python/objToJSON.c", "python/JSONtoObj.c",
             "python/ujson.c")  # fmt: skip
    lz4 = ("lz4libs/lz4.h", "lz4libs/lz4hc.h", "lz4libs/lz4frame.h", "lz4libs/lz4frame_static.h", "lz4libs/xxhash.h",
           "lz4libs/lz4frame.c", "lz4/frame/_frame.c", "lz4/block/_block.c")  # fmt: skip
    nettle = ("io.h", "io.c", "rsa-session.h", "read_rsa_key.c", "rsa-encrypt.c", "rsa-decrypt.c", "rsa-keygen.c",
              "rsa-sign.c", "timing.h", "timing.c")  # fmt: skip
    # tune2 (round 4): a fresh tune split, chosen after round 3 so that the held-out projects stay unseen
    logging_ = ("logging/__init__.py", "logging/handlers.py", "logging/config.py")
    futures = tuple(f"concurrent/futures/{n}" for n in ("__init__.py", "_base.py", "process.py", "thread.py"))
    pacote = tuple(f"lib/{n}" for n in ("registry.js", "fetcher.js", "remote.js", "file.js", "dir.js", "git.js", "index.js",
                                        "util/protected.js", "util/trailing-slashes.js", "util/add-git-sha.js",
                                        "util/cache-dir.js", "util/is-package-bin.js", "util/tar-create-options.js"))  # fmt: skip
    argon2 = ("include/argon2.h", "src/argon2.c", "src/core.h", "src/core.c", "src/encoding.h", "src/encoding.c",
              "src/ref.c", "src/thread.h", "src/thread.c", "src/blake2/blake2.h", "src/blake2/blake2b.c")  # fmt: skip
    return [
        Project(
            "logging",
            "python",
            "tune2",
            _stdlib(work, "logging"),
            logging_,
            ("logging/handlers.py", "logging/config.py"),
        ),
        Project(
            "concurrent",
            "python",
            "tune2",
            _stdlib(work, "concurrent"),
            futures,
            ("concurrent/futures/process.py", "concurrent/futures/thread.py"),
        ),  # fmt: skip
        Project("pacote", "javascript", "tune2", _npm(work, "pacote"), pacote, ("lib/git.js", "lib/remote.js")),
        Project("argon2", "c", "tune2", _argon2(work, say), argon2, ("src/argon2.c", "src/core.c")),
        Project("email", "python", "tune", _stdlib(work, "email"), email, ("email/message.py", "email/generator.py")),
        Project(
            "semver", "javascript", "tune", _npm(work, "semver"), semver, ("classes/range.js", "classes/comparator.js")
        ),
        Project(
            "ujson",
            "c",
            "tune",
            _sdist(work, "ujson", "5.10.0", say),
            ujson,
            ("python/objToJSON.c", "python/JSONtoObj.c"),
        ),
        Project(
            "asyncio",
            "python",
            "held",
            _stdlib(work, "asyncio"),
            asyncio,
            ("asyncio/base_events.py", "asyncio/tasks.py"),
        ),
        Project("http", "python", "held", _stdlib(work, "http"), http, ("http/client.py", "http/server.py")),
        Project("json", "python", "held", _stdlib(work, "json"), json_, ("json/__init__.py", "json/decoder.py")),
        Project("cacache", "javascript", "held", _npm(work, "cacache"), cacache, ("lib/get.js", "lib/entry-index.js")),
        Project(
            "minipass-fetch", "javascript", "held", _npm(work, "minipass-fetch"), fetch, ("lib/index.js", "lib/body.js")
        ),
        Project(
            "lz4", "c", "held", _sdist(work, "lz4", "4.3.3", say), lz4, ("lz4libs/lz4frame.c", "lz4/frame/_frame.c")
        ),
        Project("nettle", "c", "held", _nettle(work), nettle, ("rsa-encrypt.c", "rsa-decrypt.c", "rsa-keygen.c")),
    ]


# What the benchmark counts as a definition: its own patterns, stricter than the server's
# (lsp_server.chunks.definitions), so the scored set does not follow the chooser it measures.
# Comments (and Python's triple-quoted strings, its docstrings) are removed; the other strings are
# read first and kept as they are, so a `*/*` in a JavaScript string (pacote's registry.js: an Accept
# header) or a `#` in a Python one is not taken for the start of a comment.
_QUOTED = r'"(?:\\[\s\S]|[^"\\\n])*"|\'(?:\\[\s\S]|[^\'\\\n])*\''  # one line (or a backslash-newline), escapes skipped
_STRINGS = {
    "python": re.compile(r'(?P<drop>"""(?:\\[\s\S]|[^\\])*?"""|\'\'\'(?:\\[\s\S]|[^\\])*?\'\'\'|#[^\n]*)|' + _QUOTED),
    "javascript": re.compile(r"(?P<drop>/\*[\s\S]*?\*/|//[^\n]*)|" + _QUOTED + r"|`(?:\\[\s\S]|[^`\\])*`"),
    "c": re.compile(r"(?P<drop>/\*[\s\S]*?\*/|//[^\n]*)|" + _QUOTED),
}


def strip_comments(text: str, kind: str) -> str:
    """`text` without its comments (and Python's triple-quoted strings); its other strings, read
    from their opening quote to their closing one (escapes skipped, a template literal across
    lines), stay as they are. JavaScript's regular-expression literals are not told apart."""
    return _STRINGS[kind].sub(lambda m: "" if m.group("drop") is not None else m.group(), text)


def comment_lines(text: str, kind: str) -> frozenset[int]:
    """The 0-based lines a block comment of more than one line covers, from the line it opens on to
    the one it closes on (strings read as strip_comments reads them)."""
    lines: set[int] = set()
    for m in _STRINGS[kind].finditer(text):
        drop = m.group("drop")
        if drop is not None and drop.startswith("/*") and "\n" in drop:
            first = text.count("\n", 0, m.start())
            lines.update(range(first, first + drop.count("\n") + 1))
    return frozenset(lines)


_DEFINED = {
    "python": (r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", r"^[ \t]*class[ \t]+(\w+)", r"^(\w+)[ \t]*(?::[^=\n]+)?=[^=]"),
    "javascript": (
        r"\bfunction[ \t]*\*?[ \t]*(\w+)",
        r"\bclass[ \t]+(\w+)",
        r"^(?:const|let|var)[ \t]+(\w+)[ \t]*=",
        r"\bexports\.(\w+)[ \t]*=",
        r"^[ \t]+(?:static[ \t]+|async[ \t]+|get[ \t]+|set[ \t]+)*(?!if\b|for\b|while\b|switch\b|catch\b|return\b)(\w+)[ \t]*\([^)\n]*\)[ \t]*\{",
    ),
    "c": (
        r"^[ \t]*#[ \t]*define[ \t]+(\w+)",
        r"\b(?:struct|enum|union)[ \t]+(\w+)[ \t]*\{",
        r"\}[ \t]*(\w+)[ \t]*;",
        r"^[ \t]*typedef[^;{(]*?\b(\w+)[ \t]*;",
        r"^(?:[A-Za-z_]\w*[ \t\*]+)+\**(\w+)[ \t]*\(",
        r"^[ \t]+(\w+)[ \t]*(?:=[^,;\n]*)?,?[ \t]*$",
    ),  # the last: an enum's members, one a line (never a `x = y;` statement)
}
# Where a file binds a name for itself (a local variable, a parameter, a field it assigns): a name
# the target binds is the target's own even when another file defines the same word (`value`,
# `size`, `entry`), so it is not a cross-file cursor. Import bindings do not count (the name they
# bind is the other file's). The name is matched on the one line, comments and strings removed.
_C_TYPE_WORDS = r"(?:(?:const|static|unsigned|signed|struct|enum|union|volatile|register|extern|inline)[ \t]+)*"
_C_NOT_TYPE = r"(?!(?:return|else|case|goto|sizeof|do|typedef)\b)"
# (pattern, which words of its group: "all", the "first" or the "last" of each comma-separated piece)
_BOUND: dict[str, tuple[tuple[str, str], ...]] = {
    "python": (
        (r"^[ \t]*((?:[\w.\[\]*]+[ \t]*,[ \t]*)*\w+(?:[ \t]*,[ \t]*[\w.\[\]*]+)*)[ \t]*(?::[^=\n]+)?=(?!=)", "first"),
        (r"\bfor[ \t]+([\w, \t()]+?)[ \t]+in\b", "all"),
        (r"\b(?:with|except)\b[^\n]*?\bas[ \t]+(\w+)", "all"),
        (r"^[ \t]*(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(([^)]*)", "first"),
        (r"\blambda\b([^:\n]*):", "first"),
        (r"\bself\.(\w+)[ \t]*(?::[^=\n]+)?=(?!=)", "all"),
        (r"^[ \t]*(?:global|nonlocal)[ \t]+([\w, \t]+)", "all"),
    ),
    "javascript": (
        (r"\b(?:const|let|var)[ \t]+(\w+)", "all"),
        (r"\b(?:const|let|var)[ \t]*\{([^}]*)\}[ \t]*=[ \t]*(?!require\b)", "last"),
        (r"\bfunction\b[^(\n]*\(([^)]*)\)", "first"),
        (r"\(([^()\n]*)\)[ \t]*=>", "first"),
        (r"\b(\w+)[ \t]*=>", "all"),
        (
            r"^[ \t]+(?:async[ \t]+|static[ \t]+|get[ \t]+|set[ \t]+)*(?!if\b|for\b|while\b|switch\b|catch\b)\w+[ \t]*\(([^)\n]*)\)[ \t]*\{",
            "first",
        ),
        (r"\bthis\.(\w+)[ \t]*=(?!=)", "all"),
        (r"\bcatch[ \t]*\(([^)]*)\)", "all"),
        (r"^[ \t]*(\w+)[ \t]*=(?!=)", "all"),
    ),
    "c": (
        (
            r"^[ \t]*"
            + _C_TYPE_WORDS
            + _C_NOT_TYPE
            + r"[A-Za-z_]\w*(?:[ \t]*\*+[ \t]*|[ \t]+)(\**[A-Za-z_]\w*(?:[ \t]*\[[^\]]*\])?(?:[ \t]*=[^,;]*)?(?:[ \t]*,[ \t]*\**[A-Za-z_]\w*(?:[ \t]*\[[^\]]*\])?(?:[ \t]*=[^,;]*)?)*)[ \t]*[;=\[]",
            "first",
        ),
        (r"^" + _C_NOT_TYPE + r"[A-Za-z_][\w \t*]*\(([^;]*)$", "last"),  # a function definition's parameters
        (r"^[ \t]*(\w+)[ \t]*=(?!=)", "all"),
    ),
}


def bound_in(text: str, kind: str) -> frozenset[str]:
    """The names `text` binds for itself (see _BOUND): assignments, declarations, parameters,
    loop and `as` names, fields it assigns; not what it imports."""
    code = strip_comments(text, kind)
    code = re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|`(?:\\.|[^`\\])*`', '""', code)
    names: set[str] = set()
    for line in code.splitlines():
        if re.search(r"\b(?:import|require)\b|^[ \t]*#", line):
            continue
        for pattern, which in _BOUND[kind]:
            for m in re.finditer(pattern, line):
                for piece in re.sub(r"\[[^\]]*\]|=[^,]*|:[^,]*", "", m.group(1)).split(","):
                    words = re.findall(r"[A-Za-z_]\w*", piece)
                    if words:
                        names.update(words if which == "all" else [words[0] if which == "first" else words[-1]])
    return frozenset(names - STOP)


def defined_in(text: str, kind: str) -> frozenset[str]:
    """The names a file defines, by the benchmark's own patterns (comments and docstrings removed)."""
    code = strip_comments(text, kind)
    return frozenset(n for p in _DEFINED[kind] for n in re.findall(p, code, re.M) if n not in STOP)


def cross_identifiers(project: Project, target: str) -> frozenset[str]:
    """Names another file of the project defines and the target neither defines nor binds for
    itself (bound_in: its locals, parameters and fields), 4+ characters."""
    text = (project.root / target).read_text()
    own = defined_in(text, project.kind) | bound_in(text, project.kind)
    others: set[str] = set()
    for name in project.files:
        if name != target:
            others |= defined_in((project.root / name).read_text(), project.kind)
    return frozenset(
        n
        for n in others - own
        if len(n) >= 4 and n not in STOP and n not in NOT_PROJECT and not (n.startswith("__") and n.endswith("__"))
    )


def probes(
    project: Project, target: str, per_target: int, local_share: float = 0.4, first_use: bool = False
) -> list[Probe]:
    """`per_target` cross probes (one a line, spread evenly over the REGION_LINES lines of the
    file, after its first 10, that hold the most) and about `local_share` as many local ones, in
    file order. `first_use` (CrossCodeEval's question: a name the current file cannot tell):
    `per_target` cross probes whose name the file has not used in the UNSEEN_BEFORE_CHARS before
    the line, spread over the whole file, then half as many cross probes it has used (the
    repeats) and the local ones, all in file order."""
    text = full = (project.root / target).read_text()
    cross = cross_identifiers(project, target)
    lines = text.splitlines(keepends=True)
    found: dict[str, list[Probe]] = {"cross": [], "local": []}
    offset = 0
    in_comment = comment_lines(text, project.kind) if project.kind != "python" else frozenset()
    in_docstring: str | None = None  # the quotes of the Python docstring (triple-quoted string) the line is in
    for number, line in enumerate(lines):
        line_start, offset = offset, offset + len(line)
        body = line.strip()
        if project.kind == "python":
            quotes = in_docstring
            for quote in ('"""', "'''"):
                if (quotes is None or quotes == quote) and line.count(quote) % 2 == 1:
                    quotes = None if quotes == quote else quote
            was, in_docstring = in_docstring, quotes
            if was is not None or in_docstring is not None or '"""' in line or "'''" in line:
                continue  # prose, not code
        if number in in_comment:
            continue
        if number < 10 or not line.endswith("\n") or not is_code(line) or body.startswith(('"""', "'''")):
            continue
        indent_end = line_start + len(line) - len(line.lstrip(" \t"))
        code = line.split("#", 1)[0] if project.kind == "python" else line.split("//", 1)[0]
        best: Probe | None = None
        for m in _WORD.finditer(code):
            word = m.group()
            if len(word) < 4 or word in STOP or _in_string(code, m.start()):
                continue
            cls = "cross" if word in cross else "local"
            probe = Probe(target, line_start, indent_end, offset - 1, line_start + m.start(), word, cls)
            if cls == "cross":
                best = probe
                break
            best = best or probe
        if best is not None:
            found[best.cls].append(best)
    if first_use:
        fresh = lambda q: re.search(rf"\b{re.escape(q.word)}\b", full[: q.line_start][-UNSEEN_BEFORE_CHARS:]) is None  # noqa: E731
        picked = _spread([q for q in found["cross"] if fresh(q)], per_target)
        picked += _spread([q for q in found["cross"] if not fresh(q)], per_target // 2)
        picked += _spread(found["local"], round(per_target * local_share))
        return sorted(picked, key=lambda p: p.start)
    # one region of the file (REGION_LINES lines, the one with the most cross probes): consecutive
    # probes a few lines apart decode a few lines each, where probes spread over a file would each
    # move the window and decode it whole (a shared 2-core machine cannot afford that)
    crosses = [full.count("\n", 0, q.start) for q in found["cross"]]
    first = max(
        range(len(crosses)), key=lambda i: sum(1 for n in crosses[i:] if n < crosses[i] + REGION_LINES), default=0
    )
    top = crosses[first] + REGION_LINES if crosses else 0
    within = lambda q: (crosses[first] if crosses else 0) <= full.count("\n", 0, q.start) < top  # noqa: E731
    picked = _spread([q for q in found["cross"] if within(q)], per_target)
    picked += _spread([q for q in found["local"] if within(q)], round(per_target * local_share))
    return sorted(picked, key=lambda p: p.start)


def _in_string(code: str, at: int) -> bool:
    """Inside a quoted string on this line (an even count of quotes before means outside)."""
    before = code[:at]
    return any(before.count(q) % 2 == 1 for q in ('"', "'", "`"))


def _spread(items: list[Probe], n: int) -> list[Probe]:
    if len(items) <= n:
        return list(items)
    step = len(items) / n
    return [items[int(i * step + step / 2)] for i in range(n)]


class Doc:
    """The target document, whole-text changes (the editor's full sync), cursor at an offset."""

    def __init__(self, client: LspClient, uri: str, text: str, language: str) -> None:
        self.client, self.uri, self.text, self.version = client, uri, text, 1
        client.notify(
            "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}}
        )

    def set(self, text: str) -> None:
        if text == self.text:
            return
        self.version += 1
        self.text = text
        self.client.notify("textDocument/didChange", {"textDocument": {"uri": self.uri, "version": self.version},
                                                      "contentChanges": [{"text": text}]})  # fmt: skip

    def position(self, offset: int) -> dict[str, int]:
        before = self.text[:offset]
        line_start = before.rfind("\n") + 1
        return {"line": before.count("\n"), "character": len(before[line_start:].encode("utf-16-le")) // 2}

    def close(self) -> None:
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": self.uri}})


def ask(
    client: LspClient, doc: Doc, offset: int, prompt: list[int] | None = None
) -> tuple[str | None, float, int | None]:
    """(insertText, ms, prompt tokens decoded: None when the engine was not called, e.g. a letter
    typed along the suggestion shown, answered from it). `prompt`: gets the prompt's whole length
    appended (whatever the KV cache held of it) when the engine was called."""
    before = client.call("cpcLsp/stats", None) or {}
    params = {"textDocument": {"uri": doc.uri}, "position": doc.position(offset), "context": {"triggerKind": 2}}
    reply = client.request("textDocument/inlineCompletion", params, timeout=900)
    after = client.call("cpcLsp/stats", None) or {}
    engine = after.get("engineAnswers", 0) > before.get("engineAnswers", 0)
    if prompt is not None and engine and after.get("promptTokens") is not None:
        prompt.append(after["promptTokens"])
    return insert_text(reply), reply.ms, after.get("decodedTokens", 0) if engine else None


def judge(shown: str | None, text: str, cursor: int) -> bool:
    """The suggested next word is exactly what the file goes on with."""
    word_start = cursor
    while word_start > 0 and is_word_char(text[word_start - 1]):
        word_start -= 1
    word = text[word_start:cursor]
    chunk = next_word(shown[len(word) :]) if shown is not None and shown.startswith(word) else ""
    return accepts(chunk, text[cursor:])


def states(full: str, probe: Probe, typing: bool = False):
    """(document text, cursor, typed letters) for the line start and each letter typed. In place,
    the rest of the file stays after the line (editing a file); `typing`, the file is being
    written: nothing after the cursor, every earlier line as the file has it."""
    tail = "" if typing else full[probe.line_end :]
    yield full[: probe.indent_end] + tail, probe.indent_end, 0
    for k in range(1, min(TYPED, len(probe.word) - 1) + 1):
        cursor = probe.start + k
        yield full[:cursor] + tail, cursor, k


def run_target(client: LspClient, project: Project, target: str, items: list[Probe], settings: dict[str, Any],
               open_docs: dict[str, Doc], typing: bool = False, cold_only: bool = False) -> dict[str, Any]:  # fmt: skip
    """Every probe of a target, in file order, on one server with the siblings open (`cold_only`:
    the first request alone, the cold one)."""
    full = (project.root / target).read_text()
    unrelated = Doc(
        client,
        "untitled:unrelated",
        "Nothing in this sentence is like the project's files, so the cache is",
        "plaintext",
    )
    ask(client, unrelated, len(unrelated.text))
    unrelated.close()
    doc = Doc(client, (project.root / target).as_uri(), full, LANGUAGE_IDS.get(Path(target).suffix, "plaintext"))
    out = []
    cold: dict[str, Any] | None = None
    try:
        for probe in items:
            requests = []
            for text, cursor, k in states(full, probe, typing):
                doc.set(text)
                length: list[int] = []
                shown, ms, decoded = ask(client, doc, cursor, length)
                if cold is None:
                    # "prompt": its whole length, the cold bound's measure: "decoded" leaves out what the KV
                    # cache still held (the previous target's first lines, when two files open with one licence)
                    cold = {"ms": ms, "decoded": decoded, "prompt": length[0] if length else None}
                    if cold_only:
                        return {"cold": cold, "probes": []}
                if k:
                    requests.append({"k": k, "right": judge(shown, full, cursor), "ms": ms, "decoded": decoded,
                                     "shown": (shown or "")[:40]})  # fmt: skip
                else:
                    line_ms, line_decoded = ms, decoded
            out.append({"word": probe.word, "cls": probe.cls, "line": full.count("\n", 0, probe.start) + 1,
                        "line_ms": line_ms, "line_decoded": line_decoded, "requests": requests, "engine_flag": True})  # fmt: skip
    finally:
        doc.close()
    return {"cold": cold, "probes": out}


def coverage(
    project: Project, target: str, items: list[Probe], budget: int, typing: bool = False
) -> list[dict[str, Any]]:
    """Offline, with the server's own chooser: at each probe's line start, the chunks chosen (as
    the server chooses them at that keystroke), whether one defines the probe's identifier, and
    whether any chunk of the open files does (so could have been chosen)."""
    from lsp_server.context import ContextChooser
    from lsp_server.documents import Document

    chooser = ContextChooser()
    chooser.workspace.set_roots([str(project.root)])
    docs = {(project.root / rel).as_uri(): Document((project.root / rel).as_uri(), (project.root / rel).read_text())
            for rel in project.files if rel != target}  # fmt: skip
    full = (project.root / target).read_text()
    uri = (project.root / target).as_uri()
    out = []
    for probe in items:
        text, cursor, _ = next(states(full, probe, typing))
        doc = Document(uri, text)
        chosen = chooser.choose(uri, doc, cursor, docs.items(), budget)
        every = [c for source in chooser.sources(uri, doc, docs.items()) for c in chooser.chunker.chunks(source)]
        word = probe.word
        if isinstance(chosen, list):  # the chooser of chunks alone (before lsp_server.outline)
            shown, labels = "".join(c.text for c in chosen), [f"{c.path}:{c.start}" for c in chosen]
        else:
            files = chosen.files()
            shown, labels = "".join(f.text for f in files), [f"{f.path}:{f.text.count(chr(10))} lines" for f in files]
        defining = [c for c in every if word in defined_in(c.text, project.kind)]
        out.append({"word": word, "cls": probe.cls, "chosen": labels, "chars": len(shown),
                    "chosen_defines": word in defined_in(shown, project.kind),
                    "chosen_mentions": re.search(rf"\b{re.escape(word)}\b", shown) is not None,
                    "defining": [f"{c.path}:{c.start}" for c in defining]})  # fmt: skip
    return out


# --- the llama.vim-style peer -------------------------------------------------------------------


class RingPeer:
    """llama.vim's /infill request (bench.infill) with its ring buffer in `input_extra`: a chunk of
    RING_LINES lines of each file entered (its first lines: the cursor is at the top of a file
    just opened), at most RING_CHUNKS, as `{"filename": ..., "text": ...}` objects (llama-server's
    format, tools/server/server-context.cpp). Greedy (`top_k` 1) and without llama.vim's time
    limits, so a slow machine does not cut its answer short: its best case."""

    def __init__(self, server, max_tokens: int) -> None:
        from bench.infill import InfillPeer

        self.infill = InfillPeer(server, max_tokens)
        self.max_tokens = max_tokens
        self.ring: list[dict[str, str]] = []

    def entered(self, name: str, text: str) -> None:
        chunk = "".join(text.splitlines(keepends=True)[:RING_LINES])
        self.ring = [c for c in self.ring if c["filename"] != name][-(RING_CHUNKS - 1) :] + [
            {"filename": name, "text": chunk}
        ]

    def ask(self, text: str, cursor: int, extra: bool) -> tuple[str, float, dict[str, Any]]:
        from bench.infill import llama_vim_request, local_context

        ctx = local_context(text, cursor)
        body = {**llama_vim_request(ctx, 0), "input_extra": self.ring if extra else [], "n_predict": self.max_tokens,
                "top_k": 1, "t_max_prompt_ms": 600_000, "t_max_predict_ms": 600_000}  # fmt: skip
        body["response_fields"] = [*body["response_fields"], "timings/prompt_n"]
        started = time.perf_counter()
        status, answer = self.infill._post(body)
        ms = (time.perf_counter() - started) * 1000
        if status != 200 or not isinstance(answer, dict):
            raise RuntimeError(f"llama-server refused the /infill request ({status}): {str(answer)[:300]}")
        return ctx.middle + answer.get("content", ""), ms, answer


def run_peer(peer: RingPeer, project: Project, target: str, items: list[Probe], extra: bool,
             typing: bool = False) -> dict[str, Any]:  # fmt: skip
    full = (project.root / target).read_text()
    peer.ring = []
    for rel in project.files:
        if rel != target:
            peer.entered(rel, (project.root / rel).read_text())
    peer.ask("Nothing in this sentence is like the project's files, so the cache is", 70, False)
    out, cold = [], None
    for probe in items:
        requests = []
        for text, cursor, k in states(full, probe, typing):
            shown_line, ms, answer = peer.ask(text, cursor, extra)
            decoded = (answer.get("timings") or {}).get("prompt_n")
            if cold is None:
                cold = {"ms": ms, "decoded": decoded}
            if k:
                # what it shows is the line from the line's start: keep the part from the word on
                line_start = text.rfind("\n", 0, cursor) + 1
                word_start = probe.start
                shown = shown_line[word_start - line_start :]
                requests.append({"k": k, "right": judge(shown, full, cursor), "ms": ms, "decoded": decoded,
                                 "shown": shown[:40]})  # fmt: skip
            else:
                line_ms, line_decoded = ms, decoded
        out.append({"word": probe.word, "cls": probe.cls, "line": full.count("\n", 0, probe.start) + 1,
                    "line_ms": line_ms, "line_decoded": line_decoded, "requests": requests})  # fmt: skip
    return {"cold": cold, "probes": out}


# --- summary ------------------------------------------------------------------------------------


UNSEEN_BEFORE_CHARS = 4_000  # about the current file's share of a 2,048-token window before the cursor
UNSEEN_AFTER_LINES = 8  # fimSuffixLines


def mark_unseen(runs: list[dict[str, Any]], work: Path = WORK) -> None:
    """Class "cross, unseen" for a cross probe whose identifier the current file's own text in the
    prompt does not contain (UNSEEN_BEFORE_CHARS before the line, UNSEEN_AFTER_LINES after it):
    only another file can tell the model that name. Judged on the file, after the run."""
    roots = {p.name: p.root for p in projects(work, lambda m: None)}
    texts: dict[tuple[str, str], str] = {}
    for run in runs:
        key = (run["project"], run["target"])
        if key not in texts:
            texts[key] = (roots[run["project"]] / run["target"]).read_text()
        lines = texts[key].splitlines(keepends=True)
        for probe in run["probes"]:
            if probe["cls"] != "cross":
                continue
            before = "".join(lines[: probe["line"] - 1])[-UNSEEN_BEFORE_CHARS:]
            after = (
                ""
                if run.get("place") == "typing"
                else "".join(lines[probe["line"] : probe["line"] + UNSEEN_AFTER_LINES])
            )
            probe["unseen"] = re.search(rf"\b{re.escape(probe['word'])}\b", before + after) is None


def paired(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of the (model, target)s that every variant of that model has (a fair comparison
    when some runs did not finish)."""
    variants: dict[str, set[str]] = {}
    have: dict[tuple[str, str], set[str]] = {}
    for r in runs:
        variants.setdefault(r["model"], set()).add(r["variant"])
        have.setdefault((r["model"], r["target"]), set()).add(r["variant"])
    return [r for r in runs if have[(r["model"], r["target"])] == variants[r["model"]]]


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    mark_unseen(runs)
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for run in runs:
        for kind in (run["kind"], "all"):
            groups.setdefault((run["model"], run["split"], run["variant"], kind), []).append(run)
    rows = []
    for (model, split, variant, kind), rs in groups.items():
        probes_ = [p for r in rs for p in r["probes"]]

        def share(cls: str | None, first_only: bool) -> tuple[float | None, int]:
            reqs = [q for p in probes_ if cls is None or p["cls"] == cls or (cls == "unseen" and p.get("unseen"))
                    for q in p["requests"] if not first_only or q["k"] == 1]  # fmt: skip
            return (sum(q["right"] for q in reqs) / len(reqs) if reqs else None), len(reqs)

        unseen, n_unseen = share("unseen", False)

        cross1, n_cross1 = share("cross", True)
        cross, n_cross = share("cross", False)
        local, n_local = share("local", False)
        all_, n_all = share(None, False)
        # a warm keystroke: a letter of a word whose prompt the engine has already seen (an earlier
        # letter of it answered by the engine; in runs before the engine flag was kept, k >= 2)
        warm = [
            q
            for p in probes_
            for i, q in enumerate(p["requests"])
            if q["k"] >= 2
            and (any(x["decoded"] is not None for x in p["requests"][:i]) if p.get("engine_flag") else True)
        ]
        colds = [r["cold"] for r in rs if r.get("cold")]
        rows.append({
            "model": model, "split": split, "variant": variant, "kind": kind, "targets": len(rs),
            "cross_probes": sum(p["cls"] == "cross" for p in probes_), "local_probes": sum(p["cls"] == "local" for p in probes_),
            "cross_right_k1": cross1, "cross_requests_k1": n_cross1, "cross_right": cross, "cross_requests": n_cross,
            "unseen_probes": sum(bool(p.get("unseen")) for p in probes_), "unseen_right": unseen, "unseen_requests": n_unseen,
            "local_right": local, "all_right": all_, "all_requests": n_all,
            "cold_ms": median([c["ms"] for c in colds]), "cold_tokens": median([c["decoded"] for c in colds if c["decoded"] is not None]),
            "line_ms": median([p["line_ms"] for p in probes_]),
            "line_tokens": median([p["line_decoded"] for p in probes_ if p["line_decoded"] is not None]),
            "new_word_ms": median([q["ms"] for p in probes_ for q in p["requests"] if q["k"] == 1]),
            "warm_ms": median([q["ms"] for q in warm]), "warm_keystrokes": len(warm),
            "warm_zero": sum(not q["decoded"] for q in warm) / len(warm) if warm else None,  # None: no engine call
        })  # fmt: skip
    place = lambda r: "typing" if r["variant"].endswith(", typing") else "in place"  # noqa: E731
    base = {(r["model"], r["split"], r["kind"], place(r)): r for r in rows if r["variant"].startswith("context off")}
    for r in rows:
        b = base.get((r["model"], r["split"], r["kind"], place(r)))
        for key in ("cold_ms", "cold_tokens", "line_ms"):
            r[f"{key}_over_off"] = ratio(r[key], b[key]) if b and r is not b else None

    # the largest cold request over its target's without the context: the bound is per request, a median hides it
    def cold_of(run: dict[str, Any]) -> int | None:  # the prompt's length where recorded (older runs: decoded)
        return run["cold"].get("prompt") or run["cold"]["decoded"] if run.get("cold") else None

    off_cold = {(r["model"], r["target"], r.get("place")): cold_of(r) for r in runs
                if r["variant"].startswith("context off") and cold_of(r)}  # fmt: skip
    for r in rows:
        ratios = [(cold_of(run) / off_cold[key], run["target"]) for run in runs
                  if (run["model"], run["split"], run["variant"]) == (r["model"], r["split"], r["variant"])
                  and r["kind"] in (run["kind"], "all") and not run["variant"].startswith("context off")
                  and cold_of(run) is not None
                  and (key := (run["model"], run["target"], run.get("place"))) in off_cold]  # fmt: skip
        r["cold_tokens_max_over_off"], r["cold_max_target"] = max(ratios) if ratios else (None, None)
    rows.sort(key=lambda r: (r["model"], r["split"], r["kind"] != "all", r["kind"], r["variant"]))
    return rows


def table(rows: list[dict[str, Any]]) -> report.Table:
    from bench.report import num, pct, times

    header = ["model", "split", "kind", "variant", "cross probes", "cross right (1st letter)", "cross right (1-3 letters)",
              "unseen cross probes", "unseen cross right (1-3)", "local right", "all right", "cold tokens", "cold ms", "cold / off",
              "largest cold / off (target)", "line-start ms (median)",
              "warm ms", "warm keys with 0 decoded"]  # fmt: skip
    body = [[r["model"], r["split"], r["kind"], r["variant"], num(r["cross_probes"]), pct(r["cross_right_k1"]),
             pct(r["cross_right"]), num(r["unseen_probes"]), pct(r["unseen_right"]), pct(r["local_right"]), pct(r["all_right"]), num(r["cold_tokens"], 0),
             num(r["cold_ms"], 0), times(r["cold_ms_over_off"]),
             f"{times(r['cold_tokens_max_over_off'])} ({Path(r['cold_max_target']).name})" if r.get("cold_max_target") else "-",
             num(r["line_ms"], 0), num(r["warm_ms"], 0),
             f"{pct(r['warm_zero'])} of {r['warm_keystrokes']}"] for r in rows]  # fmt: skip
    return "cross-file probes: first word right at identifiers other files define, context off vs on", header, body


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.crossfile`: cross-file probes; results in bench/results/crossfile.json."""
    parser = argparse.ArgumentParser(prog="python -m bench.crossfile", description=main.__doc__.split(":")[0])
    parser.add_argument("--models", default="qwen2.5-coder-0.5b", help="comma-separated catalogue names or paths")
    parser.add_argument("--split", default="tune", choices=("tune", "tune2", "held", "all"))
    parser.add_argument("--projects", default=None, help="comma-separated project names (default: the split's)")
    parser.add_argument("--targets", type=int, default=None, help="the first N targets of each project (default: all)")
    parser.add_argument("--per-target", type=int, default=8, help="cross probes per target file")
    parser.add_argument(
        "--variants",
        default="off,on",
        help="off, on (extraContext), lexicon (words of the open documents), both, peer (llama.vim's /infill with and without its ring)",
    )
    parser.add_argument("--window", type=int, default=2048, help="contextTokens")
    parser.add_argument(
        "--context-tokens",
        type=int,
        default=Settings().extra_context_tokens,
        help="extraContextTokens of the 'on' variant (the server default)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--place",
        default="in place",
        choices=("in place", "typing"),
        help="in place: the rest of the file after the line; typing: the file being written, nothing after the cursor",
    )
    parser.add_argument(
        "--first-use",
        action="store_true",
        help="cross probes at names the file has not used yet (CrossCodeEval's kind), then repeats and local ones",
    )
    parser.add_argument(
        "--cold-only",
        action="store_true",
        help="each target's first request alone (the cold one): its tokens with the context on and off, quickly",
    )
    parser.add_argument(
        "--label", default="", help="appended to the 'context on' variant's name (e.g. the chooser's version)"
    )
    parser.add_argument("--merge", type=Path, nargs="*", default=[], help="earlier results whose runs join this table")
    parser.add_argument("--paired", action="store_true", help="the table over the targets every variant of a model has")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "crossfile.json")
    args = parser.parse_args(argv)
    say = lambda m: print(f"[crossfile] {m}", file=sys.stderr, flush=True)  # noqa: E731
    chosen = [p for p in projects(args.work, say) if (args.split == "all" or p.split == args.split)
              and (args.projects is None or p.name in args.projects.split(","))]  # fmt: skip
    plan = [
        (p, t, probes(p, t, args.per_target, first_use=args.first_use))
        for p in chosen
        for t in p.targets[: args.targets]
    ]
    say(f"{sum(len(i) for _, _, i in plan)} probes ({sum(x.cls == 'cross' for _, _, i in plan for x in i)} cross) "
        f"in {len(plan)} targets of {len(chosen)} projects")  # fmt: skip
    base = {"maxTokens": args.max_tokens, "minConfidence": 0, "alternatives": 0, "memoryBudgetMib": 0,
            "contextTokens": args.window, "prefetch": False}  # fmt: skip
    typing = args.place == "typing"
    where = ", typing" if typing else ""
    on = {"extraContext": True, "extraContextTokens": args.context_tokens}
    variants = {"off": ("context off" + where, {"extraContext": False}),
                "on": ("context on" + args.label + where, on),
                "lexicon": ("lexicon on" + where, {"extraContext": False, "lexicon": True}),
                "both": ("context and lexicon on" + args.label + where, {**on, "lexicon": True})}  # fmt: skip
    wanted = set(args.variants.split(","))
    runs: list[dict[str, Any]] = []
    for earlier in args.merge:
        runs += json.loads(earlier.read_text())["runs"]
    for model in filter(None, args.models.split(",")):
        label = Path(model).name
        for key, (variant, settings) in variants.items():
            if key not in wanted:
                continue
            for project in chosen:
                client = start_server(model, project.root, args.threads, {**base, **settings})
                try:
                    opened = {}
                    for rel in project.files:
                        opened[rel] = Doc(client, (project.root / rel).as_uri(), (project.root / rel).read_text(),
                                          LANGUAGE_IDS.get(Path(rel).suffix, "plaintext"))  # fmt: skip
                    for p, target, items in plan:
                        if p is not project:
                            continue
                        opened.pop(target).close()  # typed in its own place, as in the editor
                        result = run_target(client, project, target, items, settings, opened, typing, args.cold_only)
                        runs.append({"model": label, "variant": variant, "place": args.place, "kind": project.kind, "split": project.split,
                                     "project": project.name, "target": target, **result})  # fmt: skip
                        report.write_json(args.out.with_suffix(".partial.json"), {"runs": runs})
                        reqs = [q for x in result["probes"] for q in x["requests"] if x["cls"] == "cross"]
                        say(f"{label} {variant} {project.name} {target}: cross {sum(q['right'] for q in reqs)}/{len(reqs)}, "
                            f"cold {result['cold']['ms']:.0f} ms {result['cold']['decoded']} tokens")  # fmt: skip
                        rel_text = (project.root / target).read_text()
                        opened[target] = Doc(client, (project.root / target).as_uri(), rel_text,
                                             LANGUAGE_IDS.get(Path(target).suffix, "plaintext"))  # fmt: skip
                finally:
                    client.shutdown()
        if "peer" in wanted:
            runs += peer_runs(model, plan, args, say, label)
    if args.paired:
        runs = paired(runs)
    rows = summarize(runs)
    print(report.render(table(rows)))
    report.write_json(args.out, {"settings": {**base, "threads": args.threads, "context_tokens": args.context_tokens,
                                              "models": args.models, "split": args.split, "per_target": args.per_target,
                                              "typed": TYPED}, "table": rows, "runs": runs})  # fmt: skip
    return 0


def peer_runs(model: str, plan, args, say, label: str) -> list[dict[str, Any]]:
    """llama.vim on llama-server as llama.vim's README starts it for FIM (batch 1024), with our
    context window: the prefix takes 3/4 of a batch, the suffix the rest, `input_extra` what is left."""
    from tests.support.llama_server import start_llama_server

    runs = []
    # --n-predict: llama-server sizes input_extra as n_ctx - n_batch - 2 * its own n_predict, and its
    # default (-1) makes the prompt 3 tokens too long for the context: every ring request was refused
    # ("request (2051 tokens) exceeds the available context size (2048 tokens)")
    server = start_llama_server(slots=1, ctx=args.window, model=model, threads=args.threads,
                                extra_args=("--batch-size", "1024", "--ubatch-size", "512", "--n-predict", str(args.max_tokens)))  # fmt: skip
    try:
        peer = RingPeer(server, args.max_tokens)
        for project, target, items in plan:
            typing = args.place == "typing"
            for variant, extra in (("peer, no ring", False), ("peer, ring (input_extra)", True)):
                result = run_peer(peer, project, target, items, extra, typing)
                runs.append({"model": label, "variant": variant + (", typing" if typing else ""), "place": args.place, "kind": project.kind, "split": project.split,
                             "project": project.name, "target": target, **result})  # fmt: skip
                report.write_json(args.out.with_suffix(".partial.json"), {"runs": runs})
                reqs = [q for x in result["probes"] for q in x["requests"] if x["cls"] == "cross"]
                say(f"peer {variant} {project.name} {target}: cross {sum(q['right'] for q in reqs)}/{len(reqs)}")
    finally:
        server.stop()
    return runs


if __name__ == "__main__":
    raise SystemExit(main())
