"""Multi-line block mode on the code model (Qwen2.5-Coder 0.5B): no block is left open.

The claim: at the end of a line that opens a block, the suggestion is the block's body, and a
suggestion of several lines never ends with a line that opens another block with nothing in it
(`if (!res.ok) {`, `with open(path) as f:`), whether the token budget or the gate ends it there:
it includes that block to its end, or stops before it. Budgets from 8 to 24 tokens make the model
stop at every kind of place (measured: at 12 tokens the Python case stops right after
`with open(path, 'r') as file:`).
"""

from __future__ import annotations

import os
import re

import pytest

from lsp_server.block import opens_block
from tests.support.lsp_client import Editor

pytestmark = pytest.mark.model

# the catalogue name, as a user sets it; CPC_LSP_TEST_CODE_MODEL: a path to the same file instead
CODE_MODEL = os.environ.get("CPC_LSP_TEST_CODE_MODEL") or "qwen2.5-coder-0.5b"
SERVER_SETTINGS = {"threads": 1, "model": CODE_MODEL, "multiLine": "block", "minConfidence": 0}
CASES = {
    "fetch.js": ("async function getJson(url) {\n  const res = await fetch(url);\n  if (!res.ok) {", "\n  }\n}\n"),
    "start.js": ("async function getJson(url) {", "\n"),
    "check.js": ("function check(res) {", "\n}\n"),
    "load.py": ("def load(path):", "\n"),
}


def configure(client, **settings) -> None:
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {**SERVER_SETTINGS, **settings}}})


def suggest(editor: Editor, name: str, before: str, after: str, tag: str) -> str | None:
    uri = f"file:///block/{tag}-{name}"
    editor.open(uri, before + after)
    try:
        lines = before.split("\n")
        return editor.suggestion(uri, (len(lines) - 1, len(lines[-1])))
    finally:
        editor.close(uri)


def test_the_body_of_if_not_res_ok_is_suggested_and_closed(model_server):
    editor = Editor(model_server)
    configure(model_server)
    before, after = CASES["fetch.js"]
    body = suggest(editor, "fetch.js", before, after, "body")
    assert body is not None and body.startswith("\n    ")  # the block's body, one deeper
    assert not opens_block(body.rstrip().split("\n")[-1])


@pytest.mark.parametrize("tokens", [8, 12, 16, 24])
def test_no_multi_line_suggestion_ends_on_a_line_that_opens_a_block(model_server, tokens):
    editor = Editor(model_server)
    for gate in (0, None):  # the gate off, and at the model's own threshold
        configure(model_server, multiLineTokens=tokens, minConfidence=gate)
        for name, (before, after) in CASES.items():
            shown = suggest(editor, name, before, after, f"{tokens}-{gate}")
            lines = (shown or "").rstrip().split("\n")
            assert len(lines) == 1 or not opens_block(lines[-1]), (name, tokens, gate, shown)


def test_typing_along_a_long_multi_line_suggestion_costs_no_model_work(model_server):
    """A multi-line suggestion cut by its budget (48 tokens) is asked again at each letter typed
    along it (it may reach further): that must be read from what the engine remembers. Before, the
    rows of a 48-token walk did not fit the row memory, and each letter generated it all again
    (1 prompt token and 1.5 s per keystroke on this model)."""
    editor = Editor(model_server)
    configure(model_server, multiLineTokens=48)
    uri = "file:///block/along.js"
    editor.open(uri, "async function fetchAllPages(url, token) {\n", "javascript")
    try:
        shown = editor.suggestion(uri)
        assert shown and shown.count("\n") >= 2 and editor.stats()["stopReason"] == "length", shown
        indent = shown[: len(shown) - len(shown.lstrip())]
        editor.type(uri, indent + shown.lstrip()[0])  # an accept of several characters: carried
        typed_word = shown.lstrip()[0]
        rest = editor.suggestion(uri)[len(typed_word) :]  # the text reaches back to the word's start
        letters = re.match(r"\w*", rest).group(0)
        assert letters, rest
        for letter in letters[:3]:  # letter by letter along the word
            answers = editor.stats()["engineAnswers"]
            editor.type(uri, letter)
            typed_word += letter
            again, rest = editor.suggestion(uri), rest[1:]
            stats = editor.stats()
            assert stats["engineAnswers"] == answers + 1, stats  # cut by the budget: asked again
            assert again is not None and again.startswith(typed_word + rest.split("\n")[0]), (typed_word, rest, again)
            # The covering may need one row: the one an alternative had decoded, before the
            # alternatives were made after the answer (a letter typed at once stops them).
            assert stats["decodedTokens"] == 0 and stats["coverDecodes"] <= 1, stats
            rest = again[len(typed_word) :]
    finally:
        editor.close(uri)


LINE_ENDS = {
    "area.js": ("function area(w, h) {\n  const a = w * h;", "\n}\n", "javascript"),
    "area.py": ("def area(w, h):\n    a = w * h", "\n", "python"),
}


@pytest.mark.parametrize("name", sorted(LINE_ENDS))
def test_at_a_line_end_the_model_ends_the_next_line_is_suggested_and_typing_it_is_free(model_server, name):
    """At the end of a finished statement the model's first token is a line break: before, that
    showed nothing (one line, empty); now it is the next line, as llama.vim and Copilot show it.
    Typing its line break and indentation is carried (no engine call)."""
    editor = Editor(model_server)
    configure(model_server)
    before, after, language = LINE_ENDS[name]
    uri = f"file:///block/next-line-{name}"
    editor.open(uri, before + after, language)
    try:
        lines = before.split("\n")
        shown = editor.suggestion(uri, (len(lines) - 1, len(lines[-1])))
        word = re.search(r"\w*$", before).group(0)  # the typed word the suggestion begins with
        assert shown is not None and shown.startswith(word + "\n"), shown
        below = shown.split("\n")[1:]
        assert len(below) == 1 and "return" in below[0], shown  # one line: the function's return
        assert editor.stats()["stopReason"] == "line", editor.stats()
        answers = editor.stats()["engineAnswers"]
        indent = below[0][: len(below[0]) - len(below[0].lstrip())]
        editor.change(uri, "\n" + indent, (len(lines) - 1, len(lines[-1])))
        rest = editor.suggestion(uri, (len(lines), len(indent)))
        assert rest == below[0].lstrip() and editor.stats()["engineAnswers"] == answers, (rest, editor.stats())
    finally:
        editor.close(uri)
