"""Opening the in-process model: the GGUF, a llama context with as many sequences as the memory
budget holds (engine.local.kv keeps one prompt in each), and the vocabulary index."""

from __future__ import annotations

from engine.core.vocab import VocabIndex
from engine.local.kv import KvCache
from engine.local.llama import RUNTIME, LlamaContext, LlamaModel, allocated_tokens
from engine.model_files import resolve
from engine.types import MIN_PROMPT_TOKENS, EngineConfig, ModelLoadError
from engine.vocab_cache import load_vocab

MIB = 1024 * 1024
MAX_REMEMBERED = 15  # sequences beyond the live one, whatever the budget


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo; None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def remembered_sequences(config: EngineConfig, kv_bytes_per_token: int, available: int | None = None) -> int:
    """How many prompts (documents) stay decoded: the live one, plus as many more whole contexts
    of KV as fit in `memory_budget_mib`, and in half the memory the machine has available (llama.cpp
    allocates every sequence's KV at load, so a budget larger than the machine would get the
    server killed later instead of failing now). A context costs what llama.cpp allocates for it,
    a multiple of 256 tokens, not the size asked for."""
    per_context = max(1, allocated_tokens(config.context_tokens) * kv_bytes_per_token)
    budget = config.memory_budget_mib * MIB
    if available is not None:
        budget = min(budget, available // 2)
    return 1 + min(MAX_REMEMBERED, budget // per_context)


def open_local(config: EngineConfig) -> tuple[LlamaModel, LlamaContext, VocabIndex, KvCache, str]:
    """(model, context, vocabulary index, the KV cache over the context, model id) for
    `config.model_path` (a catalogue name or a path; None: the default). Raises ModelLoadError."""
    if config.context_tokens < 2 * MIN_PROMPT_TOKENS:
        raise ModelLoadError(
            config.model_path,
            f"a context of {config.context_tokens} tokens is too small",
            f"Set `contextTokens` to at least {2 * MIN_PROMPT_TOKENS} (2048 is the default)",
        )
    resolved = resolve(config.model_path)
    model = LlamaModel(resolved.path)
    try:
        sequences = remembered_sequences(config, model.kv_bytes_per_token(), available_memory_bytes())
        context = LlamaContext(model, config.context_tokens, config.batch_tokens, config.threads, sequences)
    except Exception:
        model.close()
        raise
    try:
        vocab = load_vocab(model, resolved.model_id, RUNTIME)
    except Exception:
        context.close()
        model.close()
        raise
    return model, context, vocab, KvCache(context), resolved.model_id
