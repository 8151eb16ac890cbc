"""The real model through the real server: multi-line suggestions that end where the block does,
the rest of a suggestion after an accept with no decode, and the completion menu's selected item.

The rules themselves are unit-tested in test_block.py and test_carry.py; these are the claims only
the real model can make (it really writes a block, and an accept really costs nothing).
"""

from __future__ import annotations

from lsp_server import block as blocks
from tests.fixtures import DRAFT, Editor
from tests.lsp_server.test_block import balance

# the confidence gate off: these claims are about the shape of a suggestion (its own are in test_gate_server.py)
SERVER_SETTINGS = {"maxTokens": 16, "threads": 1, "multiLineTokens": 48, "minConfidence": 0}

BEFORE = 'import os\n\n\ndef read_lines(path):\n    """Return the lines of the file at path."""\n'
FUNCTION = "import os\n\n\ndef read_lines(path):\n    "
AFTER = "\n\ndef main():\n    print(read_lines('x'))\n"


def open_at(editor: Editor, uri: str, before: str, after: str = "") -> dict:
    """Open `before + after` and return the inline request's params with the cursor between them."""
    editor.open(uri, before + after)
    line = before.count("\n")
    column = len(before.rsplit("\n", 1)[-1])
    return editor.inline_params(uri, (line, column))


def ask(editor: Editor, params: dict) -> list[dict]:
    reply = editor.client.request("textDocument/inlineCompletion", params)
    assert reply.error is None, reply.message
    return reply.result


def test_under_a_line_that_opens_a_block_the_block_is_suggested_and_ends_with_it(model_server):
    editor = Editor(model_server)
    items = ask(editor, open_at(editor, "file:///shape/block.py", FUNCTION, AFTER))
    assert items, "no suggestion"
    text = items[0]["insertText"]
    lines = text.split("\n")
    assert len(lines) >= 2, text  # more than the cursor's line
    assert all(blocks.indent_of(line) >= 4 for line in lines[1:] if line.strip()), text  # inside the block
    assert "def main" not in text and "print(read_lines" not in text  # nothing after it retyped
    assert balance(text) == ([], 0), text
    assert editor.stats()["stopReason"] in ("block", "eos"), editor.stats()  # the engine stopped there


def test_elsewhere_a_suggestion_stays_on_one_line(model_server):
    editor = Editor(model_server)
    items = ask(editor, open_at(editor, "file:///shape/line.py", BEFORE + "    lines = "))
    assert items and "\n" not in items[0]["insertText"]


def test_a_bracket_the_text_after_closes_is_not_closed_again(model_server):
    editor = Editor(model_server)
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"multiLine": "always"}}})
    try:
        before = BEFORE + "    with open(path) as f:\n        return f.read("
        uri = "file:///shape/bracket.py"
        items = ask(editor, open_at(editor, uri, before, ")\n"))
        block = blocks.context(before + ")\n", len(before))
        for item in items:
            own, below = balance(item["insertText"], block.quote)
            assert own == [] and below <= len(block.open_before) - block.closed_after == 0, item
    finally:
        editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"multiLine": None}}})


def test_after_accept_next_word_the_rest_costs_no_decode(model_server):
    editor = Editor(model_server)
    uri = "file:///shape/accept.txt"
    editor.open(uri, DRAFT)
    first = editor.suggestion(uri)
    assert first and first.startswith("yesterday") and " " in first.strip(), first
    before = editor.stats()
    editor.type(uri, "erday")  # accept-next-word: one didChange with the rest of the word
    rest = editor.suggestion(uri)
    after = editor.stats()
    assert rest == first  # the same suggestion, now with all of its first word typed
    assert after["carried"] == before["carried"] + 1
    assert after["engineAnswers"] == before["engineAnswers"]  # the engine was not asked: no decode
    assert after["ms"] == before["ms"] and after["requests"] == before["requests"] + 1
    following = first[len("yesterday")]  # the next keystroke, typed along: ready at once too
    assert following.strip() and not following.isalnum(), first  # "." or ",": no partial word after it
    editor.type(uri, following)
    assert editor.suggestion(uri) == first[len("yesterday") + 1 :]
    assert editor.stats()["engineAnswers"] == before["engineAnswers"]


def test_after_accept_line_the_rest_of_the_block_costs_no_decode(model_server):
    editor = Editor(model_server)
    uri = "file:///shape/accept-line.py"
    items = ask(editor, open_at(editor, uri, FUNCTION, AFTER))
    text = items[0]["insertText"]
    head, tail = text.split("\n", 1)
    before = editor.stats()
    # accept-line: the first line goes in; the cursor is at its end
    editor.change(uri, head, (4, 4), (4, 4))
    (item,) = ask(editor, editor.inline_params(uri, (4, 4 + len(head))))
    word = head[len(head.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")) :]
    assert item["insertText"] == word + "\n" + tail
    assert editor.stats()["engineAnswers"] == before["engineAnswers"]


def test_the_selected_completion_item_begins_the_suggestion(model_server):
    editor = Editor(model_server)
    uri = "file:///shape/selected.txt"
    editor.open(uri, DRAFT)
    end = editor.end(uri)
    start = {"line": 0, "character": end["character"] - len("yest")}
    for chosen in ("yesterday", "yesteryear"):
        params = editor.inline_params(uri)
        params["context"]["selectedCompletionInfo"] = {"range": {"start": start, "end": end}, "text": chosen}
        items = ask(editor, params)
        assert items, chosen
        assert items[0]["insertText"].startswith(chosen) and len(items[0]["insertText"]) > len(chosen)
        assert items[0]["range"] == {"start": start, "end": end}
        assert editor.stats()["requiredSatisfied"]
