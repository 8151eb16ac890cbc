"""A slow workspace holds back no keystroke: other files' context is chosen off the event loop.

Through the real server's stdio loop (in this process, over pipes; the engine is fake). Reading
the file the document imports is made to block until the test lets it go, as a dead network mount
or a cold disk would: the keystrokes meanwhile are answered (without context, the first after a
bounded wait for it), the next keystroke once the scan ends takes the context it made (the first
choice replaces the provisional none, inside the word too), and the context then stays inside the
word (the prompt's start never moves). A scan that ends within the bound is waited for: a file's
first request carries the context from the first keystroke.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lsp_server import server as server_module
from lsp_server import workspace
from tests.fixtures import InProcessServer
from tests.support.lsp_client import Editor, LspClient

HELPERS = "def frobnicate_widget(x):\n    return x * 2\n"
PREAMBLE = '"""' + "This module is part of the project and does what its name says.\n" * 16 + '"""\n\n'
MAIN = PREAMBLE + "from helpers import frobnicate_widget\n\nvalue = frob"


def initialized(server: InProcessServer, root: Path, prefetch: bool = True) -> LspClient:
    """The server initialized on the workspace `root`, context on, its model loaded."""
    client = server.client
    capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
    options = {"contextTokens": 512, "extraContextTokens": 4096, "extraContext": True, "prefetch": prefetch}
    client.call("initialize", {
        "processId": None, "rootUri": root.as_uri(), "capabilities": capabilities,
        "workspaceFolders": [{"uri": root.as_uri(), "name": "proj"}], "initializationOptions": {"cpcLsp": options},
    })  # fmt: skip
    client.notify("initialized", {})
    client.wait_loaded(timeout=30)
    return client


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
        client = initialized(server, root)
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
        editor.type(main, "q")  # the same word, after the scan: its choice replaces the provisional none
        editor.suggestion(main, timeout=20)
        context = engine.requests[-1].context
        assert context is not None and [f.path for f in context.files] == ["helpers.py"]
        assert "frobnicate_widget" in context.files[0].text
        editor.type(main, "x")  # and then stays inside the word
        editor.suggestion(main, timeout=20)
        assert engine.requests[-1].context == context
    finally:
        release.set()
        server.close()


def test_a_files_first_request_waits_for_its_first_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The request arrives while the scan is held (the prefetch is off, so the request itself
    asks for the choice); the scan is let go only once the request waits for it: the answer
    carries the context. The wait's bound is long here, so the order, not the clock, decides."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "helpers.py").write_text(HELPERS)
    reading, release, waiting = threading.Event(), threading.Event(), threading.Event()
    text_of = workspace.text_of

    def slow_text_of(path: Path) -> str | None:
        if path.name == "helpers.py":
            reading.set()
            release.wait(120)
        return text_of(path)

    monkeypatch.setattr(workspace, "text_of", slow_text_of)
    monkeypatch.setattr(server_module, "FIRST_CONTEXT_WAIT_SECONDS", 60.0)
    server = InProcessServer()
    first_choice = server.server.background.first_choice

    def noted_first_choice(key: str, timeout: float) -> bool:
        waiting.set()
        return first_choice(key, timeout)

    monkeypatch.setattr(server.server.background, "first_choice", noted_first_choice)
    try:
        client = initialized(server, root, prefetch=False)
        editor = Editor(client)
        main = (root / "main.py").as_uri()
        editor.open(main, MAIN, "python")
        msg_id = editor.send_inline(main)
        assert waiting.wait(30), "the request did not wait for the file's first context"
        assert reading.wait(30) and not release.is_set()
        release.set()
        reply = client.response(msg_id, timeout=30)
        assert reply.error is None, reply.message
        context = server.loader.engine.requests[-1].context
        assert context is not None and [f.path for f in context.files] == ["helpers.py"]
        assert len(server.loader.engine.requests) == 1  # the request itself, nothing before it
    finally:
        release.set()
        server.close()
