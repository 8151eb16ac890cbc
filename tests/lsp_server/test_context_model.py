"""Context from other files, through the real server on the real model.

The claims: an identifier only another open file defines is spelled with the context and not
without it, and a keystroke inside a word still decodes no prompt token with the context on (the
choice is kept inside a line, so the prompt's start never moves).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import FAST
from tests.support.lsp_client import Editor, LspClient

pytestmark = pytest.mark.model

HELPERS = '''"""Widgets."""


def frobnicate_widget(count):
    """Frobnicate `count` widgets."""
    return count * 2


def unrelated_helper():
    return None
'''
# The context takes at most half the tokens of the file's text before the cursor (a cold request
# costs at most 1.5x: lsp_server.context.budget_for), so the file opens with a docstring long
# enough for the helper's definition; nothing in it names the helper.
MAIN = (
    '"""Count the widgets of a run.\n\n'
    + "This program reads a count and reports a total for the run.\n" * 20
    + '"""\n'
    "import os\n\n\ndef main(count):\n    total = frob"
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "helpers.py").write_text(HELPERS)
    return tmp_path


def start(root: Path, settings: dict) -> LspClient:
    client = LspClient(["--log-level", "info"])
    capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
    client.call("initialize", {
        "processId": None, "rootUri": root.as_uri(), "capabilities": capabilities,
        "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
        "initializationOptions": {"cpcLsp": settings},
    })  # fmt: skip
    client.notify("initialized", {})
    assert client.wait_loaded().startswith("loaded"), client.stderr()
    return client


CODE_MODEL = "qwen2.5-coder-0.5b"  # the repo-level layout (<|file_sep|>)
CHOSEN = "context chosen"  # the server's log line when a choice of context is made (lsp_server.context.Background)


@pytest.fixture(params=["default", CODE_MODEL])
def model(request: pytest.FixtureRequest) -> dict:
    return {} if request.param == "default" else {"model": CODE_MODEL}


def suggestion_after_typing(root: Path, extra_context: bool, model: dict) -> tuple[str | None, list[dict], LspClient]:
    settings = {**FAST, **model, "maxTokens": 8, "minConfidence": 0, "alternatives": 0, "extraContext": extra_context}
    client = start(root, settings)
    editor = Editor(client)
    editor.open((root / "helpers.py").as_uri(), HELPERS, "python")
    uri = (root / "main.py").as_uri()
    editor.open(uri, MAIN, "python")
    if extra_context:  # chosen on the server's worker once a document opens: before the first request here
        client.wait_stderr(CHOSEN, count=2)
    first = shown = editor.suggestion(uri)
    typed = "frob"
    keystrokes = []
    for _ in range(2):
        # a letter off the suggestion shown, so the engine answers each one (nothing carried)
        ahead = shown[len(typed) : len(typed) + 1] if shown else ""
        letter = next(c for c in "ulzq" if c != ahead)
        editor.type(uri, letter)
        typed += letter
        before = editor.stats()
        shown = editor.suggestion(uri)
        after = editor.stats()
        keystrokes.append(
            {
                **after,
                "engine": after["engineAnswers"] > before["engineAnswers"],
                "prompt_before": before["promptTokens"],
            }
        )
    return first, keystrokes, client


def test_an_identifier_only_an_open_file_defines_is_spelled_with_the_context(workspace: Path, model: dict):
    with_context, keystrokes, client = suggestion_after_typing(workspace, True, model)
    try:
        assert with_context is not None and with_context.startswith("frobnicate_widget"), with_context
        for key in keystrokes:  # inside the word: the prompt (context included) is reused whole
            assert key["engine"] and key["decodedTokens"] == 0, key
            assert key["promptTokens"] == key["prompt_before"], key
        assert keystrokes[0]["contextChoices"] == keystrokes[-1]["contextChoices"]  # not chosen again mid-line
    finally:
        assert client.shutdown() == 0
    without, _, client = suggestion_after_typing(workspace, False, model)
    try:
        assert without is None or not without.startswith("frobnicate_widget"), without
    finally:
        assert client.shutdown() == 0


def test_nothing_outside_the_workspace_folder_reaches_the_prompt(tmp_path: Path):
    """The same identifier, defined in an open document outside the workspace folder: not used."""
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside.py"
    outside.write_text(HELPERS)
    client = start(root, {**FAST, "maxTokens": 8, "minConfidence": 0, "alternatives": 0, "extraContext": True})
    try:
        editor = Editor(client)
        editor.open(outside.as_uri(), HELPERS, "python")
        uri = (root / "main.py").as_uri()
        editor.open(uri, MAIN, "python")
        client.wait_stderr(CHOSEN, count=2)
        shown = editor.suggestion(uri)
        assert shown is None or not shown.startswith("frobnicate_widget"), shown
        assert editor.stats()["contextChoices"] == 0  # nothing was chosen: the only other file is outside
    finally:
        assert client.shutdown() == 0


def test_the_context_goes_to_a_model_server_in_the_same_prompt(workspace: Path, llama_server):
    """Through `modelServer` the engine sends the same token prompt, context first: the identifier
    is spelled, and a keystroke inside the word reuses the prompt there too, context included."""
    remote = {"modelServer": llama_server.url, "modelServerTimeoutMs": 60_000}  # a shared, loaded machine
    shown, keystrokes, client = suggestion_after_typing(workspace, True, remote)
    try:
        assert shown is not None and shown.startswith("frobnicate_widget"), shown
        engine_keys = [key for key in keystrokes if key["engine"]]
        # A remote call's decodedTokens counts everything the server evaluated during it (the
        # covering search's branches share the slot's tail, and each re-evaluates from where it
        # forks), so the bound is on what the slot kept: the prompt up to the partial word's last
        # few tokens, the context (which comes first) always among them.
        assert engine_keys, keystrokes
        assert all(key["promptTokens"] - key["reusedTokens"] <= 12 for key in engine_keys), keystrokes
    finally:
        assert client.shutdown() == 0
