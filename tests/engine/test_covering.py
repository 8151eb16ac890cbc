"""The exact covering search on hand-built distributions (no model)."""

from collections import Counter

import numpy as np

from engine.core.covering import CoveringSearch
from engine.core.prefix import RequiredPrefix
from engine.core.sampler import Sampler
from engine.types import SamplingConfig
from tests.engine.toy import EOG, ToyRows, toy_vocab

PIECES = ["a", "b", "ab", EOG]
A, B, AB, END = range(4)
VOCAB = toy_vocab(PIECES)
# Root: "a" is the likeliest single token, but p(a)·p(b|a) = 0.4·0.5 = 0.2 < p(ab) = 0.3.
TABLE = {(): {A: 0.4, AB: 0.3, B: 0.2, END: 0.1}, (A,): {B: 0.5, A: 0.4, END: 0.1}}


def per_step_first_token(rows: ToyRows, required: bytes) -> int:
    prefix = RequiredPrefix(VOCAB, required)
    sampler = Sampler(SamplingConfig(), VOCAB.banned)
    return sampler.choose(rows.row(()), [], prefix.allowed())


def test_per_step_masking_picks_the_short_token_but_the_exact_search_picks_ab():
    assert per_step_first_token(ToyRows(4, TABLE), b"ab") == A
    rows = ToyRows(4, TABLE)
    best = CoveringSearch(VOCAB, rows, max_decodes=8).run(b"ab")
    assert best.path == (AB,)
    assert np.isclose(best.log_prob, np.log(0.3), atol=1e-4)
    assert rows.decodes == 1  # "a" had to be expanded to learn p(b|a)


def test_the_longer_path_wins_when_it_is_more_probable():
    table = {(): {A: 0.6, AB: 0.1, B: 0.2, END: 0.1}, (A,): {B: 0.9, END: 0.1}}
    best = CoveringSearch(VOCAB, ToyRows(4, table), max_decodes=8).run(b"ab")
    assert best.path == (A, B)
    assert np.isclose(best.log_prob, np.log(0.54), atol=1e-4)


def test_no_extra_decode_when_the_whole_covering_beats_every_partial_path():
    table = {(): {AB: 0.7, A: 0.2, B: 0.05, END: 0.05}}
    rows = ToyRows(4, table)
    assert CoveringSearch(VOCAB, rows, max_decodes=8).run(b"ab").path == (AB,)
    assert rows.decodes == 0


def test_partial_paths_below_the_best_covering_are_pruned():
    pieces = ["x", "xy", "xyz", "xyzw", EOG]
    vocab = toy_vocab(pieces)
    table = {(): {3: 0.5, 0: 0.2, 1: 0.2, 2: 0.05}, (1,): {4: 0.9}, (0,): {1: 0.1}}
    rows = ToyRows(5, table)
    best = CoveringSearch(vocab, rows, max_decodes=8).run(b"xyzw")
    assert best.path == (3,)
    assert rows.decodes == 0


def test_budget_exhaustion_finishes_by_per_step_masking():
    pieces = ["a", "b", "ab", EOG]
    rows = ToyRows(4, {(): {A: 0.5, B: 0.3, END: 0.2}})  # "ab" nearly impossible: long paths
    search = CoveringSearch(toy_vocab(pieces), rows, max_decodes=0)
    best = search.run(b"abab")
    assert search.exhausted
    assert b"".join(VOCAB.pieces[t] for t in best.path).startswith(b"abab")


def test_nothing_consistent_gives_no_covering():
    assert CoveringSearch(VOCAB, ToyRows(4, TABLE), max_decodes=8).run(b"zz") is None


def test_sampling_draws_coverings_in_proportion_to_path_probability():
    # Coverings of "ab": [ab] 0.3, [a,b] 0.2, [a,ab] 0.4*~0 ... -> ab : a+b = 0.3 : 0.2
    counts = Counter()
    sampler = Sampler(SamplingConfig(temperature=1.0, seed=7), VOCAB.banned)
    for _ in range(2000):
        best = CoveringSearch(VOCAB, ToyRows(4, TABLE), max_decodes=8).run(b"ab", sampler)
        counts[best.path] += 1
    share = counts[(AB,)] / (counts[(AB,)] + counts[(A, B)])
    assert abs(share - 0.6) < 0.05
