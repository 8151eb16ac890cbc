"""Which FIM layout a request gets (lsp_server.suggestion.fim_order_at): the cursor's line in the
middle while a line is written with text after the cursor, PSM where that saves nothing or
misleads the model."""

from __future__ import annotations

from lsp_server.split import split
from lsp_server.suggestion import fim_order_at


def order(before: str, after: str) -> str:
    return fim_order_at(split(before + after, len(before), after_lines=8), "psm-line")


def test_a_line_being_written_above_other_text_keeps_its_line_in_the_middle():
    assert order("def f(x):\n    total = comp", "\n    return total\n") == "psm-line"
    assert order("def f(x):\n    total = ", "\n    return total\n") == "psm-line"


def test_nothing_after_the_cursor_is_psm():
    assert order("def f(x):\n    total = comp", "") == "psm"
    assert order("def f(x):\n    total = comp", "\n\n  \n") == "psm"  # blank lines only


def test_the_end_of_a_finished_line_is_psm():
    assert order("if (!res.ok) {", "\n}\n") == "psm"
    assert order("if (!res.ok) {", " // note\n}\n") == "psm-line"  # text after it on its line


def test_other_orders_are_kept():
    assert fim_order_at(split("x = comp", 8, after_lines=8), "spm") == "spm"
    assert fim_order_at(split("x = comp", 8, after_lines=8), "psm") == "psm"
