"""Tiny GGUF models that the tests write themselves (with the `gguf` package): one with FIM tokens,
one without. Random weights, a llama architecture of one block, an SPM-style vocabulary of byte
tokens plus a few words, so llama.cpp loads them in milliseconds and tokenizes any text.

The FIM model declares its fim_pre/fim_suf/fim_mid ids in the GGUF metadata, as converted code
models do. The plain model has no such keys and no token whose text llama.cpp would guess as one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine import Engine, EngineConfig

WORDS = ("def", "return", "self", "value", "the", "draft", "yesterday", "yes", "ter", "day", "print", "if", "x")
FIM_TEXTS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>")
N_EMBD, N_HEAD, N_FF, N_CTX = 32, 2, 64, 512

# gguf's TokenType values
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def vocabulary(with_fim: bool) -> tuple[list[str], list[float], list[int]]:
    """(token texts, scores, types): <unk> <s> </s>, 256 byte tokens, [FIM tokens], pieces."""
    texts = ["<unk>", "<s>", "</s>"]
    types = [UNKNOWN, CONTROL, CONTROL]
    texts += [f"<0x{b:02X}>" for b in range(256)]
    types += [BYTE] * 256
    if with_fim:
        texts += list(FIM_TEXTS)
        types += [CONTROL] * len(FIM_TEXTS)
    pieces = ["\u2581"] + [chr(c) for c in range(33, 127)]  # ▁ and printable ASCII
    # A piece is only reachable by merges when each of its prefixes is a piece too.
    words = sorted({"\u2581" + w[:n] for w in WORDS for n in range(1, len(w) + 1)} - set(pieces))
    pieces += words
    texts += pieces
    types += [NORMAL] * len(pieces)
    # SPM merges prefer higher scores: longer pieces win.
    scores = [0.0] * (len(texts) - len(pieces)) + [float(len(p)) for p in pieces]
    return texts, scores, types


def load(path: Path) -> Engine:
    """The engine on a tiny model, as the tests use it (its whole context, one thread)."""
    return Engine.load(EngineConfig(model_path=path, context_tokens=N_CTX, threads=1))


def write_model(path: Path, with_fim: bool, seed: int = 0, add_bos: bool = True) -> Path:
    """`add_bos=False`: a model that starts a prompt with no token of its own (as Qwen2.5-Coder)."""
    import gguf

    texts, scores, types = vocabulary(with_fim)
    n_vocab = len(texts)
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-fim" if with_fim else "tiny-plain")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all F32
    writer.add_tokenizer_model("llama")
    writer.add_token_list(texts)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    if with_fim:
        first = texts.index(FIM_TEXTS[0])
        writer.add_uint32("tokenizer.ggml.fim_pre_token_id", first)
        writer.add_uint32("tokenizer.ggml.fim_suf_token_id", first + 1)
        writer.add_uint32("tokenizer.ggml.fim_mid_token_id", first + 2)
        writer.add_uint32("tokenizer.ggml.fim_pad_token_id", first + 3)
    writer.add_tensor("token_embd.weight", weights(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", weights(n_vocab, N_EMBD))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", weights(N_EMBD, N_EMBD))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", weights(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_up.weight", weights(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_down.weight", weights(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
