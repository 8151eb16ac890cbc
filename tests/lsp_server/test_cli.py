"""The command line: `complete` through the real engine, and clear failures. (Where `--tcp` listens
is in test_security.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PYTHON = [sys.executable, "-m", "lsp_server"]
DRAFT = "Thanks for sending over the draft yest"


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*PYTHON, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.model
def test_complete_prints_the_suggestion_as_json():
    done = run("complete", "--text", DRAFT, "--json", "--max-tokens", "4", "--threads", "1")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["prompt"], out["required"], out["suffix"]) == (DRAFT[:-5], " yest", "")
    assert out["insertText"].startswith("yesterday")
    assert out["added"] == out["insertText"][4:]
    assert out["stats"]["decoded_tokens"] > 0


@pytest.mark.model
def test_complete_plain_output_is_the_accepted_line():
    done = run("complete", "--text", DRAFT, "--suffix", " and", "--max-tokens", "4", "--threads", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Thanks for sending over the draft yesterday")
    assert done.stdout.rstrip("\n").endswith(" and")


def test_a_bad_model_fails_with_a_clear_message():
    done = run("complete", "--text", "hello wor", "--model", "/nonexistent/cpc-model.gguf")
    assert done.returncode != 0
    assert "/nonexistent/cpc-model.gguf" in done.stderr
    assert done.stdout == ""


def test_bad_arguments_exit_non_zero():
    assert run("--tcp", "99999").returncode != 0
    assert run("complete").returncode != 0  # --text is required


@pytest.mark.parametrize(
    ("args", "says"),
    [(("--max-tokens", "0"), "--max-tokens: expected an integer from 1 to 512"),
     (("--context-tokens", "256", "--max-tokens", "200"), "--max-tokens must be at most half of --context-tokens (256)"),
     (("--temperature", "hot"), "--temperature: expected a number in [0, 10]"),
     (("--method", "fast"), '--method: expected one of "exact", "mask", "naive"')],
)  # fmt: skip
def test_settings_options_are_checked_by_the_schema(args, says):
    """The same checks and words as a client's settings (lsp_server.settings), before any model loads."""
    for command in (("complete", "--text", "hello wor"), ()):
        done = run(*command, *args)
        assert done.returncode == 2 and says in done.stderr and done.stdout == ""


# The same text through `complete` and through the server (one open document, no workspace folder):
# prose and code, the cursor inside a word (the gate, the alternatives), at the end of a line that
# opens a block (a multi-line suggestion) and before text on the same line (the text after the cursor).
SAME_CASES = [
    ("plaintext", DRAFT, ""),
    ("python", "def total(values):\n    result = 0\n    for value in val", ""),
    ("python", "import os\n\ndef read_config(path):\n", ""),
    ("python", "def area(width, height):\n    return wid", " * height\n"),
]


def cli_items(text: str, suffix: str, language: str) -> list[str]:
    done = run("complete", "--text", text, "--suffix", suffix, "--language", language, "--json",
               "--max-tokens", "4", "--threads", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return [out["insertText"], *out["alternatives"]] if out["added"] else []


@pytest.mark.model
def test_complete_shows_what_the_server_shows(model_server):
    """`complete` and the editor go through one pipeline (lsp_server.pipeline): the same items,
    in the same order, for the same text (the server with the CLI's `--max-tokens 4 --threads 1`),
    asked as the user asks (Invoked: the alternatives with the answer, not after it)."""
    from tests.support.lsp_client import Editor, insert_texts

    editor = Editor(model_server)
    compared = []
    for n, (language, text, suffix) in enumerate(SAME_CASES):
        uri = f"untitled:cpc-lsp-same-{n}"
        editor.open(uri, text + suffix, language)
        line, column = text.count("\n"), len(text) - (text.rfind("\n") + 1)
        served = insert_texts(editor.inline(uri, (line, column), invoked=True))
        editor.close(uri)
        compared.append((served, cli_items(text, suffix, language)))
    assert all(served == cli for served, cli in compared), compared
    assert sum(bool(served) for served, _ in compared) >= 2, compared  # not a comparison of nothings
