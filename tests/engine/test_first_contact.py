"""First contact on the real model: prompt work survives cancels, several documents stay decoded,
a prefetch warms the next request, and speculative drafts change no greedy token."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine import CompletionRequest, SamplingConfig
from engine.backend import Cancelled
from engine.core.speculative import MAX_VERIFY_ROWS, DraftConfig

pytestmark = pytest.mark.model

PYTHON = "".join(
    f"def handler_{i}(request, session):\n    value = request.args.get('key_{i}')\n"
    f"    if value is None:\n        return session.reply(404)\n    return session.reply(value)\n\n"
    for i in range(14)
)
PROSE = " ".join(
    f"On day {i} the committee met again to review the budget, and the chair asked for comments." for i in range(20)
)


class CancelAfter(threading.Event):
    """A cancel flag that turns true at the check after `chunks` prompt chunks (the first check is
    the one before any decode)."""

    def __init__(self, chunks: int) -> None:
        super().__init__()
        self.checks_left = chunks + 1

    def is_set(self) -> bool:
        self.checks_left -= 1
        return self.checks_left < 0 or super().is_set()


def test_a_cancelled_prompt_keeps_its_chunks_and_the_resumed_rows_are_bitwise_those_of_one_decode(model_engine):
    kv = model_engine.kv
    prompt = model_engine.tokenize(PYTHON)
    assert len(prompt) > 300
    kv.forget()
    whole = np.array(kv.logits_after(prompt))
    kv.forget()
    for chunks in (2, 3):  # two cancelled requests, each stopped after a few chunks
        with pytest.raises(Cancelled):
            kv.logits_after(prompt, CancelAfter(chunks))
    held = kv.held
    assert 64 <= held < len(prompt)
    before = kv.decoded
    resumed = kv.logits_after(prompt)
    assert kv.decoded - before == len(prompt) - held  # resumed, not started again
    assert np.array_equal(resumed, whole)  # chunks end at fixed positions: same bits


def test_coming_back_to_a_document_decodes_only_what_changed(model_engine):
    model_engine.kv.forget()
    greedy = CompletionRequest(prompt=PYTHON, required=" ret", max_tokens=6)
    first = model_engine.complete(greedy)
    for other in (PROSE, "Some other file.\n" * 60):
        model_engine.complete(CompletionRequest(prompt=other, required=" th", max_tokens=4))
    back = model_engine.complete(CompletionRequest(prompt=PYTHON + " return", required=" val", max_tokens=6))
    assert back.stats.decoded_tokens <= 3 and back.stats.reused_tokens >= first.stats.prompt_tokens - 1
    model_engine.kv.forget()
    cold = model_engine.complete(CompletionRequest(prompt=PYTHON + " return", required=" val", max_tokens=6))
    assert back.text == cold.text


def test_a_request_above_the_prefetched_end_reuses_it(model_engine):
    """A document is prefetched at its end; a request further up has a prompt that is a prefix of
    that, so it stays in the same sequence and decodes a token or two, not its whole prompt cold."""
    model_engine.kv.forget()
    model_engine.prefetch(CompletionRequest(prompt=PYTHON))
    middle = PYTHON[: PYTHON.index("def handler_7")] + "def"
    up = model_engine.complete(CompletionRequest(prompt=middle, required=" hand", max_tokens=4))
    assert up.stats.prompt_tokens > 150 and up.stats.decoded_tokens <= 3


def test_a_prefetched_prompt_needs_no_decode_and_a_cancelled_prefetch_keeps_its_work(model_engine):
    model_engine.kv.forget()
    request = CompletionRequest(prompt=PROSE, required=" bud", max_tokens=4)
    stopped = model_engine.prefetch(request, CancelAfter(2))
    assert not stopped.finished and stopped.decoded_tokens >= 64
    done = model_engine.prefetch(request)
    assert done.finished and done.decoded_tokens == done.prompt_tokens - stopped.decoded_tokens
    completion = model_engine.complete(request)
    assert completion.stats.decoded_tokens == 0 and completion.text.startswith(" budget")


@pytest.mark.xfail(
    strict=True,
    reason="flash attention off (engine.local.llama.FLASH_ATTN): a batch of 2 or 3 tokens no longer computes "
    "the rows of single-token decodes (up to 1.36 on Gemma's raw logits), so drafts stay off",
)
def test_batches_up_to_the_verify_cap_compute_the_rows_of_single_token_decodes(model_engine):
    """The identity that speculation rests on: llama.cpp computes a batch of up to
    MAX_VERIFY_ROWS tokens row by row exactly like single-token decodes (bitwise). It held with
    flash attention on (llama.cpp's CPU default) and does not with it off, which the engine now
    runs for thread-free numbers: so prompt-lookup drafts must stay off (the next test). Strict:
    a build where it holds again shows here."""
    context = model_engine._context
    tokens = model_engine.tokenize(PYTHON)[:200]
    model_engine.kv.forget()

    def rows(split: list[int]) -> np.ndarray:
        context.clear()
        context.decode(tokens[:150], 0)
        out, at = [], 150
        for n in split:
            out.extend(context.decode(tokens[at : at + n], at, outputs=n).rows)
            at += n
        return np.array(out)

    single = rows([1] * 6)
    assert np.array_equal(rows([MAX_VERIFY_ROWS] * (6 // MAX_VERIFY_ROWS)), single)
    context.clear()
    model_engine.kv.forget()


def test_drafts_are_off_by_default():
    """Drafts verified in batches would change the numbers with flash attention off (above)."""
    from engine import EngineConfig

    assert EngineConfig().draft_tokens == 0


@pytest.mark.parametrize(
    ("text", "single_line"),
    [(PYTHON, False), (PROSE, False), (PYTHON, True)],
    ids=["code", "prose", "code-single-line"],
)
def test_speculative_drafts_change_no_greedy_token(model_engine, text, single_line):
    cut = len(text) // 2
    requests = [
        CompletionRequest(prompt=text[: cut + k * 97], required="", max_tokens=24,
                          sampling=SamplingConfig(single_line=single_line))
        for k in range(4)
    ]  # fmt: skip
    outputs, verified = {}, []
    kv = model_engine.kv
    along = kv.rows_along

    def counted(context, draft, cancel=None):  # every verification batch, with its draft's length
        verified.append(len(draft))
        return along(context, draft, cancel)

    kv.rows_along = counted
    try:
        for draft in (0, 2):
            model_engine.drafts = DraftConfig(max_draft=draft)
            outputs[draft] = []
            for request in requests:
                kv.forget()
                outputs[draft].append(model_engine.complete(request).text)
            if draft == 0:
                assert verified == []
    finally:
        del kv.rows_along
        model_engine.drafts = DraftConfig(max_draft=model_engine.config.draft_tokens)
    assert verified and max(verified) >= 1  # drafts were proposed and verified, so this proves something
    assert outputs[0] == outputs[2]
