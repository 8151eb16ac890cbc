"""The engine's end of a multi-line completion: the first later line indented below the floor."""

from engine import CompletionRequest, SamplingConfig
from engine.core.generation import _dedent, cut_text


def test_dedent_is_the_line_break_before_the_first_shallower_line():
    assert _dedent("x\n    a\n  b\n", 4) == len("x\n    a")
    assert _dedent("x\n    a\n\n    b", 4) is None  # blank lines never end a block
    assert _dedent("x\n  ", 4) is None  # not yet: the line has nothing on it
    assert _dedent("\nreturn", 1) == 0
    assert _dedent("only one line", 4) is None  # the cursor's own line never ends it


def test_cut_ends_a_multi_line_completion_at_the_block_end():
    multi = CompletionRequest("p", sampling=SamplingConfig(single_line=False), indent_floor=4)
    assert cut_text(":\n    a = 1\nb = 2", 0, multi) == (":\n    a = 1", "block")
    assert cut_text(":\n    a = 1\n    b", 0, multi) is None
    single = CompletionRequest("p", indent_floor=4)  # single-line: the line break wins
    assert cut_text(":\n    a = 1", 0, single) == (":", "line")


def test_next_line_goes_on_past_a_line_the_model_ends_at_once():
    at_end = CompletionRequest("p", next_line=True)
    assert cut_text("\n    return x\n}", 0, at_end) == ("\n    return x", "line")
    assert cut_text("\n\n}\n", 0, at_end) == ("\n\n}", "line")  # blank lines are passed over
    assert cut_text("\n    ret", 0, at_end) is None  # the next line may still grow
    assert cut_text("  \r\n  x\r\n", 0, at_end) == ("  \r\n  x", "line")
    # a first line with something on it ends at its line break, as without next_line
    assert cut_text("x;\n    y", 0, at_end) == ("x;", "line")
    # counted after the required prefix: "ret" + "urn" is the first line
    assert cut_text("return\n  x", 3, at_end) == ("return", "line")
    assert cut_text("   \n  x\n", 3, at_end) == ("   \n  x", "line")
