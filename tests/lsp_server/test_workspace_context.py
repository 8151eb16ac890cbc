"""Gathering and choosing context from other files (fast: no model, real files and real git)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine import COLD_EXTRA_TOKENS
from lsp_server.chunks import CHUNK_CHARS, CHUNK_LINES, Chunker, choose, identifiers, related, split_lines
from lsp_server.context import FILE_CHARS_PER_TOKEN, ContextChooser, at_line_start, budget_for, stale_chars, substantial
from lsp_server.documents import Document
from lsp_server.workspace import MAX_FILE_BYTES, Source, Workspace


def uri(path: Path) -> str:
    return path.as_uri()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from .helpers import frobnicate_widget\n")
    (root / "pkg" / "helpers.py").write_text("def frobnicate_widget(x):\n    return x * 2\n")
    (root / "pkg" / "main.py").write_text("from .helpers import frobnicate_widget\nimport pkg.other\n")
    (root / "pkg" / "other.py").write_text("OTHER_CONSTANT = 3\n")
    (root / "web").mkdir()
    (root / "web" / "util.js").write_text("export function makeGadget() { return 1 }\n")
    (root / "web" / "index.js").write_text(
        "import { makeGadget } from './util'\nconst lib = require('./lib/core.js')\n"
    )
    (root / "web" / "lib").mkdir()
    (root / "web" / "lib" / "core.js").write_text("module.exports.coreThing = 1\n")
    (root / "c").mkdir()
    (root / "c" / "point.h").write_text("struct point { int x, y; };\nint point_norm(struct point *p);\n")
    (root / "c" / "main.c").write_text('#include <stdio.h>\n#include "point.h"\n')
    return root


# A module's opening prose, about 270 tokens (lsp_server.context.budget_for: half of them, or the
# short file's floor, whichever is more).
PREAMBLE = '"""' + "This module is part of the project and does what its name says.\n" * 16 + '"""\n\n'


def workspace(root: Path) -> Workspace:
    ws = Workspace()
    ws.set_roots([uri(root)])
    return ws


def test_imports_resolve_for_python_javascript_and_c(project: Path):
    ws = workspace(project)
    py = ws.imports(uri(project / "pkg" / "main.py"), (project / "pkg" / "main.py").read_text())
    assert {s.path for s in py} >= {"pkg/helpers.py", "pkg/other.py"}
    js = ws.imports(uri(project / "web" / "index.js"), (project / "web" / "index.js").read_text())
    assert [s.path for s in js] == ["web/util.js", "web/lib/core.js"]
    c = ws.imports(uri(project / "c" / "main.c"), (project / "c" / "main.c").read_text())
    assert [s.path for s in c] == ["c/point.h"]


def test_an_angled_include_is_found_in_a_workspace_subfolder(project: Path):
    # ujson's python/objToJSON.c says `#include <ultrajson.h>` and builds with -Ilib
    (project / "py").mkdir()
    (project / "py" / "ext.c").write_text("#include <stdio.h>\n#include <point.h>\n")
    found = workspace(project).imports(uri(project / "py" / "ext.c"), (project / "py" / "ext.c").read_text())
    assert [s.path for s in found] == ["c/point.h"]  # stdio.h is nowhere in the workspace


def test_nothing_outside_the_workspace_is_read_even_through_a_symlink(project: Path, tmp_path: Path):
    secret = tmp_path / "secret.py"
    secret.write_text("API_TOKEN = 'x'\n")
    os.symlink(secret, project / "pkg" / "leak.py")
    ws = workspace(project)
    text = "from . import leak\nfrom .. import secret\nimport secret\n"
    assert [s.path for s in ws.imports(uri(project / "pkg" / "main.py"), text)] == ["pkg/__init__.py"]
    assert ws.read(project / "pkg" / "leak.py") is None
    assert ws.read(secret) is None
    assert Workspace().read(project / "pkg" / "helpers.py") is None  # no folder: nothing is read


def test_binary_large_and_git_internal_files_are_skipped(project: Path):
    (project / "pkg" / "blob.py").write_bytes(b"x = 1\n\0\0\0")
    (project / "pkg" / "big.py").write_text("x = 1\n" * (MAX_FILE_BYTES // 6 + 10))
    (project / "pkg" / "latin.py").write_bytes("caf\xe9 = 1\n".encode("latin-1"))
    ws = workspace(project)
    for name in ("blob.py", "big.py", "latin.py"):
        assert ws.read(project / "pkg" / name) is None, name
    assert ws.read(project / "pkg" / "helpers.py") == (
        "pkg/helpers.py",
        "def frobnicate_widget(x):\n    return x * 2\n",
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_ignored_files_and_open_documents_stay_out(project: Path):
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".gitignore").write_text("pkg/other.py\n.env\n")
    (project / ".env").write_text("PASSWORD=hunter2\n")
    ws = workspace(project)
    assert ws.read(project / "pkg" / "other.py") is None
    assert ws.read(project / "pkg" / "helpers.py") is not None
    assert ws.describe(uri(project / ".env")) == (".env", False)
    assert ws.describe(uri(project / "pkg" / "helpers.py")) == ("pkg/helpers.py", True)
    assert ws.read(project / ".git" / "HEAD") is None


def test_chunks_are_whole_lines_at_most_chunk_lines_long():
    text = "".join(f"line_{i} = {i}\n" for i in range(2 * CHUNK_LINES + 22))
    parts = split_lines(text)
    assert [start for start, _ in parts] == [0, CHUNK_LINES, 2 * CHUNK_LINES]
    assert "".join(body for _, body in parts) == text
    long = "".join(f"{'x' * 100}_{i}\n" for i in range(64))
    assert all(len(body) <= CHUNK_CHARS and body.endswith("\n") for _, body in split_lines(long))


def test_the_chunk_defining_what_the_cursor_uses_wins_and_the_order_is_stable():
    chunker = Chunker()
    helper = Source("h", "pkg/helpers.py", "def frobnicate_widget(x):\n    return x\n")
    noise = Source("n", "pkg/noise.py", "def unrelated_thing():\n    return value\n")
    chunks = chunker.chunks(helper) + chunker.chunks(noise)
    near = identifiers("result = frobnicate_widget(value)\n")
    picked = choose(chunks, near, frozenset({"result"}), budget=30)
    assert [c.path for c in picked] == ["pkg/helpers.py"]
    both = choose(chunks, near, frozenset({"result"}), budget=10_000)
    assert [c.path for c in both] == ["pkg/helpers.py", "pkg/noise.py"]  # by path, not by score


def test_the_choice_is_kept_inside_a_line_and_replaced_only_when_it_changes_substantially(project: Path):
    chooser = ContextChooser(workspace(project))
    helpers = Document(uri(project / "pkg" / "helpers.py"), (project / "pkg" / "helpers.py").read_text())
    other = Document(uri(project / "pkg" / "other.py"), (project / "pkg" / "other.py").read_text())
    text = PREAMBLE + "import os\n\nvalue = frobnicate_widget(3)\n"
    doc = Document(uri(project / "scratch.py"), text)
    docs = [("h", helpers), ("o", other), ("me", doc)]
    first = chooser.context_for("me", doc, len(text), docs, 1024)
    assert first is not None and first.path == "scratch.py" and first.name == "proj"
    assert [f.path for f in first.files] == ["pkg/helpers.py"]
    typed = Document(doc.uri, text + "x = OTHER_CONST")  # mid-line: the same value, whatever is typed
    assert chooser.context_for("me", typed, len(typed.text), docs, 1024) is first
    line = Document(doc.uri, text + "x = OTHER_CONSTANT + OTHER_CONSTANT\n")  # a new line: chosen again
    again = chooser.context_for("me", line, len(line.text), docs, 1024)
    assert again is first  # helpers.py is still in the new choice: not a substantial change
    assert not substantial(frozenset({"a", "b"}), frozenset({"a", "b", "c"}))
    assert substantial(frozenset({"a"}), frozenset({"b", "c"}))
    assert at_line_start("x\n   ", 5) and not at_line_start("x\n  y", 5)


def test_the_context_takes_at_most_half_the_files_tokens_or_the_short_files_floor_until_the_file_fills_the_window():
    def budget(chars: int) -> int:
        return budget_for("x" * chars, chars, 1024, 2048)

    assert budget(0) == budget(500) == COLD_EXTRA_TOKENS  # a new or short file: the floor, not a share of nothing
    assert budget(2_000) == COLD_EXTRA_TOKENS  # 500 tokens of file: half is 250, under the floor
    assert budget(3_000) == 320  # 750 tokens of file: at most 375, in steps of 64
    assert budget(10_000) == 1024  # the file fills the window either way: the whole budget
    for chars in range(0, 12_000, 97):  # a cold prompt is at most 1.5x the file's own (counted low), or the floor more
        file_tokens = min(chars / FILE_CHARS_PER_TOKEN, 2048 - budget(chars))
        own = min(chars / FILE_CHARS_PER_TOKEN, 2048)
        assert (file_tokens + budget(chars)) <= max(1.5 * own, own + COLD_EXTRA_TOKENS) + 1e-9
    assert budget_for("x" * 10_000, 10_000, 256, 2048) == 256  # never more than asked
    assert budget_for("", 0, 128, 2048) == 128


def test_a_choice_is_replaced_when_the_cursor_has_moved_a_quarter_window_away(project: Path):
    chooser = ContextChooser(workspace(project))
    helpers = Document(uri(project / "pkg" / "helpers.py"), (project / "pkg" / "helpers.py").read_text())
    other = Document(uri(project / "pkg" / "other.py"), (project / "pkg" / "other.py").read_text())
    docs = [("h", helpers), ("o", other)]
    text = PREAMBLE * 20 + "value = frobnicate_widget(3)\n"
    doc = Document(uri(project / "scratch.py"), text)
    first = chooser.context_for("me", doc, len(text), docs, 512)
    assert first is not None
    close = text + "y = OTHER_CONSTANT\n"  # one line on: a small change is not worth a new prompt
    assert chooser.context_for("me", Document(doc.uri, close), len(close), docs, 512) is first
    step = close + "w" * (4 * 64 * 2)  # mid-line, past the next step of the budget's: the same value
    assert budget_for(step, len(step), 512, 2048) == budget_for(close, len(close), 512, 2048)  # (512 reached already)
    short = PREAMBLE * 2 + "x = frobnicate_widget(1) + 1"  # past the short file's floor: the budget grows with the file
    small = chooser.context_for("s", Document(doc.uri, short), len(short), docs, 512)
    longer = short + "0" * 600  # 150 more tokens of file, one line: the budget would be a step larger
    assert budget_for(longer, len(longer), 512, 2048) > small.max_tokens
    assert chooser.context_for("s", Document(doc.uri, longer), len(longer), docs, 512) is small
    far = close + "# " + "z" * stale_chars(2048) + "\n"  # a quarter of the window on: the window moved too
    again = chooser.context_for("me", Document(doc.uri, far), len(far), docs, 512)
    assert again is not first and again is not None


def test_related_names_are_those_of_code_like_the_cursors():
    chunker = Chunker()
    alike = Source("a", "gen.py", "payload = msg.get_payload()\nif _has_surrogates(payload):\n    cte = charset\n")
    unlike = Source("b", "other.py", "def sum_numbers(values):\n    return reduce(add, values)\n")
    near = identifiers("payload = self._payload\ncte = str(charset)\n")
    found = related(chunker.chunks(alike) + chunker.chunks(unlike), near)
    assert found.get("_has_surrogates", 0) > 0.5 and "reduce" not in found


def test_regions_edited_in_a_closed_document_stay_in_a_ring(project: Path):
    ws = workspace(project)
    path = project / "pkg" / "helpers.py"
    ws.edited("k", 1)
    ws.closed("k", uri(path), path.read_text())
    assert [(s.path, s.edited) for s in ws.ring()] == [("pkg/helpers.py", (1,))]


def test_the_server_sends_the_chosen_chunks_with_each_request_and_none_when_off(project: Path):
    """Through the real server (fake engine): the sibling's chunk rides on the request, the same
    value on a keystroke inside the line, capped at half the context and at half the file's own
    tokens; the setting turns it off."""
    from tests.fixtures import InProcessServer
    from tests.support.lsp_client import Editor

    server = InProcessServer()
    try:
        client = server.client
        capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
        client.call("initialize", {
            "processId": None, "rootUri": None, "capabilities": capabilities,
            "workspaceFolders": [{"uri": uri(project), "name": "proj"}],
            "initializationOptions": {"cpcLsp": {"contextTokens": 512, "extraContextTokens": 4096, "extraContext": True}},
        })  # fmt: skip
        client.notify("initialized", {})
        client.wait_loaded(timeout=30)
        editor = Editor(client)
        helpers = project / "pkg" / "helpers.py"
        editor.open(uri(helpers), helpers.read_text(), "python")
        current = uri(project / "pkg" / "new.py")
        editor.open(current, PREAMBLE + "def go(x):\n    return frob", "python")
        editor.stats()  # a round trip: the server has handled both didOpens (and asked for their contexts)
        assert server.server.context.idle(30)  # chosen off the event loop: made before the first request here
        editor.suggestion(current)
        editor.type(current, "n")
        editor.suggestion(current)
        engine = server.loader.engine
        first, second = engine.requests[-2:]
        assert first.context is not None and first.context is second.context
        assert [f.path for f in first.context.files] == ["pkg/helpers.py"]
        assert first.context.path == "pkg/new.py" and first.context.name == "proj"
        assert (
            first.context.max_tokens == 256
        )  # extraContextTokens, capped at half of contextTokens (a short file: the floor)
        client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"extraContext": False}}})
        editor.type(current, "i")
        editor.suggestion(current)
        assert engine.requests[-1].context is None
    finally:
        server.close()


def test_each_line_of_the_context_carries_its_definitions_rank_and_chunks_come_after():
    from lsp_server.chunks import Chunk
    from lsp_server.context import Chosen
    from lsp_server.outline import Entry

    method = Entry("a#5", "a.py", 5, "run", "    def run(self):\n", ((1, "class Job:\n"),))
    const = Entry("a#9", "a.py", 9, "LIMIT", "LIMIT = 3\n")
    other = Entry("b#0", "b.py", 0, "helper", "def helper():\n")
    chunk = Chunk("c#20", "c.py", 20, "x = 1\ny = 2\n", frozenset({"x", "y"}), frozenset({"x", "y"}))
    chosen = Chosen((method, const, other), (chunk,), order=(const, other, method))
    files = {f.path: f for f in chosen.files()}
    assert files["a.py"].text == "class Job:\n    def run(self):\nLIMIT = 3\n"
    assert files["a.py"].ranks == (2, 2, 0)  # the class line ranks with the method that brought it
    assert files["b.py"].ranks == (1,) and files["c.py"].ranks == (4, 4)  # chunks after every definition


# Paths and what git says of them, in a work tree with nested ignore files, negations, a folder
# excluded whole, the repository's info/exclude and the global excludes file.
IGNORE_FILES = {
    ".gitignore": "*.log\n!keep.log\n/top_only.py\nbuild/\ndocs/**/draft.md\n",
    "sub/.gitignore": "local.py\n!*.log\n/anchored.py\n",
    "sub/deeper/.gitignore": "!local.py\n",
    "build/.gitignore": "!wanted.py\n",  # inside an excluded folder: git never reads it
    "vendor/.gitignore": "*\n!*.py\n!*/\n",
    "lib/.gitignore": "*.c\n!x\n",
}
IGNORE_PATHS = (
    "a.log", "keep.log", "sub/a.log", "top_only.py", "sub/top_only.py", "build/out.py", "build/wanted.py",
    "docs/a/b/draft.md", "docs/draft.md", "sub/local.py", "sub/deeper/local.py", "sub/anchored.py",
    "sub/deeper/anchored.py", "vendor/lib.py", "vendor/lib.c", "vendor/x/y.py", "secret.env", "sub/secret.env",
    "global.tmp", "sub/x/global.tmp", "plain.py", "lib/x/y.c", "lib/x.c", "lib/y.py",
)  # fmt: skip


def git_ignores(top: Path, rel: str, env: dict[str, str]) -> bool:
    done = subprocess.run(["git", "-C", str(top), "check-ignore", "-q", "--", rel], env=env, check=False)
    assert done.returncode in (0, 1), done
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_in_process_ignore_rules_agree_with_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from lsp_server.workspace import GitIgnore

    top = tmp_path / "repo"
    top.mkdir()
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    for rel, text in IGNORE_FILES.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    (top / ".git" / "info").mkdir(exist_ok=True)
    (top / ".git" / "info" / "exclude").write_text("*.env\n")
    config = tmp_path / "config"
    (config / "git").mkdir(parents=True)
    (config / "git" / "ignore").write_text("*.tmp\n")
    (tmp_path / "gitconfig").write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1"}
    for rel in IGNORE_PATHS:
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text("x = 1\n")
    rules = GitIgnore()
    said = {rel: rules.ignored(top / rel) for rel in IGNORE_PATHS}
    assert said == {rel: git_ignores(top, rel, env) for rel in IGNORE_PATHS}
    assert said["build/wanted.py"] and said["sub/a.log"] is False and said["sub/deeper/local.py"] is False
    (top / "sub" / ".gitignore").write_text("")  # an ignore file that changes is read again
    assert rules.ignored(top / "sub" / "local.py") is False


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_linked_work_tree_reads_the_repositorys_info_exclude(tmp_path: Path):
    from lsp_server.workspace import GitIgnore

    main = tmp_path / "main"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    subprocess.run(["git", "-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    subprocess.run(["git", "-C", str(main), "worktree", "add", "-q", str(tmp_path / "linked")], check=True, env=env)
    (main / ".git" / "info").mkdir(exist_ok=True)
    (main / ".git" / "info" / "exclude").write_text("secret.py\n")
    (tmp_path / "linked" / "secret.py").write_text("x = 1\n")
    (tmp_path / "linked" / "open.py").write_text("x = 1\n")
    rules = GitIgnore()
    assert (tmp_path / "linked" / ".git").is_file()
    assert rules.ignored(tmp_path / "linked" / "secret.py") and not rules.ignored(tmp_path / "linked" / "open.py")
    assert git_ignores(tmp_path / "linked", "secret.py", dict(os.environ))
