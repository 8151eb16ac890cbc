"""After part of a suggestion is accepted, the rest is answered from what was shown (lsp_server.carry).

Unit tests of the rule, then the handlers with a fake engine: no engine call, the same rest, and
the completion menu's selected item (LSP 3.18 `selectedCompletionInfo`) read as the typed text.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from engine import Completion, DecodeStats, Signals, WordEnd
from lsp_server.carry import Carry, Computed
from tests.fixtures import DRAFT, WORDS, Editor, FakeEngine, FakeLoader, InProcessServer

URI = "file:///tmp/carry/a.txt"
TEXT = "Thanks for the draft yest and more"
CURSOR = len("Thanks for the draft yest")


def shown(*added: str) -> Carry:
    carry = Carry()
    carry.remember(URI, TEXT, CURSOR, added)
    return carry


def inserted(chars: str, text: str = TEXT, at: int = CURSOR) -> tuple[str, int]:
    return text[:at] + chars + text[at:], at + len(chars)


def test_an_accepted_word_leaves_the_rest():
    carry = shown("erday. I'm")
    assert carry.rest(URI, *inserted("erday")) == (". I'm",)
    assert carry.rest(URI, *inserted("e")) == ("rday. I'm",)  # a letter typed along it
    assert carry.rest(URI, TEXT, CURSOR) == ("erday. I'm",)  # asked again: the same


def test_the_rest_keeps_every_item_that_still_fits_in_order():
    carry = shown("erday. I'm", "erdays", "ing it")
    assert carry.rest(URI, *inserted("erday")) == (". I'm", "s")


def test_only_the_first_item_is_carried_as_shown():
    """The first item is the one the gate judged; the others are alternatives the user cycles to.
    Typed along an alternative alone, it is not put first unjudged (the server judges it again)."""
    carry = shown("erday. I'm", "eryear")
    assert carry.rest(URI, *inserted("ery")) is None
    assert carry.rest(URI, *inserted("erday")) == (". I'm",)


def test_anything_else_misses():
    carry = shown("erday. I'm")
    assert carry.rest(URI, *inserted("x")) is None  # not the suggestion
    assert carry.rest(URI, *inserted("erday. I'm")) is None  # all of it taken: nothing left
    text, cursor = inserted("erday")
    assert carry.rest(URI, text, cursor - 1) is None  # the cursor is not after the inserted text
    assert carry.rest(URI, text + "!", cursor) is None  # the text after the cursor changed
    assert carry.rest(URI, "X" + text[1:], cursor) is None  # so did the text before it
    assert carry.rest("file:///other.txt", text, cursor) is None
    carry.forget(URI)
    assert carry.rest(URI, text, cursor) is None


# --- through the handlers ----------------------------------------------------------------------------


@pytest.fixture
def server() -> InProcessServer:
    server = InProcessServer(load=FakeLoader(words=WORDS))
    capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
    server.client.initialize({"cpcLsp": {"maxTokens": 16}}, wait_loaded=True, capabilities=capabilities)
    yield server
    server.close()


@pytest.fixture
def editor(server) -> Editor:
    return Editor(server.client)


def test_after_accept_next_word_the_rest_comes_with_no_engine_call(server, editor):
    uri = "file:///tmp/carry/draft.txt"
    editor.open(uri, DRAFT)
    assert editor.suggestion(uri) == "yesterday done"
    calls = len(server.loader.engine.calls)
    before = editor.stats()
    editor.type(uri, "erday")  # what accept-next-word inserts: one didChange with the word
    items = editor.inline(uri).result
    assert [item["insertText"] for item in items] == ["yesterday done"]
    start = len("Thanks for sending over the draft ")
    assert items[0]["range"]["start"]["character"] == start and items[0]["range"]["end"] == editor.end(uri)
    after = editor.stats()
    assert after["carried"] == before["carried"] + 1 and after["engineAnswers"] == before["engineAnswers"]
    assert len(server.loader.engine.calls) == calls  # the engine was not asked
    editor.type(uri, " d")  # along it again, a letter at a time
    assert editor.suggestion(uri) == "done"
    assert editor.stats()["engineAnswers"] == before["engineAnswers"]
    editor.type(uri, "x")  # off it: the engine answers
    editor.inline(uri)
    assert editor.stats()["engineAnswers"] == before["engineAnswers"] + 1


def test_new_settings_forget_what_was_shown(editor):
    uri = "file:///tmp/carry/settings.txt"
    editor.open(uri, DRAFT)
    assert editor.suggestion(uri) == "yesterday done"
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"maxTokens": 1}}})
    editor.type(uri, "e")
    assert editor.suggestion(uri) == "yesterday"  # made anew with one token, not the old rest


def test_the_selected_completion_item_is_the_required_prefix(editor):
    uri = "file:///tmp/carry/selected.txt"
    editor.open(uri, DRAFT)
    end = editor.end(uri)
    start = {"line": 0, "character": end["character"] - len("yest")}
    params = editor.inline_params(uri)
    params["context"]["selectedCompletionInfo"] = {"range": {"start": start, "end": end}, "text": "yesterday"}
    reply = editor.client.request("textDocument/inlineCompletion", params)
    (item,) = reply.result
    assert item["insertText"] == "yesterday done" and item["range"] == {"start": start, "end": end}
    # The item's text, not the typed one, went to the engine as the required prefix.
    params["context"]["selectedCompletionInfo"]["text"] = "yesteryear"
    (item,) = editor.client.request("textDocument/inlineCompletion", params).result
    assert item["insertText"] == "yesteryear done", item


def test_a_selected_item_with_punctuation_is_kept_whole(editor):
    uri = "file:///tmp/carry/call.py"
    editor.open(uri, "x = pri")
    end = editor.end(uri)
    start = {"line": 0, "character": 4}
    params = editor.inline_params(uri)
    params["context"]["selectedCompletionInfo"] = {"range": {"start": start, "end": end}, "text": "print("}
    (item,) = editor.client.request("textDocument/inlineCompletion", params).result
    assert item["insertText"].startswith("print(") and item["range"] == {"start": start, "end": end}


# --- alternatives: further items, most probable first ------------------------------------------------


def test_the_alternatives_are_further_items_most_probable_first(server, editor):
    uri = "file:///tmp/carry/alternatives.py"
    editor.open(uri, "total = add(a, b)\nre")
    items = editor.inline(uri, invoked=True).result  # asked for: with its alternatives
    assert [item["insertText"] for item in items] == ["return done", "review"]
    assert items[0]["range"] == items[1]["range"]  # both replace the partial word
    assert server.loader.engine.requests[0].alternatives == 3  # the `alternatives` setting
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"alternatives": 0}}})
    editor.type(uri, "v")  # not along the first item: the engine is asked again
    assert [item["insertText"] for item in editor.inline(uri).result] == ["review done"]


def test_alternatives_that_cost_decodes_come_after_the_answer_unless_asked_for(server, editor):
    """Answer first: a keystroke's answer does not wait for alternatives that cost decodes of
    their own; the same request is made again after it, while the user is idle, and its
    alternatives are there for cycling (an Invoked request at the same place) with no engine call.
    A request the user invoked gets them at once."""
    engine = server.loader.engine
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"prefetch": False}}})
    uri = "file:///tmp/carry/later.py"
    editor.open(uri, "total = add(a, b)\nre")
    assert [item["insertText"] for item in editor.inline(uri).result] == ["return done"]
    assert engine.requests[0].alternatives_later  # (the later job may have begun already)
    deadline = time.monotonic() + 10
    while editor.stats()["madeLater"] == 0 and time.monotonic() < deadline:  # the user pauses
        time.sleep(0.01)
    items = [item["insertText"] for item in editor.inline(uri, invoked=True).result]
    assert items == ["return done", "review"]  # from what was shown, with what was made after it
    assert len(engine.requests) == 2 and not engine.requests[1].alternatives_later  # the later job alone
    uri = "file:///tmp/carry/invoked.py"
    editor.open(uri, "total = add(a, b)\nre")
    assert [item["insertText"] for item in editor.inline(uri, invoked=True).result] == ["return done", "review"]
    assert not engine.requests[-1].alternatives_later and len(engine.requests) == 3


def test_asking_for_the_next_item_before_the_alternatives_are_made_asks_the_engine_for_them(server, editor):
    engine = server.loader.engine
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"prefetch": False}}})
    engine.step_s = 0.3  # each engine call takes this long: the later job is still running
    uri = "file:///tmp/carry/next-item.py"
    editor.open(uri, "total = add(a, b)\nre")
    assert [item["insertText"] for item in editor.inline(uri).result] == ["return done"]
    assert [item["insertText"] for item in editor.inline(uri, invoked=True).result] == ["return done", "review"]
    assert not engine.requests[-1].alternatives_later


def test_the_rest_after_accepting_part_of_an_alternative_is_carried(server, editor):
    uri = "file:///tmp/carry/alternative-accept.py"
    editor.open(uri, "total = add(a, b)\nre")
    assert [item["insertText"] for item in editor.inline(uri, invoked=True).result] == ["return done", "review"]
    calls = len(server.loader.engine.calls)
    editor.type(uri, "vi")  # the user cycled to "review" and typed along it
    assert [item["insertText"] for item in editor.inline(uri).result] == ["review"]
    assert len(server.loader.engine.calls) == calls


def test_an_unlikely_alternative_typed_along_is_judged_by_the_gate(server, editor):
    """Typed along an alternative, it would be the first item: it goes through the gate first,
    judged from its own signals (no engine call), and an unlikely one is not shown."""
    engine = server.loader.engine
    made = engine.complete

    def unsure_alternatives(request, cancel):
        completion = made(request, cancel)
        unsure = tuple(
            replace(a, signals=Signals(-9.0, 0.0, (WordEnd(len(a.text), -9.0),), -9.0)) for a in completion.alternatives
        )
        return replace(completion, alternatives=unsure)

    engine.complete = unsure_alternatives
    editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": {"minConfidence": 0.5}}})
    uri = "file:///tmp/carry/alternative-unsure.py"
    editor.open(uri, "total = add(a, b)\nre")
    assert [item["insertText"] for item in editor.inline(uri, invoked=True).result] == ["return done", "review"]
    calls = len(engine.calls)
    editor.type(uri, "vi")
    assert not editor.inline(uri).result  # hidden by the gate, as the engine's own answer would be
    assert len(engine.calls) == calls
    assert editor.stats()["judgedAgain"] >= 1


def test_the_completion_fallback_lists_every_suggestion_in_order():
    """Neovim 0.11 (no inline completion): the menu has the suggestion and its alternatives."""
    server = InProcessServer(load=FakeLoader(words=WORDS))
    try:
        capabilities = {"general": {"positionEncodings": ["utf-8"]}, "textDocument": {"completion": {}}}
        server.client.initialize({"cpcLsp": {}}, wait_loaded=True, capabilities=capabilities)
        editor = Editor(server.client, "utf-8")
        uri = "file:///tmp/carry/menu.py"
        editor.open(uri, "total = add(a, b)\nre")
        result = editor.client.call(
            "textDocument/completion", {"textDocument": {"uri": uri}, "position": editor.end(uri)}
        )
        items = sorted(result["items"], key=lambda item: item["sortText"])
        assert [item["textEdit"]["newText"] for item in items] == ["return done", "review"]
    finally:
        server.close()


def test_on_a_fim_prompt_a_character_that_moves_the_prompts_end_is_not_carried_past():
    text, cursor = "x = total", len("x = total")  # a word end; the suggestion goes on with " + 1)"
    carry = Carry()
    carry.remember(URI, text, cursor, (" + count(a)",), fim=True)
    assert carry.rest(URI, text + " ", cursor + 1) is None  # the space moves "total" into the prompt
    assert carry.rest(URI, text + " +", cursor + 2) == (" count(a)",)  # an accept (several characters) is carried
    carry.remember(URI, text + " ", cursor + 1, ("+ count(a)",), fim=True)  # the engine's answer after the space
    assert carry.rest(URI, text + " +", cursor + 2) is None  # punctuation after a space moves it too
    carry.remember(URI, text + " + ", cursor + 3, ("count(a)",), fim=True)
    assert carry.rest(URI, text + " + c", cursor + 4) == ("ount(a)",)  # a letter: the prompt stays
    carry.remember(URI, text + " +", cursor + 2, ("  count(a)",), fim=True)
    assert carry.rest(URI, text + " + ", cursor + 3) == (" count(a)",)  # whitespace after "+": the required prefix
    carry.remember(URI, text + " + c", cursor + 4, ("ount(a)",), fim=True)
    assert carry.rest(URI, text + " + co", cursor + 5) == ("unt(a)",)
    carry.remember(URI, text + " + count", cursor + 8, ("(a)",), fim=True)
    assert carry.rest(URI, text + " + count(", cursor + 9) is None  # "(" after a word moves it
    plain = Carry()  # on a plain prompt the engine's answer after the space is the carried rest
    plain.remember(URI, text, cursor, (" + count(a)",))
    assert plain.rest(URI, text + " ", cursor + 1) == ("+ count(a)",)


def test_with_the_line_in_the_middle_only_a_new_line_moves_the_prompt():
    """psm-line: the word typed stays after MID, as on a plain prompt; a line break does not."""
    text, cursor = "x = total", len("x = total")
    carry = Carry()
    carry.remember(URI, text, cursor, (" + count(a)",), fim=True, fim_line=True)
    assert carry.rest(URI, text + " ", cursor + 1) == ("+ count(a)",)
    carry.remember(URI, text + " + count", cursor + 8, ("(a)",), fim=True, fim_line=True)
    assert carry.rest(URI, text + " + count(", cursor + 9) == ("a)",)
    carry.remember(URI, text, cursor, ("\n    y = 1",), fim=True, fim_line=True)
    assert carry.rest(URI, text + "\n", cursor + 1) is None  # the line before the cursor changed
    made = Completion(" total + count(a)", "eos", DecodeStats(fim=True, fim_line=True))
    carry.keep(URI, Computed(text, cursor, " total", made))
    assert carry.typed_along(URI, text + " ", cursor + 1) is not None  # judged again


def test_on_a_fim_prompt_a_hidden_completion_is_not_judged_again_past_a_moved_prompt_end():
    text, cursor = "x = total", len("x = total")
    made = Completion(" total + count(a)", "eos", DecodeStats(fim=True))
    carry = Carry()
    carry.keep(URI, Computed(text, cursor, " total", made))
    assert carry.typed_along(URI, text + " ", cursor + 1) is None
    assert carry.typed_along(URI, text, cursor) is not None
    carry.keep(URI, Computed(text, cursor, " total", Completion(" total + count(a)", "eos", DecodeStats())))
    assert carry.typed_along(URI, text + " ", cursor + 1) is not None  # a plain prompt's: judged again


class FimEngine(FakeEngine):
    """FakeEngine whose answers say they came from a FIM prompt."""

    def complete(self, request, cancel):
        done = super().complete(request, cancel)
        return Completion(done.text, done.stop_reason, DecodeStats(**{**done.stats.__dict__, "fim": True}),
                          alternatives=done.alternatives)  # fmt: skip


def test_through_the_server_a_space_typed_after_a_word_on_a_fim_prompt_asks_the_engine():
    engine = FimEngine(words=WORDS)
    server = InProcessServer(load=lambda config: engine)
    try:
        capabilities = {"general": {"positionEncodings": ["utf-16"]}, "textDocument": {"inlineCompletion": {}}}
        server.client.initialize({"cpcLsp": {"maxTokens": 16}}, wait_loaded=True, capabilities=capabilities)
        editor = Editor(server.client)
        uri = "file:///tmp/carry/fim.txt"
        editor.open(uri, DRAFT)
        assert editor.suggestion(uri) == "yesterday done"
        calls = len(engine.calls)
        editor.type(uri, "e")  # a letter along it: carried
        assert editor.suggestion(uri) == "yesterday done" and len(engine.calls) == calls
        editor.type(uri, "rday")  # accepted up to the word's end
        editor.suggestion(uri)
        calls = len(engine.calls)
        editor.type(uri, " ")  # typed past "done" by hand: the engine answers for the new prompt
        editor.suggestion(uri)
        assert len(engine.calls) == calls + 1 and engine.calls[-1].endswith("yesterday")
    finally:
        server.close()


def test_a_letter_typed_along_a_budget_cut_suggestion_asks_the_engine():
    carry = Carry()
    carry.remember(URI, TEXT, CURSOR, ("erday. I'm",), complete=False)
    assert carry.rest(URI, *inserted("e")) is None  # the engine would reach further
    assert carry.rest(URI, *inserted("erday")) == (". I'm",)  # an accept: the rest, no model work
