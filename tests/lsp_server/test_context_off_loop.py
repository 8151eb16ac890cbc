"""A slow workspace holds back no keystroke: other files' context is chosen off the event loop.

Through the real server's stdio loop (in this process, over pipes; the engine is fake). Reading
the file the document imports is made to block until the test lets it go, as a dead network mount
or a cold disk would: the keystrokes meanwhile are answered (without context), the context in
force does not change inside the word once the scan ends (the prompt's start never moves), and the
next line start takes the context the scan made.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lsp_server import workspace
from tests.fixtures import InProcessServer
from tests.support.lsp_client import Editor

HELPERS = "def frobnicate_widget(x):\n    return x * 2\n"
PREAMBLE = '"""' + "This module is part of the project and does what its name says.\n" * 16 + '"""\n\n'
MAIN = PREAMBLE + "from helpers import frobnicate_widget\n\nvalue = frob"


def test_keystrokes_are_answered_while_the_workspace_scan_is_stuck(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "helpers.py").write_text(HELPERS)
    events: list[str] = []
    reading, release = threading.Event(), threading.Event()
    text_of = workspace.text_of

    def slow_text_of(path: Path) -> str | None:
        if path.name == "helpers.py":
            events.append("scan reads helpers.py")
            reading.set()
            release.wait(120)
            events.append("scan has read helpers.py")
        return text_of(path)

    monkeypatch.setattr(workspace, "text_of", slow_text_of)
    server = InProcessServer()
    try:
        client = server.client
        capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
        client.call("initialize", {
            "processId": None, "rootUri": root.as_uri(), "capabilities": capabilities,
            "workspaceFolders": [{"uri": root.as_uri(), "name": "proj"}],
            "initializationOptions": {"cpcLsp": {"contextTokens": 512, "extraContextTokens": 4096, "extraContext": True}},
        })  # fmt: skip
        client.notify("initialized", {})
        client.wait_loaded(timeout=30)
        editor = Editor(client)
        main = (root / "main.py").as_uri()
        editor.open(main, MAIN, "python")
        assert reading.wait(30), "the scan never read the imported file"
        engine = server.loader.engine
        for letter in "nz":  # keystrokes inside the word while the scan is stuck
            editor.type(main, letter)
            assert editor.suggestion(main, timeout=20) is not None  # before the fix: the loop was stuck, no answer
            events.append("keystroke answered")
        assert engine.requests[-1].context is None and engine.requests[-2].context is None
        release.set()
        assert server.server.context.idle(30)
        assert events == [
            "scan reads helpers.py",
            "keystroke answered",
            "keystroke answered",
            "scan has read helpers.py",
        ]
        editor.type(main, "q")  # the same word, after the scan: the context in force (none) stays
        editor.suggestion(main, timeout=20)
        last, before = engine.requests[-1], engine.requests[-2]
        assert last.context is None and last.prompt == before.prompt
        editor.type(main, "\n")  # the next line start takes the scan's choice (its prefetch does)
        editor.type(main, "result = frob")
        editor.suggestion(main, timeout=20)
        context = engine.requests[-1].context
        assert context is not None and [f.path for f in context.files] == ["helpers.py"]
        assert "frobnicate_widget" in context.files[0].text
    finally:
        release.set()
        server.close()
