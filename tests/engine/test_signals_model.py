"""Confidence signals and alternatives on the real default model."""

import math

import numpy as np
import pytest

from engine import CompletionRequest
from engine.core.sampler import log_sum_exp
from engine.core.sequence import PathRows

pytestmark = pytest.mark.model

DRAFT = "Thanks for sending over the draft"


@pytest.fixture
def engine(model_engine):
    return model_engine


def complete(engine, prompt, required, **kwargs):
    return engine.complete(CompletionRequest(prompt=prompt, required=required, **kwargs))


def test_the_word_probability_is_the_covering_and_its_continuation_over_the_typed_mass(engine):
    """Recomputed by hand from the model's rows: p(" yesterday" + word end | " yest")."""
    result = complete(engine, DRAFT, " yest")
    assert result.text.startswith(" yesterday.")
    s = result.signals
    assert s.word_ends[0].chars == len(" yesterday")
    prompt = engine.tokenize(DRAFT)
    rows = PathRows(engine.kv, prompt, __import__("threading").Event())
    yesterday = engine._spell(b" yesterday")
    assert len(yesterday) == 1  # one token: the covering is [" yesterday"], then "." confirms the end
    root = rows.row(())
    dot = rows.row(tuple(yesterday))
    word = root[yesterday[0]] - log_sum_exp(root) + dot[engine._spell(b".")[0]] - log_sum_exp(dot)
    # the typed mass: every token starting with " yest" at the root, and the expanded branches
    assert s.typed_log_prob < 0
    assert math.isclose(s.word_log_prob, word - s.typed_log_prob, abs_tol=1e-3)
    assert 0.3 < s.word_prob < 0.95
    assert s.margin > 2  # no other word comes close after "draft yest"


def test_a_word_start_is_less_sure_than_a_half_typed_word(engine):
    start = complete(engine, DRAFT, " ").signals
    inside = complete(engine, DRAFT, " yest").signals
    assert start.word_prob < inside.word_prob
    assert start.margin < inside.margin


def test_probabilities_only_fall_along_the_suggestion(engine):
    ends = complete(engine, DRAFT, " yest", max_tokens=16).signals.word_ends
    assert len(ends) >= 3
    assert all(a.log_prob >= b.log_prob - 1e-9 for a, b in zip(ends, ends[1:]))
    assert all(a.chars < b.chars for a, b in zip(ends, ends[1:]))


def test_alternatives_are_distinct_words_beginning_with_the_typed_prefix_most_probable_first(engine):
    result = complete(
        engine, "import os\n\ndef read(path):\n    with open(path) as f:\n        return f.", "re", alternatives=3
    )
    texts = [a.text for a in result.alternatives]
    first = result.text[: result.signals.word_ends[0].chars]
    assert first == "read"
    assert 1 <= len(texts) <= 3 and len(set(texts)) == len(texts) and first not in texts
    assert all(t.startswith("re") and t != "re" for t in texts)
    assert "readlines" in texts or "readline" in texts
    probs = [a.signals.word_log_prob for a in result.alternatives]
    assert probs == sorted(probs, reverse=True)
    assert all(p <= result.signals.word_log_prob for p in probs)  # the primary is the greedy best here
    assert result.stats.alternative_decodes <= CompletionRequest("").max_cover_decodes


def test_alternatives_spend_no_decode_on_a_keystroke_typed_along_the_suggestion(engine):
    """As the server asks while the user types (`alternatives_later`): the keystroke that decodes
    leaves the alternatives that cost decodes for later and says so; made then (the same request
    without it), they cost at most the budget; typed along, they come from remembered rows."""
    prompt = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the"
    engine.kv.forget()
    first = complete(engine, prompt, " la", alternatives=3, max_cover_decodes=4, alternatives_later=True)
    assert first.stats.alternative_decodes == 0 and first.stats.alternatives_deferred
    later = complete(engine, prompt, " la", alternatives=3, max_cover_decodes=4)
    assert 0 < later.stats.alternative_decodes <= 4 and len(later.alternatives) > len(first.alternatives)
    along = complete(engine, prompt, " laz", alternatives=3, max_cover_decodes=4, alternatives_later=True)
    assert along.stats.decoded_tokens == 0 and along.stats.cover_decodes == 0
    assert along.stats.alternative_decodes == 0 and not along.stats.alternatives_deferred
    assert all(a.text.startswith(" laz") for a in along.alternatives)


def test_after_punctuation_the_first_token_row_gives_the_rivals(engine):
    result = complete(engine, "def main(argv):\n    parser = argparse.ArgumentParser(", "", alternatives=2)
    s = result.signals
    assert s.typed_log_prob == 0.0 and s.word_ends and not math.isinf(s.margin)
    assert all(a.text and "\n" not in a.text for a in result.alternatives)
    assert np.isfinite(s.word_log_prob) and s.word_log_prob < 0


def test_generation_stops_where_the_callers_check_says_nothing_more_can_be_shown(engine):
    """CompletionRequest.hidden: asked at the word ends generation confirms, with the signals of
    the text so far; True ends it there ("hidden"), a prefix of what it makes without the check."""
    asked = []

    def hidden(model, text, signals):
        asked.append((model, text, signals.word_ends))
        return len(signals.word_ends) >= 1

    engine.kv.forget()
    whole = complete(engine, DRAFT, " yest", max_tokens=12)
    cut = complete(engine, DRAFT, " yest", max_tokens=12, hidden=hidden)
    assert cut.stop_reason == "hidden" and whole.stop_reason != "hidden"
    assert whole.text.startswith(cut.text) and len(cut.text) < len(whole.text)
    assert cut.stats.generated_tokens < whole.stats.generated_tokens
    assert asked and asked[-1][0] == engine.model_id and asked[-1][1] == cut.text
    assert cut.signals.word_ends[0] == whole.signals.word_ends[0]  # the same numbers as after generation
