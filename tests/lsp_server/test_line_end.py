"""A one-line suggestion meets the text after the cursor: trimmed of what retypes it, nothing more."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from engine import Completion, DecodeStats
from lsp_server.line_end import Pairs, meet, through_closers
from lsp_server.split import split
from lsp_server.suggestion import suggestion_for

# (line up to the cursor, what the model adds, the rest of the line, what is inserted)
MIDLINE = [
    # retyped the rest: cut where the retyping begins, the pairs saying which ")" is the user's
    ("    return encode_cyclic(enco", "de_cyclic(s))", ")", "de_cyclic(s)"),
    ("    return len(set(string.lowe", "r()))", ")", "r())"),
    ("    return [x for x in strings if subs", "tring in x]", "in x]", "tring "),
    ("    retur", "n [x for x in values if isinstance(x, int)]", "x in values if isinstance(x, int)]", "n [x for "),
    ("    re", "turn ''.join(strings)", "'.join(strings)", "turn '"),
    # wrote only the missing text: kept whole, though its end looks like the rest's start
    ("    return encode_cyclic(enco", "de_cyclic(s)", ")", "de_cyclic(s)"),
    ("    return len(set(string.lowe", "r())", ")", "r())"),
    ("    return [x for x in strings if subs", "tring ", "in x]", "tring "),
    ("    re", "turn '", "'.join(strings)", "turn '"),
    # stopped partway through retyping the rest (a budget): that part goes
    ("    retur", "n [x for x", "x in values if isinstance(x, int)]", "n [x for "),
    ("    return [x for x in strings if subs", "tring ", " in x]", "tring"),
    ('print("hel', 'lo, world"', '")', "lo, world"),
    # retyped the rest and went on past it: cut where it first reaches the user's text
    ("    return encode_cyclic(enco", "de_cyclic(s)) + 1", ")", "de_cyclic(s)"),
    # nothing of the rest retyped
    ("the draft yest", "erday is", " and the notes", "erday is"),
    ("", "the", "end", "the"),  # a partial retype never begins inside a word
    ("x = fo", "o", "o(a)", "o"),
    ("", "111111 ", "1", "111111 "),  # nor does the rest with a space it lacks (found by hypothesis)
    ("", "abc", "   ", "abc"),
    ("", "terday", "terday", ""),
    ("", '"hi")', ");", '"hi"'),
]


@pytest.mark.parametrize(("before", "added", "rest", "inserted"), MIDLINE)
def test_the_suggestion_meets_the_rest_of_the_line(before, added, rest, inserted):
    assert meet(before, added, rest) == inserted


@pytest.mark.parametrize(("before", "added", "rest", "inserted"), MIDLINE[:5])
def test_through_the_suggestion(before, added, rest, inserted):
    """The same through `suggestion_for`: the line before the cursor is read from the split."""
    text = "def f(s):\n" + before + rest + "\n    pass\n"
    parts = split(text, len("def f(s):\n" + before))
    found = suggestion_for(parts, Completion(parts.required + added, "line", DecodeStats()))
    assert found is not None and found.insert_text == parts.word + inserted
    assert text[: found.word_start] + found.insert_text + text[found.cursor :] == (
        "def f(s):\n" + before + inserted + rest + "\n    pass\n"
    )


def test_pairs():
    assert Pairs().read("f(a[1], 'x)')").errors == 0
    assert Pairs().read("f(a").errors == 1 and Pairs().read("a)").errors == 1
    assert Pairs().read("'it\\'s'").errors == 0 and Pairs().read('"a').errors == 1
    assert Pairs().read("(]").errors == 2  # a closer of the wrong kind pairs with nothing


# --- properties ------------------------------------------------------------------------------

PLAIN = st.text(alphabet=list("ab_x1 .,:;=+-*#é\t"), max_size=6)


def _quoted(inner: str, quote: str) -> str:
    return quote + inner.replace("\\", "").replace(quote, "") + quote


paired = st.recursive(
    PLAIN,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["()", "[]", "{}"]), inner).map(lambda t: t[0][0] + t[1] + t[0][1]),
        st.tuples(inner, st.sampled_from(["'", '"', "`"])).map(lambda t: _quoted(*t)),
        st.lists(inner, min_size=2, max_size=3).map("".join),
    ),
    max_leaves=8,
)


@given(paired, st.data())
def test_missing_text_and_a_repeat_of_the_rest_trims_to_the_missing_text(line, data):
    """Any line whose brackets and quotes pair, split at any two points: the model writes the
    missing text and then retypes the whole rest of the line; exactly the missing text is kept."""
    cut = data.draw(st.integers(0, len(line)))
    end = data.draw(st.integers(cut, len(line)))
    before, missing, rest = line[:cut], line[cut:end], line[end:]
    assume(rest.strip())
    assert meet(before, missing + rest, rest) == missing


@given(paired, st.data())
def test_missing_text_alone_is_kept(line, data):
    """A model that writes only the missing text (a FIM model that saw the rest) keeps it all,
    when its end does not retype the start of the rest (nor the whole rest and a space after it:
    `111:11 ` before `11` reads as the rest retyped, which it may be)."""
    cut = data.draw(st.integers(0, len(line)))
    end = data.draw(st.integers(cut, len(line)))
    before, missing, rest = line[:cut], line[cut:end], line[end:]
    retypes = [rest.startswith(missing[i:]) or missing[i:].rstrip() == rest.rstrip() for i in range(len(missing))]
    assume(rest.strip() and not any(retypes))
    assert meet(before, missing, rest) == missing


ANY = st.text(alphabet=list("ab_ ()[]{}'\"`\\x.,é"), max_size=20)


@given(ANY, ANY, ANY)
def test_the_pairs_never_get_worse_and_only_the_end_is_cut(before, added, rest):
    kept = meet(before, added, rest)
    assert added.startswith(kept)
    assert Pairs().read(before + kept + rest).errors <= Pairs().read(before + added + rest).errors
    if not rest.strip():
        assert kept == added


def test_an_escape_at_the_cursor_holds_across_the_reads():
    """A string ending in a backslash before the cursor: the character after it is escaped, in
    whichever read it comes (found by hypothesis: a backtick after them was cut, as if it closed)."""
    assert Pairs().read("`\\").read("`").quote == "`"
    assert meet("`\\", "`", "`") == "`"


def test_a_gate_cut_mid_line_goes_through_the_closers_the_line_needs():
    assert through_closers("ft(s)", 4, ")") == 5  # "ft(s" before ")" would leave the line short
    assert through_closers("tring ", 5, "in x]") == 6  # and "tring" would glue "substringin"
    assert through_closers("ft(s) + g(x)", 4, ")") == 4  # words left: the gate's cut stands
    assert through_closers("ft(s)", 4, "") == 4  # at the line's end: nothing to meet
