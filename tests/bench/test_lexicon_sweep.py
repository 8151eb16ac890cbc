"""The offline prior sweep chooses as engine.core.word_choice.choose does (no model)."""

from __future__ import annotations

from bench.lexicon_prior import Scored, pick, summarize, sweep


def scored(
    base="values", base_score=-2.0, in_doc=False, word="value", candidates=(("valuable", -3.0, 2), ("value", -1.0, 5))
):
    return Scored(0, "python", word, base, base_score, in_doc, list(candidates))


def test_a_candidate_wins_only_when_its_score_plus_the_prior_beats_the_models_word():
    s = scored(candidates=(("valuable", -3.0, 2),))
    assert pick(s, 0.5) == "values" and pick(s, 1.5) == "valuable"
    s = scored(in_doc=True, candidates=(("valuable", -3.0, 2),))
    assert pick(s, 1.5) == "values"  # the model's word is a document word too: it gets the prior


def test_a_candidate_that_is_a_prefix_of_the_models_word_is_skipped():
    assert pick(scored(), 5.0) == "valuable"  # "value" would not change "values" as a required prefix
    assert pick(scored(candidates=(("value", -1.0, 5),)), 5.0) == "values"


def test_sweep_and_summary_count_right_words_per_kind():
    rows = sweep([scored(word="valuable"), scored(word="values")], priors=(0.0, 2.0))
    assert [r["all"] for r in rows] == [0.5, 0.5, 0.5]
    table = summarize([
        {"set": "check", "kind": "c", "lexicon": False, "correct": True, "begins_with_typed": True},
        {"set": "check", "kind": "c", "lexicon": True, "correct": False, "begins_with_typed": True},
    ])  # fmt: skip
    assert [(r["lexicon"], r["all"], r["c"]) for r in table] == [(False, 1.0, 1.0), (True, 0.0, 0.0)]
