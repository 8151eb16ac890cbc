"""The benchmarks ask through the language server's pipeline (tests.support.asking) and, with the stages
they leave out turned off, send the engine the request they sent when they built it from the
split themselves, and show the same suggestion: their results stay comparable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import Completion, CompletionRequest, DecodeStats
from lsp_server.settings import Settings
from lsp_server.split import split
from lsp_server.suggestion import request_for, suggestion_for
from tests.support.asking import alone, asked, one_line, shown
from tests.support.cases import build_cases


@pytest.fixture(scope="module")
def documents() -> list[tuple[str, int]]:
    """(text, cursor): at the end of mid-word cases, and inside a text that goes on after the cursor."""
    cases = build_cases(3, seed=0)
    ends = [(c.document(), len(c.document())) for c in cases]
    inside = [(c.document() + "\n    more text after\nand more\n", len(c.document())) for c in cases]
    code = [("def f(x):\n    if x:\n", 20), ("int main() {\n", 12)]
    return ends + inside + code


def same(request: CompletionRequest) -> CompletionRequest:
    """A request with the engine-neutral fields as the old code left them ("" and None route alike)."""
    return replace(request, language=None, document=None)


@pytest.mark.parametrize("method", ["exact", "mask"])
def test_one_stage_alone_asks_as_the_split_and_request_did(documents, method):
    settings = Settings(max_tokens=8, method=method)
    for text, cursor in documents:
        old = replace(request_for(split(text, cursor), settings), exact=method == "exact")
        assert same(asked(text, cursor, alone(settings)).request) == old


def test_the_text_after_the_cursor_and_the_gate_kept_as_before(documents):
    """bench.fim_reuse keeps its lines after the cursor; bench.gate_signals the model's gate too."""
    for lines in (0, 8):
        settings = Settings(max_tokens=8, fim_suffix_lines=lines)
        for text, cursor in documents:
            old = request_for(split(text, cursor, lines or None), settings)
            assert same(asked(text, cursor, alone(settings, fim_suffix_lines=lines)).request) == old
    settings = Settings()
    for text, cursor in documents:
        old = request_for(split(text, cursor, settings.fim_suffix_lines or None), settings)
        kept = alone(settings, min_confidence=None, fim_suffix_lines=settings.fim_suffix_lines)
        assert same(asked(text, cursor, kept).request) == old


def test_one_line_keeps_the_other_settings(documents):
    """bench.crossfile_why: the server's settings, one line."""
    settings = Settings(max_tokens=16, min_confidence=0.0, alternatives=0)
    for text, cursor in documents:
        old = request_for(split(text, cursor, settings.fim_suffix_lines or None), settings)
        assert same(asked(text, cursor, one_line(settings)).request) == old


def test_the_suggestion_shown_is_the_one_suggestion_for_made(documents):
    settings = alone(Settings(max_tokens=8))
    for text, cursor in documents:
        step = asked(text, cursor, settings)
        parts = step.snapshot.parts
        for added in ("terday and more", "x\nnext line", "", " ", "ly);"):
            completion = Completion(parts.required + added, "eos", DecodeStats())
            old = suggestion_for(parts, completion)
            assert shown(step, completion) == old
