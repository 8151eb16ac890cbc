"""What the engine's parts cost on the default model, measured in this process.

1. One constrained step on the full vocabulary: find the tokens consistent with the remaining
   required bytes through the index and choose among them, next to a per-step pass over all
   pieces (in Python, and vectorised with numpy) doing the same job. Same rows, same prefixes.
2. Prompt decode, cold (KV cleared) against warm: the same prompt again, and the prompt with an
   unchanged prefix plus the next word (seed 003's table, at 32/214/838 tokens).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.stats import median, per_call_us, ratio, timed_ms
from engine.prefix import RequiredPrefix
from engine.sampler import Sampler
from engine.types import SamplingConfig
from tests.support.prompts import SIZES, documents


def _choose_indexed(vocab, sampler: Sampler, row: np.ndarray, required: bytes) -> int:
    prefix = RequiredPrefix(vocab, required)
    return sampler.choose(row, (), prefix.allowed())


def _choose_python_pass(pieces: list[bytes], row: np.ndarray, required: bytes) -> int:
    ids = [t for t, p in enumerate(pieces) if p and (p.startswith(required) or required.startswith(p))]
    return ids[int(np.argmax(row[ids]))]


class NumpyPass:
    """A full-vocabulary mask per step, vectorised: every piece compared against the prefix."""

    def __init__(self, pieces: list[bytes]) -> None:
        width = max(len(p) for p in pieces)
        self.pieces = np.array(pieces, dtype=f"S{width}")
        self.lengths = np.array([len(p) for p in pieces])

    def choose(self, row: np.ndarray, required: bytes) -> int:
        mask = np.char.startswith(self.pieces, required)
        for k in range(1, len(required)):
            mask |= self.pieces == required[:k]
        mask &= self.lengths > 0
        return int(np.where(mask, row, -np.inf).argmax())


def constrained_step(engine, requireds: list[bytes], quick: bool) -> dict[str, Any]:
    """Median µs of one constrained step: the index path vs a Python and a numpy pass."""
    vocab = engine.vocab
    row = np.array(engine.kv.logits_after(engine.tokenize("def main(argv):\n    parser = argparse.")))
    sampler = Sampler(SamplingConfig(), vocab.banned)
    numpy_pass = NumpyPass(vocab.pieces)
    indexed, python_pass, vector_pass, agree = [], [], [], 0
    heavy = requireds[: 3 if quick else 8]
    for required in requireds:
        indexed.append(per_call_us(lambda: _choose_indexed(vocab, sampler, row, required), 200, 5))
    for required in heavy:
        python_pass.append(per_call_us(lambda: _choose_python_pass(vocab.pieces, row, required), 1, 1 if quick else 3))
        vector_pass.append(per_call_us(lambda: numpy_pass.choose(row, required), 1, 1 if quick else 3))
        a = _choose_indexed(vocab, sampler, row, required)
        agree += a == _choose_python_pass(vocab.pieces, row, required) == numpy_pass.choose(row, required)
    return {
        "vocab_size": vocab.size,
        "prefixes": len(requireds),
        "prefixes_for_passes": len(heavy),
        "indexed_us": median(indexed),
        "indexed_max_us": max(indexed),
        "python_pass_us": median(python_pass),
        "numpy_pass_us": median(vector_pass),
        "python_pass_over_indexed": ratio(median(python_pass), median(indexed)),
        "numpy_pass_over_indexed": ratio(median(vector_pass), median(indexed)),
        "same_choice": f"{agree}/{len(heavy)}",
        "target_us": 50,
    }


def prompt_decode(engine, quick: bool) -> list[dict[str, Any]]:
    """Cold vs warm prompt decode (seed 003's table) through the engine's own sequence path."""
    reps = 1 if quick else 5
    rows = []
    for size in SIZES:
        docs = documents(engine.count_tokens, size, reps, first_line=400)
        cold, same, tail, tail_decoded, counts = [], [], [], [], []
        for doc in docs:
            prompt = engine.tokenize(doc.base.rstrip(" "))
            grown = engine.tokenize(doc.base + doc.word)
            engine.kv.forget()
            seq = engine.sequence()
            ms, _ = timed_ms(lambda: seq.decode_prompt(prompt))
            cold.append(ms)
            counts.append(len(prompt))
            ms, _ = timed_ms(lambda: seq.decode_prompt(prompt))
            same.append(ms)
            ms, _ = timed_ms(lambda: seq.decode_prompt(grown))
            tail.append(ms)
            tail_decoded.append(seq.diagnostics().decoded_tokens)
        rows.append({
            "tokens": int(median(counts)),
            "runs": len(docs),
            "cold_ms": median(cold),
            "warm_same_ms": median(same),
            "warm_next_word_ms": median(tail),
            "next_word_decoded": median(tail_decoded),
            "cold_over_warm_next_word": ratio(median(cold), median(tail)),
        })  # fmt: skip
    return rows
