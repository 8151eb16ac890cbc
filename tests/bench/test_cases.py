"""The quality case builder: reproducible, large enough, and always cut strictly inside a word."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from lsp_server.split import is_word_char, split
from tests.support.cases import CONTEXT_CHARS, KINDS, MIN_BYTES, Case, build_cases, fingerprint, read_text, words

PER_KIND = 50


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return build_cases(PER_KIND, seed=0)


def test_at_least_200_cases_from_every_kind(cases):
    assert len(cases) >= 200
    assert Counter(c.kind for c in cases) == {kind: PER_KIND for kind in KINDS}


def test_the_same_seed_builds_the_same_cases(cases):
    again = build_cases(PER_KIND, seed=0)
    assert again == cases
    assert fingerprint(again) == fingerprint(cases)


def test_another_seed_builds_other_cases(cases):
    assert fingerprint(build_cases(PER_KIND, seed=1)) != fingerprint(cases)


def test_every_case_is_cut_strictly_inside_a_whole_word(cases):
    for case in cases:
        text = read_text(Path(case.file))
        end = case.word_start + len(case.word)
        assert text[case.word_start : end] == case.word
        assert case.word_start < case.offset < end, case
        assert case.word_start == 0 or not is_word_char(text[case.word_start - 1]), case
        assert end == len(text) or not is_word_char(text[end]), case
        assert any(ch.isalpha() for ch in case.word)


def test_the_document_ends_at_the_cursor_and_the_server_split_finds_the_typed_part(cases):
    for case in cases:
        document = case.document()
        assert document.endswith(case.typed)
        assert (
            case.context_start == 0
            or read_text(Path(case.file))[case.context_start - 1] == "\n"
            or (case.offset - case.context_start > CONTEXT_CHARS)
        )
        parts = split(document, len(document))
        assert parts.word == case.typed
        assert parts.prompt + parts.required == document


def test_each_case_comes_from_its_own_usable_file(cases):
    assert len({c.file for c in cases}) == len(cases)
    assert all(Path(c.file).stat().st_size >= MIN_BYTES for c in cases)


def test_words_are_maximal_runs_with_a_letter():
    text = "x = foo_bar(42, é́tude) + a1"
    found = [text[s:e] for s, e in words(text)]
    assert found == ["foo_bar", "é́tude", "a1"]  # "x" is too short, "42" has no letter
    assert [text[s:e] for s, e in words(text, 5)] == ["é́tude", "a1"]  # never starts mid-word
