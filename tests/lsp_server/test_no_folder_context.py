"""Context without a workspace folder (`rootUri` null: one file opened outside a project).

The document's own folder stands in for the workspace folder, with the same rules: the open
documents under it count, its imports are read from under it, nothing through a symlink out, no
binary or oversized file, nothing git ignores; the home folder and the filesystem's root never
stand in. Fast: no model, real files and real git.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lsp_server.context import ContextChooser
from lsp_server.documents import Document
from lsp_server.workspace import MAX_FILE_BYTES, Workspace


def uri(path: Path) -> str:
    return path.as_uri()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    here = tmp_path / "scripts"
    (here / "include").mkdir(parents=True)
    (here / "geometry_tools.py").write_text("def quantize_vertex_lattice(pts, step):\n    return pts\n")
    (here / "main.py").write_text("import geometry_tools as gt\n")
    (here / "turnips.js").write_text("exports.marshalTurnipQueue = function (q) { return q }\n")
    (here / "main.js").write_text("const tq = require('./turnips')\n")
    (here / "vexel.h").write_text("int vexel_refract_bundle(int n);\n")
    (here / "include" / "wobble.h").write_text("int wobble_skein_count(void);\n")
    (here / "main.c").write_text('#include "vexel.h"\n#include <wobble.h>\n#include <stdio.h>\n')
    (tmp_path / "secret.py").write_text("API_TOKEN = 'x'\n")
    return here


def test_open_documents_under_the_documents_own_folder_count(folder: Path, tmp_path: Path):
    ws = Workspace()  # no workspace folder
    me = uri(folder / "main.py")
    assert ws.scope(me) == (folder.resolve(),)
    assert ws.describe(uri(folder / "geometry_tools.py"), me) == ("geometry_tools.py", True)
    assert ws.describe(uri(folder / "include" / "wobble.h"), me) == ("include/wobble.h", True)
    assert ws.describe(uri(tmp_path / "secret.py"), me) == ("secret.py", False)  # beside the folder, not under it
    assert ws.describe(uri(folder / "geometry_tools.py")) == ("geometry_tools.py", False)  # for no document: nothing
    assert ws.describe("untitled:Untitled-1", me) == ("Untitled-1", True)
    assert ws.name_for(me) == "scripts"


def test_imports_are_resolved_from_the_documents_own_folder(folder: Path):
    ws = Workspace()
    for name, text, expected in (
        ("main.py", "import geometry_tools as gt\nfrom .. import secret\nimport secret\n", ["geometry_tools.py"]),
        ("main.js", "const tq = require('./turnips')\nimport x from '../secret.py'\n", ["turnips.js"]),
        (
            "main.c",
            (folder / "main.c").read_text(),
            ["vexel.h", "include/wobble.h"],
        ),  # <wobble.h>: a subfolder, as -Iinclude
    ):
        assert [s.path for s in ws.imports(uri(folder / name), text)] == expected, name


def test_nothing_is_read_through_a_symlink_out_nor_binary_nor_oversized(folder: Path, tmp_path: Path):
    os.symlink(tmp_path / "secret.py", folder / "leak.py")
    (folder / "blob.py").write_bytes(b"x = 1\n\0\0\0")
    (folder / "big.py").write_text("x = 1\n" * (MAX_FILE_BYTES // 6 + 10))
    ws = Workspace()
    text = "import leak\nimport blob\nimport big\nimport geometry_tools\n"
    assert [s.path for s in ws.imports(uri(folder / "main.py"), text)] == ["geometry_tools.py"]
    assert ws.describe(uri(folder / "leak.py"), uri(folder / "main.py")) == (
        "leak.py",
        False,
    )  # open, but it is the secret


def test_the_home_folder_and_the_root_never_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.py").write_text("import helpers\n")
    (home / "helpers.py").write_text("def frobnicate(): pass\n")
    monkeypatch.setenv("HOME", str(home))
    ws = Workspace()
    me = uri(home / "notes.py")
    assert ws.scope(me) == ()
    assert ws.describe(uri(home / "helpers.py"), me) == ("helpers.py", False)
    assert ws.imports(me, "import helpers\n") == []
    assert ws.scope("file:///notes.py") == ()


def test_a_workspace_folder_keeps_its_own_rule(folder: Path, tmp_path: Path):
    (tmp_path / "elsewhere").mkdir()
    ws = Workspace()
    ws.set_roots([uri(tmp_path / "elsewhere")])  # a folder is open: the document's own does not stand in
    me = uri(folder / "main.py")
    assert ws.describe(uri(folder / "geometry_tools.py"), me) == ("geometry_tools.py", False)  # not the folder's
    assert ws.imports(me, "import geometry_tools\n") == []


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_ignored_files_stay_out_without_a_folder_too(folder: Path):
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / ".gitignore").write_text(".env\ngenerated.py\n")
    (folder / ".env").write_text("PASSWORD=hunter2\n")
    (folder / "generated.py").write_text("def generated_thing(): pass\n")
    ws = Workspace()
    me = uri(folder / "main.py")
    assert ws.describe(uri(folder / ".env"), me) == (".env", False)
    assert [s.path for s in ws.imports(me, "import generated\nimport geometry_tools\n")] == ["geometry_tools.py"]


def test_the_chooser_takes_an_open_documents_definitions_without_a_folder(folder: Path, tmp_path: Path):
    chooser = ContextChooser(Workspace())
    other = Document(uri(tmp_path / "secret.py"), "def frobnicate_secret(): pass\n")
    tools = Document(uri(folder / "geometry_tools.py"), "def quantize_vertex_lattice(pts, step):\n    return pts\n")
    text = "import numpy as np\n\npts = np.zeros(3)\nsnapped = quantize_vertex_lattice(pts, 0.1)\n"
    doc = Document(uri(folder / "short.py"), text)
    context = chooser.context_for("me", doc, len(text), [("t", tools), ("s", other), ("me", doc)], 1024)
    assert context is not None and context.path == "short.py" and context.name == "scripts"
    assert [f.path for f in context.files] == ["geometry_tools.py"]  # the one outside the folder stays out
    assert "quantize_vertex_lattice" in context.files[0].text
