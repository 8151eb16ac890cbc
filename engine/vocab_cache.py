"""The vocabulary index kept on disk, so a model's second load skips building it.

Building `VocabIndex` reads every token's bytes through ctypes and sorts them: about 1.2 s of
Gemma 3 270M's 1.9 s load (262,144 tokens), 0.6 s of Qwen2.5-Coder's, on every server start and
on a model's first use. The bytes, the flags and the byte-sorted order are saved once per model
identity and llama-cpp-python version (how tokens render is llama.cpp's) as one `.npz` of plain
arrays (numpy refuses to read objects from it), written through a temporary name; a file that cannot be read or does not
match the model's size is built again. An unwritable cache costs only the build.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from engine.core.vocab import VocabIndex
from engine.model_files import cache_dir

logger = logging.getLogger(__name__)

FORMAT = 1  # bump when the arrays saved change


def vocab_path(model_id: str, runtime: str) -> Path:
    """Where the index of `model_id` under llama-cpp-python `runtime` is kept."""
    key = hashlib.sha256(f"{FORMAT} {model_id} {runtime}".encode()).hexdigest()[:32]
    return cache_dir() / "vocab" / f"{key}.npz"


def load_vocab(model, model_id: str, runtime: str) -> VocabIndex:
    """`model`'s VocabIndex (engine.local.llama.LlamaModel: `n_vocab`, `pieces`,
    `special_flags`), from the cache when it holds this model's, else built and saved."""
    path = vocab_path(model_id, runtime)
    found = _read(path, model.n_vocab)
    if found is not None:
        return found
    pieces = model.pieces()
    eog, control = model.special_flags(pieces)
    vocab = VocabIndex(pieces, eog, control)
    _write(path, vocab)
    return vocab


def _read(path: Path, n_vocab: int) -> VocabIndex | None:
    """The index saved at `path`, or None when there is none that fits (missing, damaged, another
    size, an order that does not sort the pieces: VocabIndex checks it)."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            blob, ends = saved["blob"].tobytes(), saved["ends"]
            eog, control, order = saved["eog"], saved["control"], saved["order"]
        if not len(ends) == len(eog) == len(control) == n_vocab:
            raise ValueError(f"{len(ends)} tokens saved, the model has {n_vocab}")
        if (ends[-1] if len(ends) else 0) != len(blob) or np.any(np.diff(ends) < 0):
            raise ValueError("the pieces' ends do not fit their bytes")
        starts = np.concatenate([[0], ends[:-1]]).tolist()
        return VocabIndex([blob[a:b] for a, b in zip(starts, ends.tolist())], eog, control, order=order)
    except FileNotFoundError:
        return None
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as error:
        logger.info("vocabulary cache %s does not fit (%s): building it again", path, error)
        return None


def _write(path: Path, vocab: VocabIndex) -> None:
    """Save `vocab` at `path` through a temporary name (a reader never sees half a file)."""
    lengths = np.fromiter((len(p) for p in vocab.pieces), dtype=np.int64, count=vocab.size)
    arrays: dict[str, Any] = {
        "blob": np.frombuffer(b"".join(vocab.pieces), dtype=np.uint8),
        "ends": np.cumsum(lengths),
        "eog": vocab.eog,
        "control": vocab.control,
        "order": vocab.sorted_ids,
    }
    partial: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz.tmp", delete=False) as out:
            partial = Path(out.name)
            np.savez(out, **arrays)
        os.replace(partial, path)
    except OSError as error:
        logger.info("vocabulary cache not written (%s): the next load builds it again", error)
        if partial is not None:
            partial.unlink(missing_ok=True)
