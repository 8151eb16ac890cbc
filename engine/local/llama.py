"""A thin, typed layer over llama.cpp's C API (through llama-cpp-python's ctypes bindings).

Only this module touches llama_cpp. It loads one model, owns one context with one or more
sequences (one per remembered prompt, see `engine.local.kv`), and offers exactly what the engine needs:
tokenize, token pieces, decode a run of tokens into a sequence at a position (returning the
logits rows of its last tokens), and remove a sequence's KV tail. Gemma 3 interleaves
sliding-window layers, so the context keeps the full cache (`swa_full`) to let any tail be
removed safely.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import llama_cpp
import numpy as np

from engine.core.placement import UBATCH_TOKENS
from engine.local.cores import CoreMeter
from engine.local.kv import Decoded
from engine.types import ModelLoadError

RUNTIME = f"llama-cpp-python {llama_cpp.__version__}"  # how tokens render is this build's (engine.vocab_cache)

log = logging.getLogger(__name__)
native_log = logging.getLogger("llama.cpp")

# Prompts are decoded in chunks of CHUNK_TOKENS from where the decode starts, checking for a
# cancel between chunks, so a cancel waits for one chunk at most. 64 is the smallest size that kept
# full throughput (measured: 32-token chunks decoded a cold 840-token prompt ~1.5x slower than
# 64-512). Boundaries depend on where a decode starts, never on timing: a decode resumed after a
# cancel starts at a chunk boundary and computes exactly what an uninterrupted one would. The row
# after a run comes from its last token decoded alone. This is how llama-server decodes
# (ubatches of `--ubatch-size 64` from the first token its cache lacks; what it generates one
# token at a time), and the remote backend sends a prompt's last token as a forced first token
# (engine.remote.rows), so both compute the same numbers. They must: on this model the ubatch a token
# was decoded in moves a later log-probability by up to 0.2 nats.
CHUNK_TOKENS = UBATCH_TOKENS
# llama.cpp gives each sequence a whole multiple of this many tokens of KV (GGML_PAD(n_ctx_seq, 256)
# in llama-context.cpp): 256 for a request of 128, 512 for 300. The engine still uses only the
# tokens it asked for; memory sums use what is really allocated.
LLAMA_CTX_PAD = 256
# Flash attention off. llama.cpp's default ("auto") turns it on for the CPU, and its CPU kernel
# splits attention over the threads, so a row depends on the thread count: at 1 thread against
# 2 a log-probability moved by up to 0.84 nats, enough to flip near-tie tokens, and the in-process
# engine chooses its threads from the machine's load (engine.local.cores) while a llama-server
# runs its `-t`. Off, the rows agree at any thread count within float noise, here and on a
# llama-server started with `--flash-attn off` (docs/shared-server.md, "Exactness over the network";
# tests/engine/test_remote_threads.py).
FLASH_ATTN = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
_backend_ready = False
GGML_LOG_ERROR = 4  # ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT


@llama_cpp.llama_log_callback
def _forward_native_log(level: int, text: bytes, _user_data) -> None:
    """llama.cpp's own chatter goes to Python logging (errors as warnings, the rest as debug),
    never straight to stderr where it would clutter an editor's server log."""
    message = text.decode("utf-8", "replace").rstrip()
    if message:
        native_log.log(logging.WARNING if level == GGML_LOG_ERROR else logging.DEBUG, "%s", message)


