"""`contextTokens` N means N: llama.cpp rounds each sequence's KV up to a multiple of 256 (256 for
128, 512 for 300), but no prompt and no KV cell the engine fills goes beyond N tokens per document,
and the count of remembered documents is made with the size llama.cpp really allocates."""

from __future__ import annotations

import pytest

from engine import CompletionRequest, Engine, EngineConfig
from engine.local.llama import allocated_tokens
from engine.local.load import available_memory_bytes, remembered_sequences
from tests.lsp_server.test_huge import prose

pytestmark = pytest.mark.model
DRAFT = "\nThanks for sending over the draft"


def test_allocated_sizes_are_llama_cpps_rounding():
    assert [allocated_tokens(n) for n in (128, 256, 257, 300, 2048, 2049)] == [256, 256, 512, 512, 2048, 2304]


def test_remembered_documents_are_counted_at_the_allocated_size():
    per_token = 18_000
    config = EngineConfig(context_tokens=128, memory_budget_mib=16)
    # 16 MiB holds 3 contexts of 256 allocated tokens (4.6 MB each), not 7 of 128.
    assert remembered_sequences(config, per_token) == 1 + (16 * 2**20) // (256 * per_token) == 4


@pytest.mark.parametrize("n_ctx", [128, 300, 2048])
def test_no_prompt_and_no_kv_beyond_context_tokens(n_ctx: int):
    config = EngineConfig(context_tokens=n_ctx, threads=1)
    engine = Engine.load(config)
    try:
        context = engine._context
        assert engine.n_ctx == n_ctx and context.allocated == allocated_tokens(n_ctx)
        kv_per_token = engine._model.kv_bytes_per_token()
        assert context.sequences == remembered_sequences(config, kv_per_token, available_memory_bytes())
        documents = [prose(16_000, seed) + DRAFT for seed in (1, 2)]  # ~3,000 tokens each
        assert engine.count_tokens(documents[0]) > n_ctx + 512
        for text in documents:
            for typed in (" yest", " yesterd"):
                done = engine.complete(CompletionRequest(text, typed, max_tokens=8))
                assert done.text.startswith(typed)
                stats = done.stats
                assert 0 < stats.prompt_tokens <= n_ctx - 9 - len(typed) and stats.kv_tokens <= n_ctx
        held = [context.positions(seq) for seq in range(context.sequences)]
        assert max(held) <= n_ctx, f"llama.cpp holds {held} positions per sequence for contextTokens {n_ctx}"
    finally:
        engine.close()
