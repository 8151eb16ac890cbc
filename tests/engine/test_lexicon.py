"""Document words scored against the model's own word, on the tiny generated model: the score's
definition, a winner becoming the required prefix, the decode budget, and typing along for free."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine import CompletionRequest, Engine
from engine.core.sampler import log_sum_exp
from engine.core.sequence import PathRows
from engine.core.word_choice import WordScorer, first_word, word_end_tokens
from tests.support.tiny_gguf import load

PROMPT = "def value(self):\n    return the"


@pytest.fixture(scope="module")
def engine(tiny_models):
    eng = load(tiny_models["plain"])
    yield eng
    eng.close()


def tokenize(engine: Engine):
    return engine._spell


def test_words_are_spelled_exactly_without_a_sentencepiece_space(engine):
    pieces = lambda b: [engine.vocab.pieces[t] for t in engine._spell(b)]  # noqa: E731
    assert pieces(b" yesterday") == [b" yesterday"]
    assert b"".join(pieces(b" yesteryear")) == b" yesteryear"
    assert engine._spell(b"yesterday") == []  # the tokenizer cannot spell it without a space


def test_a_word_scores_its_tokens_plus_the_word_ending_there(engine):
    prompt = engine.tokenize(PROMPT)
    rows = PathRows(engine.kv, prompt, threading.Event())
    scorer = WordScorer(engine.vocab, rows, tokenize(engine), budget=64)
    path = tuple(tokenize(engine)(b" yesterday"))
    expected = 0.0
    for i, token in enumerate(path):
        row = engine.kv.logits_after(prompt + path[:i])
        expected += float(row[token]) - log_sum_exp(row)
    row = engine.kv.logits_after(prompt + path)
    ends = word_end_tokens(engine.vocab)
    expected += log_sum_exp(row[ends]) - log_sum_exp(row)
    assert scorer.score(b" yesterday") == pytest.approx(expected, abs=1e-6)
    ending = {engine.vocab.pieces[t] for t in ends}
    assert {b" yesterday", b" ", b"(", b"\n"} <= ending and not {b"d", b"_", b"7", b"yes"} & ending
    assert np.all(engine.vocab.eog[[t for t in ends if not engine.vocab.pieces[t]]])


def complete(engine: Engine, required: str, candidates=(), **kw):
    return engine.complete(CompletionRequest(PROMPT, required, max_tokens=6, candidates=candidates, **kw))


def test_without_candidates_nothing_changes(engine):
    plain = complete(engine, " y")
    again = complete(engine, " y", candidates=())
    assert again.text == plain.text and again.stats.lexicon_decodes == 0 and not again.stats.lexicon_changed


def test_a_document_word_with_a_large_prior_becomes_the_required_prefix(engine):
    base = complete(engine, " y")
    own = first_word(base.text[1:])
    other = "yesterday" if own != "yesterday" else "yes"
    chosen = complete(engine, " y", candidates=(other,), lexicon_prior=20.0)
    assert chosen.stats.lexicon_changed
    assert chosen.text.startswith(" " + other) and chosen.required_satisfied
    engine.kv.forget()
    cold = complete(engine, " y", candidates=(other,), lexicon_prior=20.0)
    assert cold.stats.lexicon_changed and cold.stats.decoded_tokens == cold.stats.prompt_tokens > 0
    assert cold.stats.reused_tokens == 0  # the first pass's prompt decode is reported, not the second's
    kept = complete(engine, " y", candidates=(other,), lexicon_prior=0.0, lexicon_decodes=64)
    assert kept.text.startswith(" y")


def test_the_extra_decodes_stay_within_the_budget(engine):
    words = ("yesterday", "yes", "yester", "yesterdays", "yesteryear", "yeses")
    for budget in (0, 1, 2, 3):
        engine.kv.forget()
        result = complete(engine, " y", candidates=words, lexicon_decodes=budget, lexicon_prior=1.0)
        assert result.stats.lexicon_decodes <= budget
        assert result.text.startswith(" y")


def test_typing_along_a_suggestion_stays_free(engine):
    engine.kv.forget()
    words = ("yesterday", "yes", "yesteryear")
    first = complete(engine, " ye", candidates=words, lexicon_prior=1.0, lexicon_decodes=16)
    assert first.text.startswith(" ye") and len(first.text) > 3
    typed = first.text[:4]  # the user types the suggestion's next letter
    before = engine.kv.decoded
    along = complete(
        engine, typed, candidates=[w for w in words if w.startswith(typed[1:])], lexicon_prior=1.0, lexicon_decodes=16
    )
    assert along.text.startswith(typed)
    assert engine.kv.decoded == before, along.stats