def allocated_tokens(n_ctx: int) -> int:
    """KV cells llama.cpp allocates for a sequence of `n_ctx` tokens."""
    return -(-n_ctx // LLAMA_CTX_PAD) * LLAMA_CTX_PAD


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

    def __init__(self, path: Path, vocab_only: bool = False) -> None:
        """`vocab_only`: the tokenizer alone, no weights (a remote server runs the model)."""
        _init_backend()
        params = llama_cpp.llama_model_default_params()
        params.use_mmap = True
        params.vocab_only = vocab_only
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

    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token takes (f16 keys and values in every layer)."""
        model = self._model
        n_head, n_head_kv = llama_cpp.llama_model_n_head(model), llama_cpp.llama_model_n_head_kv(model)
        arch = self._meta("general.architecture") or ""
        head = llama_cpp.llama_model_n_embd(model) // max(1, n_head)
        key = int(self._meta(f"{arch}.attention.key_length") or head)
        value = int(self._meta(f"{arch}.attention.value_length") or head)
        return llama_cpp.llama_model_n_layer(model) * n_head_kv * (key + value) * 2

    def _meta(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(128)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buffer, len(buffer))
        return buffer.value.decode() if n >= 0 else None

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
        suspects.update(
            t
            for t in (llama_cpp.llama_vocab_eos(self._vocab), llama_cpp.llama_vocab_eot(self._vocab))
            if 0 <= t < self.n_vocab
        )
        for token in suspects:
            eog[token] = bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))
            control[token] = bool(llama_cpp.llama_vocab_is_control(self._vocab, token))
        return eog, control

    def fim_ids(self) -> tuple[int, int, int]:
        """(fim_pre, fim_suf, fim_mid) from the GGUF metadata; -1 for each the model lacks."""
        v = self._vocab
        return (llama_cpp.llama_vocab_fim_pre(v), llama_cpp.llama_vocab_fim_suf(v), llama_cpp.llama_vocab_fim_mid(v))

    def repo_ids(self) -> tuple[int, int]:
        """(fim_rep, fim_sep): the repository-level tokens (Qwen2.5-Coder's <|repo_name|> and
        <|file_sep|>), which llama.cpp finds in the vocabulary by their text; -1 when absent."""
        v = self._vocab
        return (llama_cpp.llama_vocab_fim_rep(v), llama_cpp.llama_vocab_fim_sep(v))

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None


class LlamaContext:
    """One llama context with `sequences` independent sequences of `n_ctx` tokens each (one per
    remembered prompt, see `engine.local.kv`); decodes runs of tokens and trims KV tails. llama.cpp
    allocates `allocated` (>= n_ctx, see LLAMA_CTX_PAD) cells per sequence; `n_ctx` stays the size
    asked for, so no prompt and no KV goes beyond it."""

    def __init__(self, model: LlamaModel, n_ctx: int, n_batch: int, threads: int | None, sequences: int = 1) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = allocated_tokens(n_ctx) * sequences  # rounded here, so each sequence gets exactly this
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = sequences
        params.kv_unified = False  # a stream per sequence: attention never scans other documents
        # threads None: as many as the cores other processes leave free, chosen again before each
        # chunk (engine.local.cores); a number: exactly that many, whatever the machine does.
        meter = None if threads else CoreMeter()
        self._meter = meter
        threads = meter.threads() if meter is not None else threads
        self.threads = threads
        params.n_threads = threads
        params.n_threads_batch = threads
        params.swa_full = True
        params.flash_attn_type = FLASH_ATTN
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise ModelLoadError(
                model.path,
                f"llama.cpp could not create a context of {n_ctx} tokens for {sequences} document(s)",
                "Lower the `contextTokens` or `memoryBudgetMib` setting, or free memory",
            )
        self.allocated = llama_cpp.llama_n_ctx_seq(self._ctx)
        self.n_ctx = min(n_ctx, self.allocated)
        self.sequences = sequences
        self.n_batch = n_batch
        self.n_vocab = model.n_vocab
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.chunk_tokens = min(CHUNK_TOKENS, n_batch)

    def decode(
        self,
        tokens: Sequence[int],
        start: int,
        cancelled: Callable[[], bool] = lambda: False,
        outputs: int = 1,
        seq: int = 0,
    ) -> Decoded:
        """Decode `tokens` into sequence `seq` at positions start.. in chunks; rows are copies of
        the logits of the last `outputs` tokens. Between chunks `cancelled()` is checked: then the
        rows are None and what was decoded stays in KV. Chunks are `chunk_tokens` long from `start`
        (see CHUNK_TOKENS)."""
        batch = self._batch
        first_output = len(tokens) - outputs
        rows = np.empty((outputs, self.n_vocab), dtype=np.float32)
        done = 0
        while done < len(tokens):
            if done and cancelled():
                return Decoded(done, None)
            chunk = tokens[done : done + self.chunk_tokens]
            if outputs == 1 and len(chunk) > 1 and done + len(chunk) == len(tokens):
                chunk = chunk[:-1]  # the last token alone (see CHUNK_TOKENS)
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = start + done + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = 1 if done + i >= first_output else 0
            if self._meter is not None:
                self._follow_machine()
            status = llama_cpp.llama_decode(self._ctx, batch)
            if status != 0:
                raise DecodeError(f"llama_decode returned {status}")
            for i in range(max(0, first_output - done), len(chunk)):
                pointer = llama_cpp.llama_get_logits_ith(self._ctx, i)
                rows[done + i - first_output] = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
            done += len(chunk)
        return Decoded(done, rows)

    def _follow_machine(self) -> None:
        if self._meter is None:
            return
        threads = self._meter.threads()
        if threads != self.threads:
            llama_cpp.llama_set_n_threads(self._ctx, threads, threads)
            self.threads = threads

    def remove_from(self, position: int, seq: int = 0) -> bool:
        """Drop sequence `seq`'s KV cells at positions >= `position`."""
        return bool(llama_cpp.llama_memory_seq_rm(self._memory, seq, position, -1))

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)

    def positions(self, seq: int = 0) -> int:
        """Positions llama.cpp itself holds in sequence `seq`'s KV (its highest + 1; 0 when
        empty): the check on the engine's own bookkeeping."""
        return llama_cpp.llama_memory_seq_pos_max(self._memory, seq) + 1

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
