"""Failures with a clear message: what went wrong and what to do, to the user and to stderr.

Five ways a start can go wrong: a missing model file, a file that is not a GGUF, a truncated
GGUF, a cache directory that cannot be written (the default model is assembled there), and a
context too small for the token budget. The stdio server stays up, says so (`window/showMessage`
and stderr) and answers every request with an empty result; `complete` on the command line exits
non-zero with the same message. Each case is cheap: only the budget case loads a model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.lsp_server.rawlsp import RawServer, end_position

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


CASES = ["missing", "not-gguf", "truncated", "cache-unwritable", "context-too-small"]


@pytest.mark.parametrize("name", CASES)
def test_the_server_reports_and_keeps_answering(name, tmp_path):
    case = make_case(name, tmp_path)
    server = RawServer("--log-level", "info", *case.args, env=case.env)
    try:
        server.initialize({"cpcLsp": case.options}, wait_loaded=False)
        uri = "file:///tmp/failed/doc.txt"
        server.open(uri, case.text)
        inline = server.inline(uri, *end_position(case.text))  # sent before the failure is known
        shown = server.wait_notification(lambda n: n["method"] == "window/showMessage" and n["params"]["type"] == case.kind)
        message = shown["params"]["message"]
        for needle in case.says:
            assert needle.lower() in message.lower(), message
        assert server.response(inline)["result"] == []
        fallback = server.call("textDocument/completion", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 9}})
        assert fallback["result"]["items"] == []
        assert server.call("cpcLsp/stats")["result"] is None  # no engine call has happened
        assert message.split(": ", 1)[1][:60] in server.stderr()  # the same words on stderr
        assert server.alive()
    finally:
        assert server.close() == 0


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
