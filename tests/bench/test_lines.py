"""The line replay's rules (bench/lines.py): what a user takes, and what counts as a broken suggestion."""

from bench.lines import accepted_lines, retypes, unbalances, unmatched


def test_whole_lines_only_each_exactly_right_to_its_end():
    rest = "x = 1\n    y = 2\n    z = 3\n"
    assert accepted_lines("x = 1", rest) == (5, 1)
    assert accepted_lines("x = 1\n    y = 2\n    w", rest) == (len("x = 1\n    y = 2"), 2)
    assert accepted_lines("x = ", rest) == (0, 0)  # the line goes on: not exactly right
    assert accepted_lines("x = 10", rest) == (0, 0)
    assert accepted_lines("\n    y = 2", "\n    y = 2") == (len("\n    y = 2"), 1)  # from a line end
    assert accepted_lines("", rest) == (0, 0)


def test_brackets_are_compared_with_and_without_the_insertion():
    assert unmatched("f(a, [b]) # (") == 0
    assert unmatched('s = "(" + x)') == 1
    assert unbalances("foo(", "a, b)", ")\n")  # closes what the text after already closes
    assert not unbalances("foo(", "a, b", ")\n")
    assert not unbalances("foo(", "a, b)", "\n")  # nothing after closes it: closing it is right
    assert unbalances("x = ", "bar(1,\n  2", "\n")  # leaves one open


def test_retyping_the_next_line():
    assert retypes("1\n    return y", "\n    return y\n")
    assert not retypes("1\n    return x", "\n    return y\n")
    assert not retypes("return y", "\n    return y\n")  # the cursor's own line is not a retype


def test_the_word_rule_takes_the_next_word_when_it_is_exactly_right():
    from bench.lines import _Tally

    tally = _Tally(words=True)
    assert tally.step("the draft yest", "", "erday I said", "erday. I'm") == len("erday")
    assert tally.step("the draft yest", "", "erday I said", "ersome") == 1  # wrong: one letter typed
    assert (tally.accepts, tally.accepted, tally.typed, tally.lines) == (1, 5, 1, 0)
