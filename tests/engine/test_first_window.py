"""First contact on the real model: a prompt mostly not decoded is answered from the text near the
cursor (`CompletionRequest.first_window`), a short file's from a lean share of other files' text,
while the whole prompt decodes behind it in another sequence; once it has, the answers are the
whole prompt's again, exactly (engine.Engine.first_prompt)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import COLD_EXTRA_TOKENS, CompletionRequest, ContextFile, RepoContext
from engine.prompt_window import cold_extra
from tests.engine.test_first_contact import CancelAfter

pytestmark = pytest.mark.model

PYTHON = (
    "".join(
        f"def handler_{i}(request, session):\n    value = request.args.get('key_{i}')\n"
        f"    if value is None:\n        return session.reply(404)\n    return session.reply(value)\n\n"
        for i in range(14)
    )
    + "def handler_14(request, session):\n    value = request.args.get('key_14')\n    if value is None:\n       "
)
WINDOW = 64  # small, so the whole prompt (~570 tokens) is well over twice it


def test_a_cold_prompt_is_answered_near_the_cursor_then_from_the_whole_prompt_once_prefetched(model_engine):
    model_engine.kv.forget()
    ask = CompletionRequest(prompt=PYTHON, required=" ret", max_tokens=4, first_window=WINDOW)
    first = model_engine.complete(ask)
    assert first.stats.first_prompt == "near"
    assert (
        WINDOW <= first.stats.prompt_tokens <= 1.5 * WINDOW + 2
        and first.stats.decoded_tokens == first.stats.prompt_tokens
    )
    typed = model_engine.complete(replace(ask, required=" retu"))  # the next keystroke reuses the near window
    assert typed.stats.first_prompt == "near" and typed.stats.decoded_tokens <= 2

    whole = model_engine.prefetch(ask)  # what the server runs after a first-window answer, while the user reads
    assert whole.finished and whole.decoded_tokens >= whole.prompt_tokens - 2 > 4 * WINDOW
    after = model_engine.complete(replace(ask, required=" retu"))
    assert after.stats.first_prompt is None and after.stats.decoded_tokens <= 2
    assert model_engine.kv.cached_prefix(model_engine.prompt_tokens(ask, 0)) >= whole.prompt_tokens - 1

    model_engine.kv.forget()
    cold = model_engine.complete(replace(ask, required=" retu", first_window=0))
    assert cold.stats.first_prompt is None and cold.stats.decoded_tokens > 4 * WINDOW
    assert cold.text == after.text  # the whole prompt's answer, as if it had been decoded cold


def test_a_prompt_mostly_decoded_or_the_setting_off_uses_the_whole_prompt(model_engine):
    model_engine.kv.forget()
    ask = CompletionRequest(prompt=PYTHON, required=" ret", max_tokens=2, first_window=0)
    assert model_engine.complete(ask).stats.first_prompt is None  # off
    edited = replace(ask, prompt=PYTHON.replace("key_13", "key_thirteen"), first_window=WINDOW)
    assert model_engine.complete(edited).stats.first_prompt is None  # an edit near the end: little to decode


HELPERS = "".join(f"int helper_number_{n}(int value, const char *name);\n" for n in range(40))
SHORT = '#include "helpers.h"\n\nint main(void)\n{\n    int total = helper_number_3(1, "a");\n    return'


def test_a_short_files_first_answer_waits_for_a_lean_share_of_the_context_and_the_whole_comes_behind(model_engine):
    model_engine.kv.forget()
    model_engine.complete(CompletionRequest(prompt=PYTHON[:1500], required=" ret", max_tokens=1))  # a prompt timed
    context = RepoContext((ContextFile("helpers.h", HELPERS),), path="main.c", name="proj", max_tokens=1024)
    ask = CompletionRequest(prompt=SHORT, required=" to", max_tokens=3, context=context, first_window=256)
    alone = len(model_engine.prompt_tokens(replace(ask, context=None), 0))
    whole = len(model_engine.prompt_tokens(ask, 0))
    assert whole - alone > COLD_EXTRA_TOKENS - 40  # the short file's whole context: about 256 tokens
    first = model_engine.complete(ask)
    extra = cold_extra(model_engine.kv.speed.ms_per_token)
    assert first.stats.first_prompt == "lean", first.stats
    assert first.stats.prompt_tokens - alone <= extra + 16  # what 300 ms evaluate, and the file's frame

    assert not model_engine.prefetch(ask, CancelAfter(1)).finished  # the user typed before the whole was decoded
    typed = model_engine.complete(replace(ask, required=" t"))
    assert typed.stats.first_prompt == "lean" and typed.stats.decoded_tokens <= 2, typed.stats  # kept till then

    assert model_engine.prefetch(ask).finished  # the whole prompt behind it
    after = model_engine.complete(replace(ask, required=" tot"))
    assert after.stats.first_prompt is None and after.stats.prompt_tokens == whole, after.stats
    assert after.stats.decoded_tokens <= 2


def test_where_no_first_answer_can_come_a_short_files_whole_prompt_holds_the_lean_share(model_engine):
    """Prefetch off (first_window 0), or a model server's one slot: the request waits for its whole
    prompt, so that prompt's context is bounded in time as a first answer's is."""
    model_engine.kv.forget()
    model_engine.complete(CompletionRequest(prompt=PYTHON[:1500], required=" ret", max_tokens=1))  # a prompt timed
    context = RepoContext((ContextFile("helpers.h", HELPERS),), path="main.c", name="proj", max_tokens=1024)
    ask = CompletionRequest(prompt=SHORT, required=" to", max_tokens=3, context=context, first_window=0)
    alone = len(model_engine.prompt_tokens(replace(ask, context=None), 0))
    extra = cold_extra(model_engine.kv.speed.ms_per_token)
    waited = model_engine.complete(ask)
    assert waited.stats.first_prompt is None and waited.stats.decoded_tokens == waited.stats.prompt_tokens
    assert extra - 40 <= waited.stats.prompt_tokens - alone <= extra + 16, (waited.stats, extra)
    assert extra < COLD_EXTRA_TOKENS - 40  # (the bound binds: the whole context is about 256 tokens)
    assert len(model_engine.request_prompt(replace(ask, first_window=256))) - alone > COLD_EXTRA_TOKENS - 40


def test_the_near_window_keeps_its_start_while_the_text_grows():
    from engine.prompt_window import PromptWindow

    window = PromptWindow.__new__(PromptWindow)
    window._bos = [1]
    tokens = tuple(range(1, 301))  # BOS and 299 tokens
    starts = set()
    for n in range(200, 301):
        kept = window.first_window(tokens[:n], 64)
        assert kept[0] == 1 and 64 <= len(kept) - 1 < 96
        starts.add(kept[1])
    assert len(starts) <= (300 - 200) // 32 + 1  # it moves in steps of half the window
    assert window.first_window(tokens[:40], 64) == tokens[:40]  # shorter than the window: all of it
