"""The confidence gate through the real server and the default model (`python -m lsp_server`, stdio).

The claims: at the default `minConfidence` a word start the model is unsure of shows nothing (it
does with the gate off); a confident half-typed word is shown and cut exactly where the calibrated
confidence of the text so far drops below the threshold (recomputed here from the signals the
server reports in cpcLsp/stats); typing along the suggestion stays free (no decode).
"""

from __future__ import annotations

import pytest

from engine import Signals, WordEnd
from engine.model_files import default_model_path
from engine.types import NO_RIVAL
from lsp_server.confidence_gate import CURSOR_CLASSES, confidences, gate_for
from tests.support.lsp_client import Editor

pytestmark = pytest.mark.model

SERVER_SETTINGS = {"maxTokens": 16, "threads": 1, "model": str(default_model_path())}  # Gemma 3 270M
DEFAULT = gate_for("gemma-3-270m").threshold  # its own, what minConfidence null means for it
DRAFT = "Thanks for sending over the draft"


def configure(client, **settings) -> None:
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {**SERVER_SETTINGS, **settings}}})


def signals_of(stats) -> Signals:
    raw = stats["signals"]
    margin = NO_RIVAL if raw["margin"] is None else raw["margin"]
    ends = tuple(WordEnd(c, lp) for c, lp in raw["wordEnds"])
    steps = tuple(WordEnd(c, lp) for c, lp in raw["stepEnds"])  # the gate reads the weakest step too
    return Signals(raw["wordLogProb"], margin, ends, raw["typedLogProb"], step_ends=steps)


def suggest(editor: Editor, uri: str, text: str) -> tuple[str | None, dict]:
    editor.open(uri, text)
    try:
        return editor.suggestion(uri), editor.stats()
    finally:
        editor.close(uri)


def gate_off_then_on(client, name: str, text: str) -> tuple[str | None, str | None, dict]:
    """The suggestion at the end of `text` with the gate off, then at the default (fresh documents,
    so the second is not answered from the first); the stats are the second's."""
    editor = Editor(client)
    configure(client, minConfidence=0)
    off, _ = suggest(editor, f"file:///gate/{name}-off.txt", text)
    configure(client, minConfidence=DEFAULT)
    on, stats = suggest(editor, f"file:///gate/{name}-on.txt", text)
    return off, on, stats


def test_the_default_gate_is_on():
    assert 0 < DEFAULT < 1


def test_an_unsure_word_start_shows_nothing_at_the_default_but_something_with_the_gate_off(model_server):
    off, on, stats = gate_off_then_on(model_server, "start", DRAFT + " ")
    assert off  # the model has a guess...
    assert on is None  # ...but not one the gate trusts
    first = confidences(" " + off, 1, signals_of(stats), CURSOR_CLASSES[1])[0][1]
    assert first < DEFAULT


def test_a_confident_half_typed_word_is_shown_and_cut_where_the_confidence_drops(model_server):
    whole, cut, stats = gate_off_then_on(model_server, "mid", DRAFT + " yest")
    assert cut is not None and cut.startswith("yesterday")
    assert len(cut) < len(whole) and whole.startswith(cut)
    # recompute the cut from the reported signals: the last word end whose confidence (and every
    # earlier one's) is at least the threshold; the next one is below
    text = " yest" + whole[len("yest") :]
    scores = confidences(text, len(" yest"), signals_of(stats), CURSOR_CLASSES[0])
    kept = [chars for chars, c in scores if c >= DEFAULT]
    shown_end = len(" yest") + len(cut) - len("yest")
    assert scores[0][1] >= DEFAULT
    assert shown_end in kept
    after = [c for chars, c in scores if chars > shown_end and chars <= len(text)]
    assert after and after[0] < DEFAULT


def test_typing_along_a_gated_suggestion_decodes_nothing(model_server):
    editor = Editor(model_server)
    configure(model_server, minConfidence=DEFAULT)
    uri = "file:///gate/along.txt"
    editor.open(uri, DRAFT + " yest")
    try:
        first = editor.suggestion(uri)
        assert first and first.startswith("yesterday")
        before = editor.stats()
        editor.type(uri, "e")
        along = editor.suggestion(uri)
        stats = editor.stats()
        assert along is not None and along.startswith("yeste")
        # answered from what was shown: no engine call at all (the stats' decode counts are the
        # last engine call's, so they are not what this keystroke cost)
        assert stats["engineAnswers"] == before["engineAnswers"] and stats["carried"] == before["carried"] + 1
    finally:
        editor.close(uri)
