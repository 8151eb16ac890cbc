"""A short file gets the names of the file beside it, with or without a workspace folder.

Through the real server over stdio on the default code model. The claims: a made-up name that only
the other file defines is spelled in a file of four lines (where a share of the file's own tokens
left no room for any context), with the folder as the workspace and with no folder at all
(`rootUri` null: the document's own folder stands in), the other file open or only imported from
the folder; not without it (the name cannot be guessed); through `modelServer` the same; a
keystroke inside the word still decodes no prompt token; and with no folder, an open document
outside the file's own folder never reaches the prompt.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.lsp_client import Editor, LspClient

pytestmark = pytest.mark.model

CODE_MODEL = "qwen2.5-coder-0.5b"
GEOMETRY = '''"""Small helpers for meshes."""


def load_mesh_points(path):
    with open(path) as handle:
        return [tuple(map(float, line.split()[1:4])) for line in handle if line.startswith("v ")]


def quantize_vertex_lattice(points, step):
    """Snap every point to a lattice of `step`."""
    return [tuple(round(c / step) * step for c in p) for p in points]


def weld_close_points(points, tolerance=1e-6):
    return list({tuple(round(c / tolerance) for c in p): p for p in points}.values())
'''
SHORT = 'import geometry_tools as gt\n\npts = gt.load_mesh_points("bunny.obj")\nsnapped = gt.quantize_ver'
NAME = "quantize_vertex_lattice"
CHOSEN = "context chosen"  # the server's log line when a choice of context is made (lsp_server.context.Background)


def start(root: Path | None, settings: dict) -> LspClient:
    client = LspClient(["--log-level", "info"])
    capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
    folders = (
        {"rootUri": root.as_uri(), "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}]}
        if root
        else {"rootUri": None}
    )
    client.call("initialize", {"processId": None, "capabilities": capabilities, **folders,
                               "initializationOptions": {"cpcLsp": settings}})  # fmt: skip
    client.notify("initialized", {})
    assert client.wait_loaded(timeout=300).startswith("loaded"), client.stderr()
    return client


def settings(**more) -> dict:
    return {
        "model": CODE_MODEL,
        "threads": 1,
        "maxTokens": 8,
        "minConfidence": 0,
        "alternatives": 0,
        "extraContext": True,
        **more,
    }


def typed_halfway(
    tmp_path: Path, workspace: bool, other: str, extra: dict | None = None
) -> tuple[str | None, list[dict], LspClient]:
    """The short file typed to the name's middle, the other file `open`, `closed` (on disk: found
    by the import) or `absent`; then two letters off the suggestion (the engine answers each)."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    if other != "absent":
        (folder / "geometry_tools.py").write_text(GEOMETRY)
    (folder / "snap.py").write_text(SHORT)
    client = start(folder if workspace else None, settings(**(extra or {})))
    editor = Editor(client)
    if other == "open":
        editor.open((folder / "geometry_tools.py").as_uri(), GEOMETRY, "python")
    uri = (folder / "snap.py").as_uri()
    editor.open(uri, SHORT, "python")
    client.wait_stderr(CHOSEN, count=2 if other == "open" else 1)  # chosen on the server's worker
    first = shown = editor.suggestion(uri, timeout=300)
    typed = "quantize_ver"
    keystrokes = []
    for _ in range(2):
        ahead = shown[len(typed) : len(typed) + 1] if shown else ""
        letter = next(c for c in "qzjx" if c != ahead)
        editor.type(uri, letter)
        typed += letter
        before = editor.stats()
        shown = editor.suggestion(uri, timeout=300)
        after = editor.stats()
        keystrokes.append(
            {
                **after,
                "engine": after["engineAnswers"] > before["engineAnswers"],
                "prompt_before": before["promptTokens"],
            }
        )
    return first, keystrokes, client


@pytest.mark.parametrize(("workspace", "other"), [(True, "open"), (False, "open"), (False, "closed")])
def test_a_short_file_spells_the_name_the_file_beside_it_defines(tmp_path: Path, workspace: bool, other: str):
    shown, keystrokes, client = typed_halfway(tmp_path, workspace, other)
    try:
        assert shown is not None and shown.startswith(NAME), shown
        for key in keystrokes:  # inside the word: the prompt, context included, is reused whole
            assert key["engine"] and key["decodedTokens"] == 0, key
            assert key["promptTokens"] == key["prompt_before"], key
    finally:
        assert client.shutdown() == 0


def test_the_name_cannot_be_guessed_without_the_other_file(tmp_path: Path):
    shown, _, client = typed_halfway(tmp_path, True, "absent")
    try:
        assert shown is None or not shown.startswith(NAME), shown
    finally:
        assert client.shutdown() == 0


def test_without_a_folder_an_open_document_outside_the_files_own_folder_stays_out(tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    elsewhere = tmp_path / "elsewhere" / "geometry_tools.py"  # open in the editor, but not under snap.py's folder
    elsewhere.parent.mkdir()
    elsewhere.write_text(GEOMETRY)
    client = start(None, settings())
    try:
        editor = Editor(client)
        editor.open(elsewhere.as_uri(), GEOMETRY, "python")
        uri = (tmp_path / "scripts" / "snap.py").as_uri()
        editor.open(uri, SHORT, "python")
        client.wait_stderr(CHOSEN, count=2)
        shown = editor.suggestion(uri, timeout=300)
        assert shown is None or not shown.startswith(NAME), shown
        assert editor.stats()["contextChoices"] == 0  # nothing was chosen: the only other file is outside
    finally:
        assert client.shutdown() == 0


def test_without_a_folder_the_open_file_goes_to_a_model_server_in_the_same_prompt(tmp_path: Path):
    from tests.support.llama_server import LlamaServer

    server = LlamaServer(slots=1, model=CODE_MODEL, extra_args=("--cache-ram", "0")).start()
    try:
        remote = {"modelServer": server.url, "modelServerTimeoutMs": 60_000}
        shown, keystrokes, client = typed_halfway(tmp_path, False, "open", remote)
        try:
            assert shown is not None and shown.startswith(NAME), shown
            engine_keys = [key for key in keystrokes if key["engine"]]
            assert engine_keys, keystrokes
            # what the slot kept: the prompt up to the partial word's last few tokens (the context,
            # which comes first, always among them; see test_context_model for why not 0)
            assert all(key["promptTokens"] - key["reusedTokens"] <= 12 for key in engine_keys), keystrokes
        finally:
            assert client.shutdown() == 0
    finally:
        server.stop()
