"""Confidence signals and alternatives on hand-built distributions (no model)."""

import math

import numpy as np

from engine.core.alternatives import BudgetedRows, alternatives, first_tokens
from engine.core.covering import CoveringSearch
from engine.core.signals import compute, word_ends_of
from engine.types import NO_RIVAL
from tests.engine.toy import EOG, ToyRows, toy_vocab

LN = math.log


def test_word_ends_are_after_the_typed_prefix_and_before_a_non_word_character():
    assert word_ends_of(" yesterday, I went", 5) == [10, 13]
    assert word_ends_of(" yest The.", 5) == [9]  # the typed word ending at once is not a word end
    assert word_ends_of(" yest", 5) == []


def test_a_word_end_is_confirmed_by_the_token_that_shows_the_next_character():
    steps = [(b" yester", LN(0.5)), (b"day", LN(0.8)), (b",", LN(0.9)), (b" I", LN(0.5))]
    s = compute(" yest", steps)
    assert [e.chars for e in s.word_ends] == [10]  # " I" is not known to end: nothing came after it
    assert math.isclose(s.word_log_prob, LN(0.5 * 0.8 * 0.9))
    assert s.log_prob_at(10) == s.word_log_prob and s.log_prob_at(9) is None
    assert s.margin == NO_RIVAL


def test_a_token_spanning_the_word_end_confirms_it_itself():
    s = compute(" yest", [(b" yesterday,", LN(0.4)), (b" I", LN(0.5)), (b" went", LN(0.2))])
    assert math.isclose(s.word_log_prob, LN(0.4))
    assert [e.chars for e in s.word_ends] == [10, 13]
    assert math.isclose(s.word_ends[1].log_prob, LN(0.4 * 0.5 * 0.2))


def test_end_of_generation_confirms_the_last_word():
    s = compute(" yest", [(b" yesterday", LN(0.5)), (b"", LN(0.5))], ended=True)
    assert [(e.chars, round(e.log_prob, 6)) for e in s.word_ends] == [(10, round(LN(0.25), 6))]


def test_the_margin_counts_only_coverings_that_surely_spell_another_word():
    steps = [(b" yesterday", LN(0.5)), (b".", LN(0.8))]
    rivals = [
        (b" yesterday", LN(0.5)),  # itself
        (b" yest", LN(0.3)),  # stops inside the word: undecided
        (b" yesterday.", LN(0.25)),  # the same word, ended
        (b" yesteryear", LN(0.1)),  # another word
        (b" yesterdays", LN(0.05)),  # goes on past the word: another word
    ]
    s = compute(" yest", steps, rivals)
    assert math.isclose(s.margin, LN(0.4) - LN(0.1))


def test_no_word_end_yet_the_whole_text_stands_for_the_first_word():
    s = compute(" yest", [(b" yester", LN(0.5)), (b"d", LN(0.5))])
    assert s.word_ends == () and math.isclose(s.word_log_prob, LN(0.25))


# --- the covering search's mass and ranking, and alternatives ---------------------------------

PIECES = [" y", "es", " yes", " yet", "ter", "day", " ", ".", EOG, "x"]
Y, ES, YES, YET, TER, DAY, SP, DOT, END, X = range(len(PIECES))
VOCAB = toy_vocab(PIECES)
TABLE = {  # each row sums to 1 (ToyRows gives the rest 1e-6)
    (): {YES: 0.3, Y: 0.35, YET: 0.05, SP: 0.25, X: 0.05},
    (Y,): {ES: 0.5, DOT: 0.5},
    (YES,): {TER: 0.6, DOT: 0.4},
    (YES, TER): {DAY: 1.0},
    (YES, TER, DAY): {DOT: 1.0},
    (Y, ES): {DOT: 1.0},
    (YET,): {DOT: 1.0},
}


def test_the_mass_is_every_complete_covering_found_and_ranked_is_most_probable_first():
    search = CoveringSearch(VOCAB, ToyRows(len(PIECES), TABLE), max_decodes=8)
    best = search.run(b" ye")
    assert best.path == (YES,)
    ranked = search.ranked(3)
    assert [c.path for c in ranked] == [(YES,), (Y, ES), (YET,)]
    assert math.isclose(search.log_mass(), LN(0.3 + 0.35 * 0.5 + 0.05), abs_tol=1e-3)


