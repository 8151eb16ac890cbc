"""A suggestion the gate cut is judged again as it is typed along: the real server and model.

The claim: with the gate at the model's own threshold, typing the gate-off suggestion letter by
letter asks the engine nothing until the user leaves it; every answer on the way is a piece of
what the engine computed first; and words the gate hid at first are shown once what is typed makes
them sure. A keystroke off the suggestion asks the engine again.
"""

from __future__ import annotations

import time

import pytest

from engine.model_files import default_model_path
from lsp_server.split import split
from tests.support.lsp_client import Editor

pytestmark = pytest.mark.model

# Gemma 3 270M; no alternatives: the items along the way are the suggestion's pieces only
SERVER_SETTINGS = {"maxTokens": 16, "threads": 1, "alternatives": 0, "model": str(default_model_path())}
TEXT = "Thanks for sending over the draft yest"


def configure(client, **settings) -> None:
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {**SERVER_SETTINGS, **settings}}})


def wait_for_the_rest(editor: Editor, made: int) -> dict:
    """The stats once the answer's left-out part (the text past the gate's cut, generation having
    stopped there) was made after it (the next keystroke would stop that); `made`: the count before."""
    deadline = time.monotonic() + 60
    while (stats := editor.stats())["madeLater"] == made and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats["madeLater"] == made + 1, stats
    return stats


@pytest.mark.parametrize("pause", [True, False], ids=["pausing", "typing at once"])
def test_typing_along_a_cut_suggestion_asks_the_engine_nothing_and_shows_what_becomes_sure(model_server, pause):
    """Generation stopped where the gate hid the rest ("hidden"); the rest is made after the
    answer, and a keystroke typing along what was hidden waits for it rather than asking anew."""
    editor = Editor(model_server)
    configure(model_server, minConfidence=0)
    editor.open("file:///rejudge/off.txt", TEXT)
    whole = editor.suggestion("file:///rejudge/off.txt")
    editor.close("file:///rejudge/off.txt")
    configure(model_server, minConfidence=None)  # the model's own threshold
    uri = "file:///rejudge/on.txt"
    editor.open(uri, TEXT)
    made = editor.stats()["madeLater"]
    first = editor.suggestion(uri)
    stats = editor.stats()
    assert stats["stopReason"] == "hidden" and stats["generatedTokens"] < 16, stats  # it stopped at the cut
    if pause:  # the text past the cut is made after the answer
        stats = wait_for_the_rest(editor, made)
    assert stats["gate"]["model"] == "gemma-3-270m" and stats["gate"]["fitted"]
    assert first and whole.startswith(first) and len(first) < len(whole)  # the gate cut it
    engine_answers, judged = stats["engineAnswers"], stats["judgedAgain"]

    typed, shown_later = "yest", []
    for ch in whole[len(typed) : -1]:  # all but its last character (when all is typed, the engine goes on)
        editor.type(uri, ch)
        typed += ch
        found = editor.suggestion(uri)
        if found is not None:
            document = TEXT[: -len("yest")] + typed
            word = split(document, len(document)).word  # the item replaces the partial word
            added = found[len(word) :]
            assert found.startswith(word) and whole[len(typed) :].startswith(added)  # a piece of the first answer
            if len(typed) > len(first):
                shown_later.append(added)
    stats = editor.stats()
    assert stats["madeLater"] == made + 1  # typing at once, the first keystroke waited for it
    assert stats["engineAnswers"] == engine_answers  # the whole way along, no engine call
    assert stats["judgedAgain"] > judged
    assert any(a.strip() for a in shown_later)  # words hidden at first were shown once sure

    editor.type(uri, "#")  # off the suggestion: the engine answers
    editor.suggestion(uri)
    assert editor.stats()["engineAnswers"] == engine_answers + 1
