"""The cold bound on other files' text, enforced where the prompt is tokenized (engine.Engine).

The server sizes its choice by an estimate of the current file's tokens (lsp_server.context
.budget_for, 4 characters a token); prose runs at more characters a token, so the estimate can
run over. The engine counts the file's tokens before the cursor's line with the model's own
tokenizer and caps the context at half of them or COLD_EXTRA_TOKENS, whichever is more (a cold
request costs at most 1.5x, or a short file's few hundred milliseconds more), and keeps
the budget a context was laid out with while it stays within that bound (no new layout while
the user types down the file)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine import COLD_EXTRA_TOKENS, CompletionRequest, ContextFile, Engine, EngineConfig, RepoContext
from engine.backend import PromptSpeed
from engine.local.load import MAX_REMEMBERED
from engine.prompt_window import cold_cap, cold_extra
from engine.types import COLD_EXTRA_MS, LEAN_MIN_TOKENS


def fake_engine(n_ctx: int = 2048, pieces: list[bytes] | None = None) -> Engine:
    engine = Engine.__new__(Engine)
    engine._context = SimpleNamespace(n_ctx=n_ctx)
    engine._context_budgets = __import__("collections").OrderedDict()
    engine._speed = PromptSpeed()
    engine._lean_budgets = __import__("collections").OrderedDict()
    engine._bos = [0]
    engine.vocab = SimpleNamespace(pieces=pieces or [b""])
    return engine


def test_the_cap_is_half_the_files_tokens_or_the_short_files_floor_until_they_fill_two_thirds_of_the_window():
    assert cold_cap(0, 2048) == COLD_EXTRA_TOKENS  # a new file: what a cold decode of that many costs, not 0
    assert cold_cap(301, 2048) == COLD_EXTRA_TOKENS  # half of 301 is less than the floor
    assert cold_cap(2 * COLD_EXTRA_TOKENS + 1, 2048) == COLD_EXTRA_TOKENS
    assert cold_cap(2 * COLD_EXTRA_TOKENS + 2, 2048) == COLD_EXTRA_TOKENS + 1  # from here, half the file's tokens
    assert cold_cap(1365, 2048) == 682
    assert cold_cap(1366, 2048) is None  # 1.5 x 1366 >= 2048: the prompt is at most the window either way
    assert cold_cap(100, 2048, 75) == 75  # a first answer's: what the timed speed buys (cold_extra)
    assert cold_cap(400, 2048, 75) == 200


def test_a_first_answers_extra_tokens_are_what_300_ms_evaluate_at_the_fastest_timed_speed():
    speed = PromptSpeed()
    assert cold_extra(speed.ms_per_token) == LEAN_MIN_TOKENS  # nothing timed yet
    speed.note(8, 8.0)  # a keystroke's few tokens time the call, not the model: not taken
    assert speed.ms_per_token is None
    speed.note(64, 640.0)  # 10 ms a token (timed on a busy machine): still a definition or two
    assert cold_extra(speed.ms_per_token) == LEAN_MIN_TOKENS
    speed.note(64, 281.0)  # 4.4 ms a token
    assert cold_extra(speed.ms_per_token) == int(COLD_EXTRA_MS / (281 / 64)) == 68
    speed.note(128, 1280.0)  # slower (a busy moment): the bound does not fall
    assert cold_extra(speed.ms_per_token) == 68
    speed.note(100, 400.0)  # 4 ms a token
    assert cold_extra(speed.ms_per_token) == 75
    speed.note(1000, 100.0)  # a fast machine: never more than the whole prompt's floor
    assert cold_extra(speed.ms_per_token) == COLD_EXTRA_TOKENS


def test_the_files_tokens_are_counted_to_the_start_of_the_cursors_line():
    pieces = [b"<bos>", b"ab", b"c\n", b"  ", b"x", b"\n  ", b"yz", b"cx"]
    engine = fake_engine(pieces=pieces)
    assert engine._before_line("abc\n  x", (0, 1, 2, 3, 4)) == 2  # "ab", "c\n"
    assert engine._before_line("abc\n  x", (0, 1, 2, 3)) == 2  # the same for every keystroke of the line
    assert engine._before_line("abcx\n  yz", (0, 1, 7, 5, 6)) == 2  # a token across the line's start is not counted
    assert engine._before_line("abc", (0, 1)) == 0  # the first line: nothing before it


def test_a_context_keeps_its_budget_while_the_file_grows_and_gets_a_new_one_when_the_bound_falls():
    engine = fake_engine()
    context = RepoContext((ContextFile("a.py", "x = 1\n"),), path="b.py", max_tokens=512)
    assert engine.context_budget(context, 700) == 350
    assert engine.context_budget(context, 820) == 350  # more lines typed: the layout stays (no whole decode per line)
    assert engine.context_budget(context, 600) == 300  # the cursor moved up: the bound is kept
    assert engine.context_budget(context, 2000) == 300
    assert engine.context_budget(context, 100) == COLD_EXTRA_TOKENS  # up to the first lines: the short file's floor
    other = RepoContext(context.files, path="b.py", max_tokens=576)  # the server's next choice, at its own step
    assert engine.context_budget(other, 2000) == 576
    assert engine.context_budget(RepoContext(context.files, max_tokens=4096), 2000) == 1024  # half the window at most
    assert engine.context_budget(context, None) == 512  # no current file to bound it by
    for n in range(2 * MAX_REMEMBERED):
        engine.context_budget(RepoContext(context.files, path=f"{n}.py"), 100)
    assert len(engine._context_budgets) == MAX_REMEMBERED + 1


def test_a_first_answers_lean_budget_is_kept_for_its_context_when_a_faster_speed_is_timed():
    engine = fake_engine()
    context = RepoContext((ContextFile("a.py", "x = 1\n"),), path="b.py", max_tokens=512)
    assert engine._lean_budget(context, 40) == LEAN_MIN_TOKENS  # nothing timed yet
    engine._speed.note(64, 200.0)  # 3.125 ms a token: 300 ms evaluate 96
    assert engine._lean_budget(context, 40) == LEAN_MIN_TOKENS  # laid out already: the keystrokes reuse it
    assert engine._lean_budget(RepoContext(context.files, path="c.py"), 40) == 96  # a new context: the new speed
    assert engine._lean_budget(RepoContext(context.files, path="d.py"), 400) == 200  # half the file's tokens is more


LICENCE = (
    "/*\n"
    + "".join(
        f" * Permission is hereby granted, free of charge, to any person obtaining a copy of this software {n}\n"
        for n in range(41)
    )
    + ' */\n\n#include "helpers.h"\n\nint main(void)\n{\n    '
)
HELPERS = "".join(f"int helper_number_{n}(int value, const char *name);\n" for n in range(80))


@pytest.mark.model
def test_a_cold_request_costs_at_most_one_and_a_half_times_on_a_licence_that_runs_long_per_token():
    from lsp_server.context import budget_for

    engine = Engine.load(EngineConfig(model_path="qwen2.5-coder-0.5b", threads=1))
    try:
        budget = budget_for(LICENCE, len(LICENCE), 1024, engine.n_ctx)
        assert budget > 0
        context = RepoContext((ContextFile("helpers.h", HELPERS),), path="main.c", name="proj", max_tokens=budget)

        def prompt(text: str, ctx: RepoContext | None) -> tuple[int, ...]:
            request = CompletionRequest(text, suffix="\n}\n", context=ctx)
            return engine.request_prompt(request)

        off, on = prompt(LICENCE, None), prompt(LICENCE, context)
        # the server's estimate (4 characters a token) runs over on this prose: uncapped, the context
        # would take its whole budget, more than half the file's tokens
        assert (
            budget > (engine.count_tokens(LICENCE) - 1) / 2 > COLD_EXTRA_TOKENS
        )  # (long enough for the share to bind)
        assert len(on) <= 1.5 * len(off), (len(on), len(off), budget)
        # the words typed on the line keep the context's tokens (the prompt's start) as they are
        typed = LICENCE + "int total = helper_number_3(1, "
        assert prompt(typed, context)[: len(on) - 8] == on[: len(on) - 8]
    finally:
        engine.close()
