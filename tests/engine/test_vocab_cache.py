"""The vocabulary index kept on disk (engine.vocab_cache): what comes back is the index built from
the model, a file that does not fit is built again, and nothing else is trusted. Fast: a fake
model of a few tokens (duplicate pieces, empty ones, NUL and 0xff bytes)."""

from __future__ import annotations

import numpy as np
import pytest

from engine import model_files
from engine.core.vocab import VocabIndex
from engine.vocab_cache import load_vocab, vocab_path

PIECES = [b"", b"a", b"ab", b"abc", b" a", b"\x00", b"ab", b"\xff\xff", b"b", b"", b" ", b"  ", b"a"]
EOG = [i == 0 for i in range(len(PIECES))]
CONTROL = [i == 9 for i in range(len(PIECES))]


class FakeModel:
    def __init__(self, pieces=PIECES) -> None:
        self.pieces_list = list(pieces)
        self.n_vocab = len(pieces)
        self.built = 0

    def pieces(self) -> list[bytes]:
        self.built += 1
        return list(self.pieces_list)

    def special_flags(self, pieces):
        return list(EOG[: len(pieces)]), list(CONTROL[: len(pieces)])


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(model_files.CACHE_ENV, str(tmp_path))
    return tmp_path


def same(a: VocabIndex, b: VocabIndex) -> None:
    assert a.pieces == b.pieces
    assert np.array_equal(a.sorted_ids, b.sorted_ids)
    assert np.array_equal(a.eog, b.eog) and np.array_equal(a.banned, b.banned)
    assert np.array_equal(a.free_ids, b.free_ids) and a.max_piece_len == b.max_piece_len
    for remaining in (b"abcd", b"ab", b"a", b" ab", b"  x", b"\x00z", b"\xff\xff\xff", b"zz"):
        assert a.strict_prefixes_of(remaining) == b.strict_prefixes_of(remaining), remaining
        assert np.array_equal(a.starting_with(remaining), b.starting_with(remaining)), remaining


def test_the_second_load_reads_the_index_the_first_built():
    fresh = VocabIndex(PIECES, EOG, CONTROL)
    model = FakeModel()
    first = load_vocab(model, "fake", "runtime 1")
    second = load_vocab(model, "fake", "runtime 1")
    assert model.built == 1  # the second came from the file
    same(first, fresh)
    same(second, fresh)
    assert second.strict_prefixes_of(b"abcd") == ((1, 1), (12, 1), (2, 2), (6, 2), (3, 3))  # shared pieces, by id


def test_another_model_or_runtime_builds_its_own():
    model = FakeModel()
    load_vocab(model, "fake", "runtime 1")
    load_vocab(model, "other", "runtime 1")
    load_vocab(model, "fake", "runtime 2")
    assert model.built == 3
    assert (
        len({vocab_path("fake", "runtime 1"), vocab_path("other", "runtime 1"), vocab_path("fake", "runtime 2")}) == 3
    )


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong order", "other size", "bytes short"])
def test_a_file_that_does_not_fit_is_built_again(damage):
    model = FakeModel()
    path = vocab_path("fake", "r")
    load_vocab(model, "fake", "r")
    if damage == "garbage":
        path.write_bytes(b"not an npz file")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        with np.load(path) as saved:
            arrays = dict(saved)
        if damage == "wrong order":
            arrays["order"] = arrays["order"][::-1].copy()
        elif damage == "bytes short":
            arrays["blob"] = arrays["blob"][:-1]
        else:
            arrays["eog"] = arrays["eog"][:-1]
        with path.open("wb") as out:
            np.savez(out, **arrays)
    rebuilt = load_vocab(model, "fake", "r")
    assert model.built == 2
    same(rebuilt, VocabIndex(PIECES, EOG, CONTROL))
    assert load_vocab(model, "fake", "r") is not None and model.built == 2  # written again, whole


def test_an_order_that_is_not_the_pieces_is_refused():
    with pytest.raises(ValueError):
        VocabIndex(PIECES, EOG, CONTROL, order=[1, 2, 3])  # not every non-empty piece
    with pytest.raises(ValueError):
        VocabIndex(PIECES, EOG, CONTROL, order=list(VocabIndex(PIECES, EOG, CONTROL).sorted_ids[::-1]))


def test_an_unwritable_cache_only_costs_the_build(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv(model_files.CACHE_ENV, str(blocked))
    model = FakeModel()
    same(load_vocab(model, "fake", "r"), VocabIndex(PIECES, EOG, CONTROL))
    same(load_vocab(model, "fake", "r"), VocabIndex(PIECES, EOG, CONTROL))
    assert model.built == 2


@pytest.mark.model
@pytest.mark.parametrize("name", ["gemma-3-270m", "qwen2.5-coder-0.5b"])
def test_a_real_vocabulary_read_back_is_the_one_built(name, cache, monkeypatch):
    """Every piece of the real 262,144- and 151,936-token vocabularies (NUL bytes, runs of
    spaces, bytes that are not UTF-8) comes back as built, and so does every lookup."""
    from engine.local.llama import RUNTIME, LlamaModel

    monkeypatch.delenv(model_files.CACHE_ENV)  # the models themselves from the user's cache
    path = model_files.resolve_model(name)
    monkeypatch.setenv(model_files.CACHE_ENV, str(cache))
    model = LlamaModel(path, vocab_only=True)
    try:
        built = load_vocab(model, name, RUNTIME)
        assert vocab_path(name, RUNTIME).exists()
        monkeypatch.setattr(model, "pieces", lambda: pytest.fail("built again, not read"))
        read = load_vocab(model, name, RUNTIME)
    finally:
        model.close()
    assert read.size == built.size > 150_000
    same(read, built)
    for remaining in (b"                 max_help_p", b" yesterday", b"\xe2\x80\x94x", b"\n\n\t}"):
        assert read.strict_prefixes_of(remaining) == built.strict_prefixes_of(remaining)
