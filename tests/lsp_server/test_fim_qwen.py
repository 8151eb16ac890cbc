"""FIM on a real code model (Qwen2.5-Coder 0.5B, installed by name) through the real server:
the text after the cursor reaches the prompt, and typing inside a word still reuses the whole
prompt's KV (a warm keystroke decodes no prompt token)."""

from __future__ import annotations

from typing import Any

from tests.support.lsp_client import Editor, LspClient, insert_text

MODEL = "qwen2.5-coder-0.5b"
# extraContext off: the other document this test opens would join the plain prompt as context
SERVER_SETTINGS = {
    "model": MODEL,
    "threads": 1,
    "maxTokens": 12,
    "minConfidence": 0,
    "multiLine": "off",
    "extraContext": False,
}
SERVER_LOG_LEVEL = "warning"

# Only the text after the cursor defines this name; the lexicon (off by default) is not asked.
BEFORE = "import math\n\n\ndef report(items):\n    widgets = [i for i in items if i]\n    return frob"
AFTER = (
    '\n\n\ndef frobnicate_quux_widgets(widgets):\n    """Sum the widgets\' weights."""\n'
    "    return sum(w.weight for w in widgets)\n"
)


def _configure(client: LspClient, settings: dict[str, Any]) -> None:
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": settings}})
    client.call("cpcLsp/stats", None)  # a round trip: applied before the next request


def _ask(editor: Editor, uri: str, column: int) -> tuple[str | None, dict[str, Any]]:
    line = BEFORE.count("\n")
    reply = editor.inline(uri, (line, column), timeout=300)
    assert reply.error is None, reply.message
    return insert_text(reply), editor.stats() or {}


def test_the_text_after_the_cursor_reaches_the_prompt(model_server):
    editor = Editor(model_server, encoding="utf-16")
    column = len(BEFORE) - BEFORE.rfind("\n") - 1
    _configure(model_server, {"fimSuffixLines": 8})
    editor.open("file:///tmp/fim-qwen-a.py", BEFORE + AFTER, "python")
    with_suffix, fim_stats = _ask(editor, "file:///tmp/fim-qwen-a.py", column)
    _configure(model_server, {"fimSuffixLines": 0})
    editor.open("file:///tmp/fim-qwen-b.py", BEFORE + AFTER, "python")
    without, plain_stats = _ask(editor, "file:///tmp/fim-qwen-b.py", column)
    _configure(model_server, {"fimSuffixLines": 8})
    assert fim_stats["promptTokens"] > plain_stats["promptTokens"] + 20  # the suffix's tokens and the FIM ones
    assert with_suffix is not None and with_suffix.startswith("frobnicate_quux_widgets"), with_suffix
    assert without is None or not without.startswith("frobnicate_quux_widgets"), without  # only the suffix says it


def test_a_warm_keystroke_inside_a_word_decodes_no_prompt_token_with_fim_on(model_server):
    editor = Editor(model_server, encoding="utf-16")
    uri = "file:///tmp/fim-qwen-keys.py"
    line, column = BEFORE.count("\n"), len(BEFORE) - BEFORE.rfind("\n") - 1
    editor.open(uri, BEFORE + AFTER, "python")
    start = (editor.stats() or {}).get("engineAnswers", 0)
    _, cold = _ask(editor, uri, column)
    typed = 0
    for letter in "nizq":  # letters off the suggestion as well as along it: the engine answers each off one
        before = editor.stats() or {}
        editor.change(uri, letter, (line, column + typed))
        typed += 1
        shown, stats = _ask(editor, uri, column + typed)
        if stats["engineAnswers"] > before["engineAnswers"]:  # not answered from what was shown
            assert stats["decodedTokens"] == 0, stats
            assert stats["promptTokens"] == cold["promptTokens"]  # the same FIM prompt, suffix included
            assert stats["requiredSatisfied"]
    assert (editor.stats() or {})["engineAnswers"] >= start + 2  # "q" is off any suggestion of "frobnizq"
