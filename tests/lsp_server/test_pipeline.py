"""The completion pipeline without LSP (lsp_server.pipeline): a snapshot at a cursor gives an answer
now or an engine request; the engine's answer gives the suggestions, remembered for the next
keystrokes. No server, no thread, no model: completions are made here."""

from __future__ import annotations

import math

from engine import Alternative, Completion, DecodeStats
from engine.core.signals import compute
from lsp_server.pipeline import Ask, Now, Pipeline, Selected, ask, snapshot
from lsp_server.settings import Settings
from lsp_server.split import split
from lsp_server.suggestion import request_for

LN = math.log
URI = "file:///tmp/pipeline/draft.txt"
DRAFT = "Thanks for sending over the draft yest"
SHOW_ALL = Settings(min_confidence=0.0, extra_context=False)  # no gate, no other files
# " yest" -> " yesterday done": "er" and "day" unsure, " done" sure (the gate hides it at 0.5)
STEPS = [(b" yest", LN(0.9)), (b"er", LN(0.01)), (b"day", LN(0.05)), (b" done", LN(0.99))]


def opened(text: str, settings: Settings = SHOW_ALL, language: str = "plaintext") -> Pipeline:
    pipeline = Pipeline.fresh(settings)
    pipeline.documents.open(URI, text, 1, language)
    return pipeline


def begin(pipeline: Pipeline, text: str, settings: Settings = SHOW_ALL, cursor: int | None = None, **kw) -> Now | Ask:
    pipeline.documents.change(URI, None, [(None, text)], "utf-16")
    doc = pipeline.documents.get(URI)
    return pipeline.begin(URI, doc, len(text) if cursor is None else cursor, settings, **kw)


def answer(text: str, signals=None, alternatives=(), stop_reason="eos") -> Completion:
    return Completion(text, stop_reason, DecodeStats(), signals=signals, alternatives=alternatives)


def unsure() -> Completion:
    signals = compute(" yest", STEPS, rivals=[(b" yes", LN(0.05))], typed_log_prob=-2.0, ended=True)
    return answer(" yesterday done", signals)


def test_a_fresh_cursor_asks_the_engine_what_the_server_always_asked():
    settings = Settings(extra_context=False)
    pipeline = opened(DRAFT, settings)
    step = begin(pipeline, DRAFT, settings)
    assert isinstance(step, Ask)
    expected = request_for(
        split(DRAFT, len(DRAFT), settings.fim_suffix_lines or None), settings, alternatives=settings.alternatives,
        language="plaintext", document=URI, next_line=True,  # the cursor ends its line
    )  # fmt: skip
    assert step.request == expected and step.request.alternatives == 3 and step.block is None


def test_a_cursor_that_opens_a_block_asks_for_several_lines():
    code = "def f(x):\n    if x:\n"
    step = begin(opened(code, language="python"), code)
    assert isinstance(step, Ask) and step.block is not None
    assert step.request.indent_floor == step.block.floor and not step.request.sampling.single_line


def test_the_document_words_go_with_the_request_when_the_lexicon_is_on():
    settings = Settings(min_confidence=0.0, extra_context=False, lexicon=True)
    text = "yesteryear yesterday yesterday\n" + DRAFT
    step = begin(opened(text, settings), text, settings)
    assert isinstance(step, Ask) and step.request.candidates == ("yesterday", "yesteryear")
    assert begin(opened(text), text).request.candidates == ()  # off by default


def test_the_engine_answer_is_shown_then_carried_with_no_engine_work():
    pipeline = opened(DRAFT)
    step = begin(pipeline, DRAFT)
    found = pipeline.finish(step, answer(" yesterday done"), None)
    assert [f.insert_text for f in found] == ["yesterday done"] and pipeline.engine_answers == 1
    assert found[0].word_start == len(DRAFT) - 4 and found[0].cursor == len(DRAFT)
    now = begin(pipeline, DRAFT + "erday")  # accepted a word's worth: the rest is still the answer
    assert isinstance(now, Now) and now.carried
    assert [s.insert_text for s in now.suggestions] == ["yesterday done"] and pipeline.carried == 1
    assert isinstance(begin(pipeline, DRAFT + "x"), Ask)  # off the suggestion: the engine answers


def test_no_answer_shows_nothing_and_carries_nothing():
    pipeline = opened(DRAFT)
    step = begin(pipeline, DRAFT)
    assert pipeline.finish(step, None, None) == [] and pipeline.engine_answers == 0
    assert isinstance(begin(pipeline, DRAFT + "e"), Ask)


def test_a_suggestion_the_gate_hid_is_judged_again_along_what_is_typed():
    settings = Settings(min_confidence=0.5, extra_context=False)
    pipeline = opened(DRAFT, settings)
    step = begin(pipeline, DRAFT, settings)
    assert pipeline.finish(step, unsure(), "gemma-3-270m") == []  # hidden: "er" and "day" are unsure
    assert pipeline.last_gate is not None and pipeline.last_gate[1] == 0.5
    hidden = begin(pipeline, DRAFT + "e", settings)
    assert isinstance(hidden, Now) and not hidden.carried and hidden.suggestions == []
    shown = begin(pipeline, DRAFT + "erd", settings)
    assert isinstance(shown, Now) and [s.insert_text for s in shown.suggestions] == ["yesterday done"]
    assert pipeline.judged_again == 2 and pipeline.engine_answers == 1


def test_alternatives_are_items_after_the_first_and_not_carried_first():
    pipeline = opened(DRAFT)
    step = begin(pipeline, DRAFT)
    sure = compute(" yest", [(b" yest", 0.0), (b"erday", LN(0.9))], rivals=[], typed_log_prob=0.0, ended=True)
    other = Alternative(" yesteryear", sure)
    found = pipeline.finish(step, answer(" yesterday done", alternatives=(other,)), None)
    assert [f.insert_text for f in found] == ["yesterday done", "yesteryear"]
    again = begin(pipeline, DRAFT + "erd")  # along the first item: carried
    assert isinstance(again, Now) and [s.insert_text for s in again.suggestions] == ["yesterday done"]


def test_a_selected_item_is_read_as_accepted_and_the_items_replace_its_range():
    text = "the draft y"
    pipeline = opened(text)
    selected = Selected(len(text) - 1, len(text), "yesterday")
    step = begin(pipeline, text, selected=selected)
    assert isinstance(step, Ask) and step.snapshot.text == "the draft yesterday"
    found = pipeline.finish(step, answer(" yesterday done"), None)  # the item is the typed word now
    assert [(f.word_start, f.cursor, f.insert_text) for f in found] == [(len(text) - 1, len(text), "yesterday done")]
    assert isinstance(begin(pipeline, text + "e"), Ask)  # nothing is carried from a selected item


def test_the_stateless_steps_need_no_open_document():
    """What a benchmark calls for one case: snapshot and ask, with the stages it leaves out off."""
    settings = Settings(alternatives=0, multi_line="off", extra_context=False)
    from lsp_server.documents import Document

    step = ask(snapshot("", Document("", DRAFT), len(DRAFT), settings), settings)
    parts = split(DRAFT, len(DRAFT), settings.fim_suffix_lines or None)
    assert step.request == request_for(parts, settings, language="", document="")


def test_a_failing_context_costs_the_context_not_the_request():
    settings = Settings(extra_context=True)
    pipeline = opened(DRAFT, settings)

    def broken(*args, **kwargs):
        raise RuntimeError("disk gone")

    pipeline.context.context_for = broken  # type: ignore[method-assign]
    step = begin(pipeline, DRAFT, settings)
    assert isinstance(step, Ask) and step.request.context is None
