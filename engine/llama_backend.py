"""A thin, typed layer over llama.cpp's C API (through llama-cpp-python's ctypes bindings).

Only this module touches llama_cpp. It loads one model, owns one context with one sequence, and
offers exactly what the engine needs: tokenize, token pieces, decode a run of tokens at a position
(returning the last row's logits), and remove a KV tail. Gemma 3 interleaves sliding-window
layers, so the context keeps the full cache (`swa_full`) to let any tail be removed safely.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import llama_cpp

from engine.types import ModelLoadError

log = logging.getLogger(__name__)
native_log = logging.getLogger("llama.cpp")

SEQ = 0  # the one sequence this engine decodes into
_backend_ready = False
GGML_LOG_ERROR = 4  # ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT


@llama_cpp.llama_log_callback
def _forward_native_log(level: int, text: bytes, _user_data) -> None:
    """llama.cpp's own chatter goes to Python logging (errors as warnings, the rest as debug),
    never straight to stderr where it would clutter an editor's server log."""
    message = text.decode("utf-8", "replace").rstrip()
    if message:
        native_log.log(logging.WARNING if level == GGML_LOG_ERROR else logging.DEBUG, "%s", message)


class DecodeError(RuntimeError):
    """llama_decode failed; the KV cache content is no longer trusted."""


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        llama_cpp.llama_log_set(_forward_native_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _backend_ready = True


class LlamaModel:
    """One memory-mapped GGUF model and its vocabulary."""

    def __init__(self, path: Path) -> None:
        _init_backend()
        params = llama_cpp.llama_model_default_params()
        params.use_mmap = True
        self.path = path
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise ModelLoadError(
                path,
                "llama.cpp could not load this GGUF file (corrupt, truncated or an unsupported architecture)",
                "Re-download or re-convert the model, or set the `model` setting to another GGUF file",
            )
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)

    @property
    def handle(self):
        return self._model

    def tokenize(self, text: bytes, add_bos: bool) -> list[int]:
        """Tokens for raw text. Special-token syntax in the text is never parsed (documents are data)."""
        capacity = len(text) + 8
        buffer = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(self._vocab, text, len(text), buffer, capacity, add_bos, False)
        if count < 0:  # the buffer was short: llama.cpp reports the size it needs
            capacity = -count
            buffer = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self._vocab, text, len(text), buffer, capacity, add_bos, False)
        return buffer[:count]

    def pieces(self) -> list[bytes]:
        """Every token's bytes as it renders in text (special tokens render to nothing)."""
        size = 64
        buffer = ctypes.create_string_buffer(size)
        out: list[bytes] = []
        to_piece = llama_cpp.llama_token_to_piece
        for token in range(self.n_vocab):
            n = to_piece(self._vocab, token, buffer, size, 0, False)
            if n < 0:  # longer than the buffer: llama.cpp reports the length it needs
                big = ctypes.create_string_buffer(-n)
                n = to_piece(self._vocab, token, big, -n, 0, False)
                out.append(big.raw[:n])
            else:
                out.append(buffer.raw[:n])
        return out

    def special_flags(self, pieces: Sequence[bytes]) -> tuple[list[bool], list[bool]]:
        """(end-of-generation, control) per token. Special tokens render to nothing, so only
        those (and the declared EOS/EOT ids) are asked about: 262,144 ctypes calls cost a second."""
        eog = [False] * self.n_vocab
        control = [False] * self.n_vocab
        suspects = {t for t, piece in enumerate(pieces) if not piece}
        suspects.update(t for t in (llama_cpp.llama_vocab_eos(self._vocab), llama_cpp.llama_vocab_eot(self._vocab)) if 0 <= t < self.n_vocab)
        for token in suspects:
            eog[token] = bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))
            control[token] = bool(llama_cpp.llama_vocab_is_control(self._vocab, token))
        return eog, control

    def fim_ids(self) -> tuple[int, int, int]:
        """(fim_pre, fim_suf, fim_mid) from the GGUF metadata; -1 for each the model lacks."""
        v = self._vocab
        return (llama_cpp.llama_vocab_fim_pre(v), llama_cpp.llama_vocab_fim_suf(v), llama_cpp.llama_vocab_fim_mid(v))

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None


class LlamaContext:
    """One llama context holding one sequence; decodes runs of tokens and trims the KV tail."""

    def __init__(self, model: LlamaModel, n_ctx: int, n_batch: int, threads: int | None) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        threads = threads or max(1, os.cpu_count() or 1)
        params.n_threads = threads
        params.n_threads_batch = threads
        params.swa_full = True
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise ModelLoadError(
                model.path,
                f"llama.cpp could not create a context of {n_ctx} tokens",
                "Lower the `contextTokens` setting or free memory",
            )
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch = n_batch
        self.n_vocab = model.n_vocab
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)

    def decode(
        self, tokens: Sequence[int], start: int, cancelled: Callable[[], bool] = lambda: False
    ) -> np.ndarray | None:
        """Decode `tokens` at positions start.. in chunks; return a copy of the last row's logits,
        or None if `cancelled()` turned true between chunks (what was decoded stays in KV)."""
        batch = self._batch
        done = 0
        while done < len(tokens):
            if done and cancelled():
                return None
            chunk = tokens[done : done + self.n_batch]
            last_chunk = done + len(chunk) == len(tokens)
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = start + done + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = SEQ
                batch.logits[i] = 1 if (last_chunk and i == len(chunk) - 1) else 0
            status = llama_cpp.llama_decode(self._ctx, batch)
            if status != 0:
                raise DecodeError(f"llama_decode returned {status}")
            done += len(chunk)
        pointer = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)).copy()

    def remove_from(self, position: int) -> bool:
        """Drop KV cells at positions >= `position`."""
        return bool(llama_cpp.llama_memory_seq_rm(self._memory, SEQ, position, -1))

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
