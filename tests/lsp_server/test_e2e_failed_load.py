"""Failures with a clear message: what went wrong and what to do, to the user and to stderr.

Five ways a start can go wrong: a missing model file, a file that is not a GGUF, a truncated
GGUF, a cache directory that cannot be written (the default model is assembled there), and a
context too small for the token budget. The stdio server stays up, says so (`window/showMessage`
and stderr) and answers every request with an empty result; `complete` on the command line exits
non-zero with the same message. Each case is cheap: only the budget case loads a model (and is
marked `model`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lsp_server.routing import load_engine
from lsp_server.settings import Settings
from tests.fixtures import Editor, InProcessServer

ERROR, WARNING = 1, 2  # MessageType
LONG_WORD = "Please file it under supercalifragilistic" + "expialidocious" * 5  # 100+ bytes to cover


@dataclass
class Case:
    options: dict = field(default_factory=dict)  # cpcLsp settings
    args: list = field(default_factory=list)  # server command line
    env: dict = field(default_factory=dict)
    says: tuple = ()  # the message names these
    kind: int = ERROR
    text: str = "hello wor"


def make_case(name: str, tmp: Path) -> Case:
    if name == "missing":
        path = str(tmp / "no-such-model.gguf")
        return Case(args=["--model", path], says=(path, "does not exist", "--model"))
    if name == "not-gguf":
        path = tmp / "model.gguf"
        path.write_bytes(b"PK\x03\x04 a zip file, not a model" * 100)
        return Case(options={"model": str(path)}, says=(str(path), "not a GGUF file", "convert"))
    if name == "truncated":
        from engine.model_files import default_model_path

        path = tmp / "truncated.gguf"
        with default_model_path().open("rb") as src:
            path.write_bytes(src.read(3_000_000))
        return Case(options={"model": str(path)}, says=(str(path), "could not load", "Re-download"))
    if name == "cache-unwritable":
        blocker = tmp / "a-regular-file"
        blocker.write_text("")
        return Case(env={"CPC_LSP_CACHE_DIR": str(blocker / "cache")}, says=("not writable", "CPC_LSP_CACHE_DIR"))
    if name == "context-too-small":
        options = {"contextTokens": 256, "maxTokens": 128, "threads": 1}
        return Case(options=options, says=("256 tokens", "contextTokens", "maxTokens"), kind=WARNING, text=LONG_WORD)
    raise ValueError(name)


CASES = ["missing", "not-gguf", "truncated", "cache-unwritable",
         pytest.param("context-too-small", marks=pytest.mark.model)]  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_the_server_reports_and_keeps_answering(name, tmp_path, monkeypatch, caplog):
    """The server in this process with the real loader (`load_engine`): the failures are real."""
    case = make_case(name, tmp_path)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    caplog.set_level(logging.INFO)
    model = case.args[1] if case.args[:1] == ["--model"] else None
    running = InProcessServer(Settings(model=model, threads=1), load=load_engine)
    server = running.client
    try:
        server.initialize({"cpcLsp": case.options})
        uri = "file:///tmp/failed/doc.txt"
        editor = Editor(server)
        editor.open(uri, case.text)
        inline = editor.send_inline(uri)  # sent before the failure is known
        shown = server.wait_notification(
            lambda n: n["method"] == "window/showMessage" and n["params"]["type"] == case.kind
        )
        message = shown["params"]["message"]
        for needle in case.says:
            assert needle.lower() in message.lower(), message
        assert server.response(inline).result == []
        fallback = server.call(
            "textDocument/completion", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 9}}
        )
        assert fallback["items"] == []
        assert server.call("cpcLsp/stats") is None  # no engine call has happened
        assert message.split(": ", 1)[1][:60] in caplog.text  # the same words in the log (stderr)
        assert server.alive()
    finally:
        running.close()


@pytest.mark.parametrize("name", CASES)
def test_complete_on_the_command_line_exits_non_zero(name, tmp_path):
    case = make_case(name, tmp_path)
    args = [*case.args]
    if "model" in case.options:
        args += ["--model", case.options["model"]]
    if "contextTokens" in case.options:
        args += ["--context-tokens", str(case.options["contextTokens"]), "--max-tokens", str(case.options["maxTokens"])]
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server", "complete", "--text", case.text, *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, **case.env},
    )  # fmt: skip
    assert done.returncode != 0 and done.stdout == ""
    for needle in case.says:
        assert needle.lower() in done.stderr.lower(), done.stderr
    assert "Traceback" not in done.stderr
