"""The word-boundary split: examples that pin the definition, properties that hold for any text."""

from hypothesis import given
from hypothesis import strategies as st

from lsp_server.split import is_horizontal_space, is_word_char, split


def test_mid_word_prompt_ends_before_the_boundary_space():
    s = split("Thanks for sending over the draft yest", 38)
    assert (s.prompt, s.required, s.word) == ("Thanks for sending over the draft", " yest", "yest")
    assert s.suffix == ""
    assert s.word_start == 34


def test_punctuation_ends_a_word():
    for text, word in [("{re", "re"), ("foo.ba", "ba"), ('print("hel', "hel"), ("a-b", "b"), ("(x", "x")]:
        s = split(text, len(text))
        assert s.word == word
        assert s.prompt == text[: -len(word)]
        assert s.required == word


def test_no_partial_word_requires_the_trailing_whitespace():
    s = split("def f(x):\n    ", 14)
    assert (s.prompt, s.required, s.word) == ("def f(x):\n", "    ", "")
    s = split("hello \t", 7)
    assert (s.prompt, s.required, s.word) == ("hello", " \t", "")
    s = split("f(", 2)
    assert (s.prompt, s.required, s.word) == ("f(", "", "")


def test_line_break_is_not_horizontal_whitespace():
    s = split("one\ntwo", 7)
    assert (s.prompt, s.required) == ("one\n", "two")
    s = split("one\r\n", 5)
    assert (s.prompt, s.required) == ("one\r\n", "")


def test_unicode_words():
    s = split("naïve café crème brû", 20)
    assert s.word == "brû"
    s = split("e\u0301t", 3)  # decomposed é: the combining mark belongs to the word
    assert s.word == "e\u0301t"
    s = split("x = 😀ab", 7)  # an emoji is not a word character
    assert (s.prompt, s.word) == ("x = 😀", "ab")
    s = split("日本語のテキ", 6)
    assert s.word == "日本語のテキ" and s.prompt == ""
    s = split("a\u00a0b", 3)  # no-break space is horizontal whitespace
    assert (s.prompt, s.required) == ("a", "\u00a0b")


def test_suffix_is_the_rest_of_the_line():
    s = split("call(fo)\nnext", 7)
    assert (s.word, s.suffix) == ("fo", ")")
    s = split("ab\r\ncd", 1)
    assert s.suffix == "b"


def test_cursor_is_clamped():
    assert split("abc", 99).cursor == 3
    assert split("abc", -5).cursor == 0
    assert split("", 0) == split("", 3)


texts = st.text(st.characters(min_codepoint=0, max_codepoint=0x1FFFF), max_size=40) | st.text(
    " \t\nab_.(é1😀\u0301", max_size=40
)
word_chars = st.characters(min_codepoint=0, max_codepoint=0x1FFFF).filter(is_word_char)


@given(texts, st.integers(-2, 45))
def test_parts_rebuild_the_text(text, cursor):
    s = split(text, cursor)
    c = max(0, min(cursor, len(text)))
    assert s.prompt + s.required == text[:c]
    assert s.required.endswith(s.word)
    assert all(is_word_char(ch) for ch in s.word)
    assert all(is_horizontal_space(ch) for ch in s.required[: len(s.required) - len(s.word)])
    assert text[c:].startswith(s.suffix) and "\n" not in s.suffix and "\r" not in s.suffix
    assert text[s.word_start : c] == s.word


@given(texts, st.integers(0, 45))
def test_boundary_is_maximal(text, cursor):
    s = split(text, cursor)
    assert not (s.prompt and is_horizontal_space(s.prompt[-1]))
    if not s.required[: len(s.required) - len(s.word)]:  # no whitespace: the word is maximal
        assert not (s.prompt and is_word_char(s.prompt[-1]))


@given(texts, word_chars)
def test_typing_a_word_character_leaves_the_prompt_unchanged(text, ch):
    assert split(text + ch, len(text) + 1).prompt == split(text, len(text)).prompt


def test_the_suffix_stops_at_the_line_end_or_max_suffix_characters():
    from lsp_server.split import MAX_SUFFIX

    long_line = "x" * (3 * MAX_SUFFIX)
    assert split("draft yest" + long_line + "\n" + "y" * 10, 10).suffix == long_line[:MAX_SUFFIX]
    assert split("draft yest and more\r\nnext\rline", 10).suffix == " and more"
    assert split("draft yest and more\nnext\rline", 10).suffix == " and more"  # a later \r is not this line's


def test_the_engines_copy_of_the_word_characters_agrees_with_the_servers():
    """engine/core/word_choice.py keeps its own is_word_char (the engine never imports the server): the two
    must not drift apart, or the lexicon would cut words where the server does not."""
    from engine.core.word_choice import is_word_char as engine_is_word_char

    points = [*range(0x10000), *range(0x10000, 0x110000, 97)]  # the BMP, and a sample beyond it
    differ = [hex(p) for p in points if engine_is_word_char(chr(p)) != is_word_char(chr(p))]
    assert differ == []
