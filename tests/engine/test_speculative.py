"""Prompt-lookup drafts (logic only; identity with plain decoding is in test_first_contact.py)."""

from engine.core.speculative import MAX_VERIFY_ROWS, DraftConfig, PromptLookup

NO_STOPS = [False] * 100


def test_the_tokens_after_the_latest_earlier_occurrence_are_proposed():
    lookup = PromptLookup(DraftConfig(max_draft=2), NO_STOPS)
    assert lookup.propose([5, 6, 7, 1, 5, 6, 8, 2, 5, 6], 10) == (8, 2)  # latest "5 6" wins


def test_the_longest_matching_suffix_is_preferred():
    lookup = PromptLookup(DraftConfig(max_draft=2, max_ngram=3), NO_STOPS)
    assert lookup.propose([1, 2, 3, 9, 9, 7, 2, 3, 4, 4, 1, 2, 3], 10) == (9, 9)  # "1 2 3", not "2 3"


def test_no_match_no_draft_and_a_lone_repeated_token_is_not_enough():
    lookup = PromptLookup(DraftConfig(max_draft=2), NO_STOPS)
    assert lookup.propose([1, 2, 3, 4], 10) == ()
    assert lookup.propose([1, 7, 3, 1], 10) == ()  # min_ngram 2: "1" alone proposes nothing


def test_a_draft_stops_after_a_stop_token_and_within_the_limits():
    stops = [t == 8 for t in range(100)]
    lookup = PromptLookup(DraftConfig(max_draft=2), stops)
    assert lookup.propose([5, 6, 8, 2, 5, 6], 10) == (8,)
    assert PromptLookup(DraftConfig(max_draft=2), NO_STOPS).propose([5, 6, 8, 2, 5, 6], 1) == (8,)
    assert PromptLookup(DraftConfig(max_draft=0), NO_STOPS).propose([5, 6, 8, 2, 5, 6], 10) == ()


def test_a_draft_never_makes_a_verify_batch_longer_than_the_cap():
    lookup = PromptLookup(DraftConfig(max_draft=50), NO_STOPS)
    assert len(lookup.propose(list(range(1, 20)) + [1, 2], 50)) == MAX_VERIFY_ROWS - 1
