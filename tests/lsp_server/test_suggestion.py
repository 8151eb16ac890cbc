"""From the engine's completion to what is shown: required prefix, one line, no repeated suffix."""

from engine import Completion, DecodeStats
from lsp_server import block as blocks
from lsp_server.settings import Settings
from lsp_server.split import split
from lsp_server.suggestion import request_for, stop_before_suffix, suggestion_for


def done(text: str, reason: str = "line") -> Completion:
    return Completion(text, reason, DecodeStats())


def test_request_carries_the_split_and_settings():
    parts = split("the draft yest", 14)
    req = request_for(parts, Settings(max_tokens=3, stop=("X",), max_cover_decodes=2, temperature=0.5))
    assert (req.prompt, req.required, req.max_tokens, req.stop, req.max_cover_decodes) == (
        "the draft",
        " yest",
        3,
        ("X",),
        2,
    )
    assert req.sampling.temperature == 0.5


def test_insert_text_is_the_partial_word_plus_the_completion():
    parts = split("the draft yest", 14)
    found = suggestion_for(parts, done(" yesterday."))
    assert (found.word_start, found.cursor, found.insert_text) == (10, 14, "yesterday.")


def test_nothing_to_add():
    parts = split("the draft yest", 14)
    assert suggestion_for(parts, done(" yest")) is None
    assert suggestion_for(parts, done(" yest   ")) is None
    assert suggestion_for(parts, done(" yesterday", "cancelled")) is None
    assert suggestion_for(parts, done(" tomorrow")) is None  # constraint dropped


def test_single_line_cuts_at_the_first_line_break():
    parts = split("a b", 3)
    assert suggestion_for(parts, done(" bc\r\nd")).insert_text == "bc"
    block = blocks.at("a b", 3, "always")
    assert suggestion_for(parts, done(" bc\nd"), block=block).insert_text == "bc\nd"


def test_suffix_is_not_repeated():
    parts = split('print("hel")', 10)
    assert suggestion_for(parts, done('hello")')).insert_text == "hello"
    assert stop_before_suffix('"hi")', ");") == '"hi"'
    assert stop_before_suffix("x + 1)", ")") == "x + 1"
    assert stop_before_suffix("the", "end") == "the"  # a word character never starts an overlap
    assert stop_before_suffix("terday", "terday") == ""
    assert stop_before_suffix("abc", "   ") == "abc"


def test_the_method_setting_chooses_how_the_typed_word_is_honoured():

    parts = split("Thanks for the draft yest", len("Thanks for the draft yest"))
    exact = request_for(parts, Settings())
    mask = request_for(parts, Settings(method="mask"))
    naive = request_for(parts, Settings(method="naive"))
    assert (exact.prompt, exact.required, exact.exact) == ("Thanks for the draft", " yest", True)
    assert (mask.prompt, mask.required, mask.exact) == ("Thanks for the draft", " yest", False)
    assert (naive.prompt, naive.required) == ("Thanks for the draft yest", "")
    # Each gets the text after the cursor (a FIM model reads it; others never see it).
    after = split("the draft yest\nof the plan", len("the draft yest"), 8)
    assert {request_for(after, Settings(method=m)).suffix for m in ("exact", "mask", "naive")} == {"\nof the plan"}
    # A naive completion continues the text at the cursor.
    found = suggestion_for(parts, Completion("erday.", "eos", DecodeStats()), naive=True)
    assert found.insert_text == "yesterday."
