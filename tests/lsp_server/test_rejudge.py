"""A suggestion the gate hid is judged again when typed along, with no engine call (lsp_server.rejudge).

Unit tests of the arithmetic, then the handlers with a fake engine whose completions carry
signals (engine.signals.compute, the engine's own arithmetic): the second keystroke along a hidden
suggestion makes no engine call and shows it once the rest is sure; a keystroke off it asks.
"""

from __future__ import annotations

import math
import threading

import pytest

from engine import Completion, CompletionRequest, DecodeStats
from engine.core.signals import compute
from lsp_server.confidence_gate import gate_for
from lsp_server.rejudge import along
from lsp_server.split import split
from tests.fixtures import DRAFT, Editor, FakeEngine, InProcessServer

LN = math.log
# " yest" → " yesterday done": the covering " yest", then "er" and "day" (unsure: 0.01, 0.05), " done" (sure)
STEPS = [(b" yest", LN(0.9)), (b"er", LN(0.01)), (b"day", LN(0.05)), (b" done", LN(0.99))]
TEXT = " yesterday done"


def sure_after_erd() -> Completion:
    signals = compute(" yest", STEPS, rivals=[(b" yes", LN(0.05))], typed_log_prob=-2.0, ended=True)
    return Completion(TEXT, "eos", DecodeStats(), signals=signals)


def test_typed_along_the_rest_is_conditioned_on_what_is_now_typed():
    completion = sure_after_erd()
    before = DRAFT  # "...the draft yest"
    now = split(before + "er", len(before) + 2)
    again = along(completion, " yest", "er", now)
    assert again.text == " yesterday done" and now.required == " yester"
    first = again.signals.word_ends[0]
    assert first.chars == len(" yesterday")
    # log P(" yesterday" and a word end | " yester") = the steps after "er": 0.05 · 0.99
    assert first.log_prob == pytest.approx(LN(0.05) + LN(0.99))
    assert again.signals.typed_log_prob == pytest.approx(-2.0 + LN(0.9) + LN(0.01))
    assert again.signals.margin == completion.signals.margin  # the same first word


def test_past_a_word_end_the_prompt_grows_and_the_required_prefix_is_what_follows():
    completion = sure_after_erd()
    now = split(DRAFT + "erday ", len(DRAFT) + 6)
    again = along(completion, " yest", "erday ", now)
    assert now.required == " " and again.text == " done"
    assert again.signals.word_ends[0].chars == len(" done")


def test_off_the_suggestion_or_across_a_line_nothing():
    completion = sure_after_erd()
    assert along(completion, " yest", "x", split(DRAFT + "x", len(DRAFT) + 1)) is None
    assert along(completion, " yest", "\n", split(DRAFT + "\n", len(DRAFT) + 1)) is None
    no_signals = Completion(TEXT, "eos", DecodeStats())
    assert along(no_signals, " yest", "er", split(DRAFT + "er", len(DRAFT) + 2)) is None


def test_the_gate_hides_it_first_and_shows_the_rest_once_sure():
    gate = gate_for("gemma-3-270m")
    first = gate.calibration.confidence(
        "inside a word", sure_after_erd().signals.word_ends[0].log_prob, 10.0, True, True, -2.0
    )
    now = split(DRAFT + "erd", len(DRAFT) + 3)
    again = along(sure_after_erd(), " yest", "erd", now).signals
    later = gate.calibration.confidence(
        "inside a word", again.word_ends[0].log_prob, 10.0, True, True, again.typed_log_prob
    )
    assert again.word_ends[0].log_prob == pytest.approx(LN(0.99))
    assert first < 0.5 < later


# --- through the handlers ----------------------------------------------------------------------


class SignalEngine(FakeEngine):
    """FakeEngine, but " yest" gets `TEXT` with the signals above (the gate hides it at 0.5)."""

    def complete(self, request: CompletionRequest, cancel: threading.Event) -> Completion:
        done = super().complete(request, cancel)
        if request.required == " yest" and not cancel.is_set():
            return Completion(TEXT, "eos", done.stats, signals=sure_after_erd().signals)
        return done


@pytest.fixture
def server():
    engine = SignalEngine(words=("yesterday",))
    engine.model_id = "gemma-3-270m"  # says which model it is, as engine.Engine does
    server = InProcessServer(load=lambda config: engine)
    server.engine = engine
    capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
    server.client.initialize(
        {"cpcLsp": {"maxTokens": 16, "minConfidence": 0.5}}, wait_loaded=True, capabilities=capabilities
    )
    yield server
    server.close()


def test_a_keystroke_along_a_hidden_suggestion_makes_no_engine_call_and_shows_it_when_sure(server):
    editor = Editor(server.client)
    uri = "file:///tmp/rejudge/draft.txt"
    editor.open(uri, DRAFT)
    assert editor.suggestion(uri) is None  # hidden: "er" and "day" are unsure
    calls = len(server.engine.calls)
    editor.type(uri, "e")
    assert editor.suggestion(uri) is None  # still hidden ("day" is still to come), and no engine call
    editor.type(uri, "rd")
    assert editor.suggestion(uri) == "yesterday done"  # the rest is sure now
    stats = editor.stats()
    assert len(server.engine.calls) == calls and stats["judgedAgain"] == 2
    editor.type(uri, "a")  # along what is now shown: the shown carry
    assert editor.suggestion(uri) == "yesterday done" and len(server.engine.calls) == calls


def test_a_keystroke_off_a_hidden_suggestion_asks_the_engine(server):
    editor = Editor(server.client)
    uri = "file:///tmp/rejudge/off.txt"
    editor.open(uri, DRAFT)
    assert editor.suggestion(uri) is None
    calls = len(server.engine.calls)
    editor.type(uri, "x")
    editor.suggestion(uri)
    assert len(server.engine.calls) == calls + 1 and editor.stats()["judgedAgain"] == 0


def test_without_a_set_threshold_the_models_own_applies(server):
    server.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"minConfidence": None}}})
    editor = Editor(server.client)
    uri = "file:///tmp/rejudge/default.txt"
    editor.open(uri, DRAFT)
    editor.suggestion(uri)
    gate = editor.stats()["gate"]
    # the engine said it is Gemma: its own fitted threshold applies
    assert gate == {
        "model": "gemma-3-270m",
        "fitted": True,
        "minConfidence": gate_for("gemma-3-270m").threshold,
    }  # a .txt: prose
