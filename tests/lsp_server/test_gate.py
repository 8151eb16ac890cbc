"""The confidence gate's logic on hand-made signals (no model)."""

import math

from engine import Completion, DecodeStats, Signals, WordEnd
from lsp_server.confidence_gate import CURSOR_CLASSES, Calibration, confident_length, cursor_class, hidden_check
from lsp_server.split import split
from lsp_server.suggestion import suggestion_for

IDENTITY = Calibration((0.0, 0.0, 0.0), w_log_prob=1.0, w_margin=0.0, w_first=0.0, w_word=0.0, w_typed=0.0)
LN = math.log


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_cursor_classes():
    assert cursor_class(split("the draft yest", 14)) == CURSOR_CLASSES[0]
    assert cursor_class(split("the draft ", 10)) == CURSOR_CLASSES[1]
    assert cursor_class(split("x = 1\n", 6)) == CURSOR_CLASSES[1]
    assert cursor_class(split("", 0)) == CURSOR_CLASSES[1]
    assert cursor_class(split("f(", 2)) == CURSOR_CLASSES[2]
    assert cursor_class(split("a.", 2)) == CURSOR_CLASSES[2]


def test_the_calibration_is_a_logistic_of_the_features():
    c = Calibration(
        (1.0, -1.0, 0.5), w_log_prob=2.0, w_margin=0.5, w_first=0.25, w_word=1.5, w_typed=0.1, margin_cap=4.0
    )
    z = -1.0 + 2.0 * -0.5 + 0.5 * 4.0 + 0.25 + 1.5 + 0.1 * -20.0  # margin capped, typed floored
    assert math.isclose(c.confidence(CURSOR_CLASSES[1], -0.5, 100.0, True, True, -50.0), 1 / (1 + math.exp(-z)))
    assert 0.0 < c.confidence(CURSOR_CLASSES[0], -1e9, 0.0, False, False, 0.0) < 1e-20  # clipped, no overflow


SIGNALS = Signals(  # " yesterday. I went" after " yest": p 0.6 at "yesterday", 0.3 at "I", 0.1 at "went"
    word_log_prob=LN(0.6), margin=3.0,
    word_ends=(WordEnd(10, LN(0.6)), WordEnd(13, LN(0.3)), WordEnd(18, LN(0.1))),
)  # fmt: skip


TEXT = " yesterday. I went"


def test_the_suggestion_is_cut_at_the_last_word_still_above_the_threshold():
    cls = CURSOR_CLASSES[0]
    # the identity calibration maps p to sigmoid(log p), i.e. p / (1 + p)
    assert confident_length(TEXT, 5, SIGNALS, cls, 0.05, 99, IDENTITY) == 18
    assert confident_length(TEXT, 5, SIGNALS, cls, 0.2, 99, IDENTITY) == 13
    assert confident_length(TEXT, 5, SIGNALS, cls, 0.3, 99, IDENTITY) == 10
    assert confident_length(TEXT, 5, SIGNALS, cls, 0.5, 99, IDENTITY) == 0
    assert confident_length(TEXT, 5, SIGNALS, cls, 0.05, 15, IDENTITY) == 13  # a line's end as the limit


def test_a_unit_without_a_word_character_is_told_apart():
    no_word = Calibration((0.0, 0.0, 0.0), w_log_prob=1.0, w_margin=0.0, w_first=0.0, w_word=5.0, w_typed=0.0)
    signals = Signals(LN(0.9), 3.0, (WordEnd(4, LN(0.9)), WordEnd(5, LN(0.8))))
    assert confident_length("  );\n", 0, signals, CURSOR_CLASSES[2], 0.9, 99, no_word) == 0
    assert confident_length(" foo;\n", 0, signals, CURSOR_CLASSES[2], 0.9, 99, no_word) == 5