def test_alternatives_are_distinct_words_most_probable_first_within_the_budget():
    rows = ToyRows(len(PIECES), TABLE)
    search = CoveringSearch(VOCAB, rows, max_decodes=8)
    search.run(b" ye")
    ranked, mass = search.ranked(6), search.log_mass()
    budget = BudgetedRows(_Counted(rows), budget=8)
    found = alternatives(VOCAB, budget, " ye", ranked, mass, " yesterday", (YES,), 3)
    assert [a.text for a in found] == [" yes", " yet"]  # " y"+"es" then "." is the word " yes"
    assert all(a.signals.word_ends for a in found)
    assert found[0].signals.word_log_prob > found[1].signals.word_log_prob
    assert budget.decodes <= 8


def test_with_no_budget_only_remembered_rows_are_used():
    rows = ToyRows(len(PIECES), TABLE)
    search = CoveringSearch(VOCAB, rows, max_decodes=8)
    search.run(b" ye")
    counted = _Counted(rows, remembered=frozenset({(YET,)}))
    found = alternatives(
        VOCAB, BudgetedRows(counted, 0), " ye", search.ranked(6), search.log_mass(), " yesterday", (YES,), 3
    )
    assert [a.text for a in found] == [" yet"]
    assert counted.decodes == 0


def test_first_tokens_skip_end_of_generation():
    row = np.log(np.array([0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.5, 0.05], dtype=np.float32))
    top = first_tokens(row, VOCAB, 2)
    assert len(top) == 2 and top[0].path == (Y,) and math.isclose(top[0].log_prob, LN(0.1), abs_tol=1e-4)
    assert all(c.path != (END,) for c in top)


class _Counted:
    """PathRows' interface over toy rows: `remembered` paths cost no decode."""

    def __init__(self, rows: ToyRows, remembered: frozenset = frozenset()) -> None:
        self._rows, self._remembered, self.decodes = rows, remembered, 0

    def row(self, path):
        if not self.cached(path):
            self.decodes += 1
        return self._rows.row(path)

    def cached(self, path) -> bool:
        return path in self._remembered


# --- what both backends see alike: the rows along the chosen covering, cut to their top tokens ----

CUT = [" ", "a", "ab", "abc", "abd", " a", " ab", "b", "x"]
SP_, A, AB, ABC, ABD, SA, SAB, B, XX = range(len(CUT))
CUT_VOCAB = toy_vocab(CUT)
CUT_TABLE = {
    (): {SP_: 0.4, SA: 0.3, XX: 0.2, SAB: 0.1},
    (SP_,): {AB: 0.5, ABC: 0.25, A: 0.15, ABD: 0.1},
    (SA,): {B: 0.5, XX: 0.5},
}


def test_along_the_chosen_covering_only_the_top_tokens_of_its_rows_count():
    """The mass and the rivals the gate reads (engine.signals) are the coverings ending on the
    chosen path with one of each row's `top` tokens: the same on a server that lists `top` per row
    and expands only what its proof needs. The full search's mass counts the branch " a"+"b" and
    the root's " ab" (third and fourth at the root)."""
    rows = ToyRows(len(CUT), CUT_TABLE)
    search = CoveringSearch(CUT_VOCAB, rows, max_decodes=8)
    best = search.run(b" ab")
    assert best.path == (SP_, AB)
    decodes = rows.decodes
    seen, mass = search.along(best, b" ab", top=2)
    assert rows.decodes == decodes  # no decode: the rows the search read
    assert [c.path for c in seen] == [(SP_, AB), (SP_, ABC)]
    assert math.isclose(mass, LN(0.4 * (0.5 + 0.25)), abs_tol=1e-4)
    assert search.log_mass() > mass + 0.1  # the whole search saw more
    wider, wider_mass = search.along(best, b" ab", top=4)  # the root's fourth token covers too
    assert (SAB,) in [c.path for c in wider] and math.isclose(wider_mass, LN(0.1 + 0.4 * 0.85), abs_tol=1e-4)


def test_the_chosen_covering_counts_even_outside_the_top_tokens():
    rows = ToyRows(len(CUT), {(): {SP_: 0.5, SA: 0.46, SAB: 0.04}, (SP_,): {XX: 0.9, AB: 0.1}, (SA,): {XX: 1.0}})
    search = CoveringSearch(CUT_VOCAB, rows, max_decodes=8)
    best = search.run(b" ab")
    assert best.path == (SP_, AB)  # "ab" is second in its row
    seen, mass = search.along(best, b" ab", top=1)
    assert seen == [best] and math.isclose(mass, best.log_prob)
