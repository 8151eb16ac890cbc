"""Where a multi-line suggestion ends (lsp_server.block): indentation, retyping, brackets, the gate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_server import block as blocks
from lsp_server.block import CLOSE, OPEN, at, context, shape


def cut(document: str, added: str, mode: str = "always", kept: int | None = None) -> str:
    """What is shown of `added` at the `|` of `document`."""
    cursor = document.index("|")
    text = document.replace("|", "", 1)
    block = at(text, cursor, mode)
    assert block is not None, "not multi-line here"
    return shape(added, block, kept)


# --- when a block is expected --------------------------------------------------------------------


def test_a_line_that_opens_a_block_goes_multi_line_in_block_mode():
    assert at("def f(x):", 9, "block") is not None
    assert at("if (x) {", 8, "block") is not None
    assert at("items = [", 9, "block") is not None
    assert at("const f = (a) =>", 16, "block") is not None
    # the line under one, indented, with at most one word typed
    text = "def f(x):\n    ret"
    assert at(text, len(text), "block") is not None
    text = "def f(x):\n    "
    assert at(text, len(text), "block").floor == 4


def test_elsewhere_block_mode_stays_on_one_line():
    assert at("x = 1", 5, "block") is None
    assert at("Thanks for the draft yest", 25, "block") is None
    assert at("def f(x):\n    return x + y", 26, "block") is None  # past the first word
    assert at("def f(x):", 9, "off") is None
    assert at("x = 1", 5, "always") is not None


def test_a_block_that_already_has_a_body_stays_on_one_line():
    text = "def f(x):\n    return x\n"
    assert at(text, 9, "block") is None  # the body is there
    text = "if (x) {\n}\n"
    assert at(text, 8, "block") is not None  # "}" is not inside the block: it is empty


def test_auto_closed_brackets_after_the_cursor_still_open_a_block():
    assert at("f = {}", 5, "block") is not None
    assert at("call(a, )", 8, "block") is None  # "," ends no line that opens a block


# --- rule 1: indentation ---------------------------------------------------------------------------


def test_the_first_line_indented_less_ends_the_block():
    added = "\n    y = x * 2\n    return y\n\ndef g():\n    pass"
    assert cut("def f(x):|", added, "block") == "\n    y = x * 2\n    return y"


def test_block_mode_under_an_opener_needs_an_indented_body():
    assert cut("def f(x):|", "\nprint(1)", "block") == ""


def test_always_mode_ends_with_the_block_the_cursor_is_in():
    document = "def f(x):\n    y = 1|"
    assert cut(document, "\n    z = 2\nprint(z)") == "\n    z = 2"
    assert cut(document, " + 1\n    return y") == " + 1\n    return y"


def test_blank_lines_do_not_end_a_block_but_are_not_shown_at_the_end():
    assert cut("def f(x):|", "\n    a = 1\n\n    b = 2\n\n", "block") == "\n    a = 1\n\n    b = 2"


# --- rule 2: retyping ------------------------------------------------------------------------------


def test_a_line_already_after_the_cursor_ends_the_suggestion():
    document = "def f(x):\n    y = x|\n    return y\n"
    assert cut(document, " + 1\n    return y\n") == " + 1"


def test_a_closing_brace_after_the_cursor_is_not_typed_again():
    document = "if (x) {\n    |\n}\n"
    assert cut(document, "run();\n    stop();\n}\n", "block") == "run();\n    stop();"


# --- rule 3: brackets --------------------------------------------------------------------------------


def test_no_bracket_the_text_after_already_closes():
    assert cut("foo(|)", "a, b)") == "a, b"
    assert cut("x = [1, |]", "2, 3]") == "2, 3"


def test_a_bracket_nothing_after_closes_may_be_closed():
    assert cut("foo(|", "a, b)") == "a, b)"


def test_nothing_left_open_that_the_suggestion_opened():
    assert cut("x = 1|", "\ny = foo(a,\n        b") == "\ny = foo"
    assert cut("x = 1|", "\ny = 2\nz = foo(a,\n  b") == "\ny = 2"


def test_a_mismatched_closer_ends_it():
    assert cut("foo(|", "a]") == "a"
    assert cut("x = |", "(a]") == ""


def test_brackets_in_strings_and_comments_do_not_count():
    assert cut("x = |", '"(" + y') == '"(" + y'
    assert cut("x = |", "y  # (note\nz = 1") == "y  # (note\nz = 1"
    assert cut('s = "a (|', 'b"') == 'b"'  # the cursor in a string: its bracket is text
    assert cut("c = {color: |", "#fff}") == "#fff}"  # "#fff" is no comment


# --- rule 4: the confidence gate, per line -------------------------------------------------------------


def test_the_gate_keeps_whole_lines_after_the_first():
    added = "\n    a = 1\n    b = 2\n    c = 3"
    assert cut("def f():|", added, "block", kept=len("\n    a = 1\n    b =")) == "\n    a = 1"
    assert cut("def f():|", added, "block", kept=len("\n    a =")) == "\n    a ="  # the first line: as kept


def test_no_block_is_left_open_at_the_end():
    # the gate trusts the lines up to `if (!res.ok) {` but not its body: stop before opening it
    body = "\n  const res = await fetch(url);\n  if (!res.ok) {\n    throw new Error(res.status);\n  }"
    kept = len("\n  const res = await fetch(url);\n  if (!res.ok) {\n    thr")
    assert cut("async function load(url) {|", body, "block", kept=kept) == "\n  const res = await fetch(url);"
    assert cut("async function load(url) {|", body, "block") == body  # whole, the block is closed
    # a budget cut inside a Python block (no bracket to balance): the same
    assert cut("def f(x):|", "\n    y = x + 1\n    if y:", "block") == "\n    y = x + 1"
    assert cut("def f(x):|", "\n    if y:\n        for z in y:", "block") == ""  # nothing but openers
    assert cut("def f(x):|", "\n    y = g(  # open:\n        x)", "block") == "\n    y = g(  # open:\n        x)"


def test_the_cursors_own_line_may_end_with_an_opener():
    assert cut("if x|", ":\n    y = 1", "always", kept=len(":")) == ":"
    assert blocks.opens_block("  if (!res.ok) {") and blocks.opens_block("if x:") and blocks.opens_block("f = () =>")
    assert not blocks.opens_block("x = 1  # see:") and not blocks.opens_block('a = "{"')


# --- properties ------------------------------------------------------------------------------------------

code = st.text(alphabet="ab (){}[]\n :,'\"#", max_size=60)


def balance(text: str, quote: str = "") -> tuple[list[str], int]:
    """(brackets left open, brackets closed below the text's own start) with the module's lexer."""
    scanner = blocks._Scanner(quote)
    own: list[str] = []
    below = 0
    for ch in text:
        b = scanner.step(ch)
        if b in OPEN:
            own.append(b)
        elif b in CLOSE:
            if own:
                own.pop()
            else:
                below += 1
    return own, below


@settings(max_examples=400, deadline=None)
@given(code, code, code)
def test_shape_is_a_prefix_that_leaves_nothing_open_and_closes_only_what_is_free(before, added, after):
    text = before + after
    block = context(text, len(before))
    shown = shape(added, block)
    assert added.startswith(shown)
    own, below = balance(shown, block.quote)
    assert own == []  # every bracket it opened is closed
    assert below <= len(block.open_before) - block.closed_after  # none the text after closes
    lines = shown.split("\n")
    for line in lines[1:]:
        if line.strip():
            assert blocks.indent_of(line) >= block.floor
            assert line.strip() != block.next_line
    assert len(lines) == 1 or not blocks.opens_block(lines[-1])  # no block left open at the end


@settings(max_examples=200, deadline=None)
@given(code, code, st.integers(0, 80))
def test_the_gate_only_shortens(before, added, kept):
    block = context(before, len(before))
    full = shape(added, block)
    gated = shape(added, block, kept)
    assert full.startswith(gated)
    assert len(gated) <= max(kept, 0) or gated == full


def test_a_line_cut_back_to_balance_that_now_retypes_the_next_line_is_dropped():
    """Found by the property above: `,[` cut back to `,` (the open bracket dropped) reads as the
    line after the cursor, `,`; so it goes too."""
    block = context("\n,", 0)
    assert shape("\n,[", block) == ""


# --- the next line, at a line's end --------------------------------------------------------------


def test_a_line_end_with_something_on_the_line_may_get_the_next_line():
    assert blocks.ends_line("x = 1", 5)
    assert blocks.ends_line("x = 1  \ny = 2", 5)  # spaces after the cursor count as nothing
    assert not blocks.ends_line("foo()", 4)  # text after the cursor on its line
    assert not blocks.ends_line("x = 1\n    ", 10)  # an empty line: its own first line is the line
    assert not blocks.ends_line("", 0)


def below(document: str, added: str, kept: int | None = None) -> str:
    cursor = document.index("|")
    text = document.replace("|", "", 1)
    return shape(added, blocks.below(text, cursor), kept)


def test_the_next_line_is_one_line_at_any_indentation():
    assert below("function f() {\n  return x;|", "\n}\n\nfunction g() {") == "\n}"
    assert below("    a = 1|", "\n    b = 2\n    c = 3") == "\n    b = 2"
    assert below("a = 1|", "\n\nb = 2\nc") == "\n\nb = 2"  # through a blank line


def test_the_next_line_may_open_a_block_but_never_retypes_or_closes_twice():
    assert below("}|", "\nfunction g() {\n  return 1;") == "\nfunction g() {"
    assert below("x = 1|\ny = 2", "\ny = 2\nz") == ""  # already the next line
    assert below("if (a) {\n  x();|\n}", "\n}") == ""  # the text after already closes it
    assert below("a = 1|", "\nb = compute(1, 2)", kept=len("\nb = compute")) == "\nb = compute"


def test_only_block_mode_goes_on_to_the_next_line():
    assert blocks.next_line_at("x = 1", 5, "block")
    assert not blocks.next_line_at("x = 1", 5, "off")
    assert not blocks.next_line_at("x = 1", 5, "always")  # there the suggestion is multi-line anyway