def test_a_later_word_above_the_threshold_does_not_bring_back_one_below():
    bumpy = Signals(LN(0.6), 3.0, (WordEnd(10, LN(0.6)), WordEnd(13, LN(0.01)), WordEnd(18, LN(0.5))))
    assert confident_length(TEXT, 5, bumpy, CURSOR_CLASSES[0], 0.2, 99, IDENTITY) == 10


def test_suggestion_for_applies_the_gate_and_keeps_the_typed_word():
    parts = split("Thanks for the draft yest", 25)
    completion = Completion(" yesterday. I went", "line", DecodeStats(), signals=SIGNALS)
    whole = suggestion_for(parts, completion)
    assert whole.insert_text == "yesterday. I went"
    cut = suggestion_for(parts, completion, min_confidence=0.3, calibration=IDENTITY)
    assert cut.insert_text == "yesterday"
    assert suggestion_for(parts, completion, min_confidence=0.5, calibration=IDENTITY) is None


def test_without_signals_nothing_is_gated():
    parts = split("Thanks for the draft yest", 25)
    completion = Completion(" yesterday. I went", "line", DecodeStats())
    assert suggestion_for(parts, completion, min_confidence=0.9).insert_text == "yesterday. I went"


def test_naive_offsets_start_at_the_cursor():
    parts = split("Thanks for the draft yest", 25)
    signals = Signals(LN(0.6), 3.0, (WordEnd(5, LN(0.6)), WordEnd(8, LN(0.01))))
    completion = Completion("erday. I", "line", DecodeStats(), signals=signals)
    cut = suggestion_for(parts, completion, naive=True, min_confidence=0.3, calibration=IDENTITY)
    assert cut.insert_text == "yesterday"


def test_the_gate_judges_the_first_item_and_never_hides_the_alternatives_alone():
    from engine import Alternative
    from lsp_server.suggestion import suggestions_for

    parts = split("Thanks for the draft yest", 25)
    unsure = Signals(LN(0.01), 0.0, (WordEnd(10, LN(0.01)),))
    alternatives = (Alternative(" yesteryear", unsure),)
    sure = Completion(" yesterday. I went", "line", DecodeStats(), signals=SIGNALS, alternatives=alternatives)
    shown = suggestions_for(parts, sure, min_confidence=0.3, calibration=IDENTITY)
    assert [s.insert_text for s in shown] == ["yesterday", "yesteryear"]  # cycled to, not gated
    hidden = Completion(" yesterday. I went", "line", DecodeStats(), signals=unsure, alternatives=alternatives)
    assert suggestions_for(parts, hidden, min_confidence=0.3, calibration=IDENTITY) == []


def test_the_engines_stop_check_says_hidden_once_a_word_end_is_below_the_gate():
    """`hidden_check` (CompletionRequest.hidden): generation may stop once `confident_length`
    can show no more, on the cursor's line or the next one (shaped as a block)."""
    parts = split("Thanks for the draft yest", 25)
    hidden = hidden_check(parts, 0.5)  # the unfitted gate's calibration, the threshold set
    sure = Signals(LN(0.99), 9.0, (WordEnd(10, LN(0.99)),), 0.0, step_ends=(WordEnd(10, LN(0.99)),))
    assert not hidden(None, " yesterday.", sure)
    unsure = Signals(LN(0.99), 9.0, (WordEnd(10, LN(0.99)), WordEnd(13, LN(1e-6))), 0.0)
    assert hidden(None, " yesterday. I went", unsure)
    assert not hidden_check(parts, 0.0)(None, " yesterday. I went", unsure)  # the gate off
    below = split("def f(x):\n    return x\n", 23)
    assert hidden_check(below, 0.5)(None, "\n    y", Signals(LN(1e-6), 0.0, (WordEnd(6, LN(1e-6)),)))
    assert not hidden_check(below, 0.5)(None, "\n    y", Signals(LN(0.99), 9.0, (WordEnd(6, LN(0.99)),)))
