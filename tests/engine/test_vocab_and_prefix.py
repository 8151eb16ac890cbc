"""Seed 000's consistency rule on a hand-built vocabulary (no model)."""

import numpy as np

from engine.core.prefix import RequiredPrefix
from tests.engine.toy import EOG, toy_vocab

PIECES = ["a", "b", "ab", " y", " yes", " yesterday", " yet", "terday", "t", EOG, "<ctrl>", "x"]
VOCAB = toy_vocab(PIECES, control=("<ctrl>",))
ID = {p: i for i, p in enumerate(PIECES)}


def names(ids) -> set[str]:
    return {PIECES[int(i)] for i in ids}


def test_consistent_tokens_are_prefixes_of_the_rest_or_start_with_it():
    cands = VOCAB.candidates(b" yest")
    assert names(cands.covering) == {" yesterday"}
    assert {PIECES[t] for t, _ in cands.partial} == {" y", " yes"}
    assert names(cands.all_ids()) == {" y", " yes", " yesterday"}


def test_a_token_equal_to_the_rest_covers_it():
    assert names(VOCAB.starting_with(b" yet")) == {" yet"}


def test_tokens_that_render_to_nothing_are_never_consistent():
    for remaining in (b"a", b" ", b"t", b"x"):
        ids = VOCAB.candidates(remaining).all_ids()
        assert ID[EOG] not in ids and ID["<ctrl>"] not in ids
    assert VOCAB.banned[ID["<ctrl>"]] and not VOCAB.banned[ID[EOG]]


def test_each_token_consumes_its_bytes_and_the_constraint_clears():
    prefix = RequiredPrefix(VOCAB, b" yest")
    prefix.consume(ID[" yes"])
    assert prefix.remaining == b"t"
    assert names(prefix.allowed()) == {"t", "terday"}
    prefix.consume(ID["terday"])
    assert not prefix.active and prefix.allowed() is None and not prefix.dropped


def test_nothing_consistent_drops_the_constraint_for_that_row():
    prefix = RequiredPrefix(VOCAB, b"qq")
    assert prefix.allowed() is None
    assert prefix.dropped and not prefix.active


def test_an_empty_prefix_clears_a_pending_one():
    prefix = RequiredPrefix(VOCAB, b" yest")
    prefix.set(b"")
    assert not prefix.active and prefix.allowed() is None


def test_utf8_split_across_byte_tokens():
    # "é" is C3 A9; byte-fallback tokens carry half a character each.
    pieces = [b"\xc3", b"\xa9", "caf", "café", b"caf\xc3", EOG]
    vocab = toy_vocab(pieces)
    cands = vocab.candidates("café".encode())
    assert {vocab.pieces[t] for t, _ in cands.partial} == {b"caf", b"caf\xc3"}
    assert {vocab.pieces[int(t)] for t in cands.covering} == {"café".encode()}
    prefix = RequiredPrefix(vocab, "é".encode())
    assert {vocab.pieces[int(t)] for t in prefix.allowed()} == {b"\xc3"}
    prefix.consume(0)
    assert {vocab.pieces[int(t)] for t in prefix.allowed()} == {b"\xa9"}


def test_prefix_ranges_at_the_top_byte():
    vocab = toy_vocab([b"\xff", b"\xff\xff", b"\xfe", b"a"])
    assert {vocab.pieces[int(t)] for t in vocab.starting_with(b"\xff")} == {b"\xff", b"\xff\xff"}
    assert vocab.starting_with(b"").size == 4
    assert isinstance(vocab.starting_with(b"z"), np.ndarray) and vocab.starting_with(b"z").size == 0
