"""The lexicon of open documents: kept edit by edit, equal to a fresh count, and a keystroke never
reads the whole document (5 MB included)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

import lsp_server.document_words as lexicon_module
from lsp_server.document_words import Lexicon
from lsp_server.documents import UTF16, Documents, Range

TEXT = "def value(self):\n    return self.value_of(value)\n# values and valuables\n"


def counts(lexicon: Lexicon) -> Counter:
    return Counter({w: lexicon.count(w) for w in lexicon._total})


def fresh(*texts: str) -> Counter:
    lex = Lexicon()
    for i, text in enumerate(texts):
        lex.opened(str(i), text)
    return counts(lex)


def test_candidates_begin_with_the_typed_word_most_frequent_first():
    lex = Lexicon()
    lex.opened("a", TEXT)
    assert lex.candidates("val") == ("value", "valuables", "value_of", "values")  # then by name
    assert lex.candidates("value") == ("value_of", "values")
    assert lex.candidates("") == () and lex.candidates("zz") == ()
    assert lex.candidates("d") == ("def",)  # one typed letter is enough; one-letter words are not kept
    lex.opened("b", "value value")
    assert lex.count("value") == 4
    lex.closed("b")
    assert lex.count("value") == 2


def test_words_keep_their_combining_marks_as_the_split_does():
    """A decomposed accent and Devanagari's vowel signs are marks: a word keeps them (the split's
    partial word does), instead of being cut into pieces at each one."""
    lex = Lexicon()
    lex.opened("a", "cafe\u0301s हिन्दी naïve")
    assert lex.candidates("caf") == ("cafe\u0301s",)
    assert lex.candidates("हि") == ("हिन्दी",)
    assert lex.candidates("na") == ("naïve",)


def position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(0, 6), st.text("ab _.\n(é1\u0301", max_size=6)),
        max_size=25,
    )
)
def test_edits_keep_the_counts_of_a_fresh_count(edits):
    documents = Documents(lex := Lexicon())
    text = TEXT
    documents.open("file:///a", text, 1)
    for at, length, inserted in edits:
        start = at % (len(text) + 1)
        end = min(len(text), start + length)
        (sl, sc), (el, ec) = position(text, start), position(text, end)
        documents.change("file:///a", None, [(Range(sl, sc, el, ec), inserted)], UTF16)
        text = text[:start] + inserted + text[end:]
    assert documents.get("file:///a").text == text
    assert counts(lex) == fresh(text)
    documents.close("file:///a")
    assert len(lex) == 0


def test_a_whole_text_change_recounts_and_close_forgets():
    documents = Documents(lex := Lexicon())
    documents.open("file:///a", TEXT, 1)
    documents.change("file:///a", 2, [(None, "other words here")], UTF16)
    assert counts(lex) == fresh("other words here")


def test_a_keystroke_in_a_5_mb_document_reads_only_around_the_edit(monkeypatch):
    big = ("alpha beta gamma_delta epsilon\n" * 170_000)[:5_000_000]
    documents = Documents(lex := Lexicon())
    documents.open("file:///big", big, 1)
    betas = lex.count("beta")
    seen: list[int] = []
    original = lexicon_module._words
    monkeypatch.setattr(lexicon_module, "_words", lambda text: seen.append(len(text)) or original(text))
    line = 80_000
    for i, ch in enumerate("omega"):
        documents.change("file:///big", None, [(Range(line, 6 + i, line, 6 + i), ch)], UTF16)
    assert seen and max(seen) < 64
    assert lex.count("omegabeta") == 1 and lex.count("beta") == betas - 1
    assert lex.candidates("omeg") == ("omegabeta",)


def test_nothing_is_counted_while_off_and_turning_it_on_counts_the_open_documents():
    documents = Documents(lex := Lexicon(enabled=False))
    documents.open("file:///a", TEXT, 1)
    documents.change("file:///a", 2, [(Range(0, 0, 0, 0), "valid ")], UTF16)
    assert len(lex) == 0 and lex.candidates("val") == ()
    lex.enable(True, documents.texts())
    assert counts(lex) == fresh("valid " + TEXT)
    lex.enable(False)
    assert len(lex) == 0
