"""Speculative drafts taken from the document itself (prompt lookup).

Code and prose repeat themselves: after `self.`, the tokens that followed the last `self.` are a
good guess. `PromptLookup.propose` finds the most recent earlier occurrence of the context's last
n tokens (longest n first) and proposes the tokens that followed it. The KV cache then decodes
the context's last token and the whole draft in one batch (`KvCache.rows_along`) and remembers a
logits row for every prefix of the draft, so the sampler walks along the draft without decoding
while its choices agree, and decodes normally (with a new draft) from the first disagreement.

The sampler is unchanged: each token is chosen from the row of its own context, at any
temperature. Identity with plain decoding at temperature 0 rests on the batch shape: llama.cpp's
CPU kernels compute a batch of up to 3 tokens row by row exactly as a single-token decode does
(bitwise equal rows, measured on both builds and tested in tests/engine), while 4 or more rows
take a matrix-matrix path whose rounding differs (up to ~1.9 on raw logits, enough to flip close
greedy calls). So a verification batch is capped at MAX_VERIFY_ROWS: the context's last token
and at most two drafted tokens.

That identity held with llama.cpp's flash attention on. The engine now runs with it off
(engine.local.llama.FLASH_ATTN: with it on, rows depended on the thread count), and then even a
batch of 2 computes other rows than single-token decodes (up to 1.36 on Gemma 3 270M's raw logits,
0.35 on Qwen2.5-Coder 0.5B): drafts, off by default (EngineConfig.draft_tokens), would now change
texts, and must stay off until that is solved (tests/engine/test_first_contact.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_VERIFY_ROWS = 3  # see the module docstring: larger batches change the rounding


@dataclass(frozen=True)
class DraftConfig:
    max_draft: int = 2  # tokens proposed per verification batch (at most MAX_VERIFY_ROWS - 1); 0: off
    max_ngram: int = 3  # longest context suffix looked up
    min_ngram: int = 2  # shortest: a single repeated token predicts the next one poorly


class PromptLookup:
    def __init__(self, config: DraftConfig, stops: Sequence[bool] | np.ndarray) -> None:
        """`stops[token]`: the draft ends after this token (a line break in single-line mode, an
        end-of-generation token)."""
        self.config = config
        self._stops = stops

    def propose(self, context: Sequence[int], limit: int) -> tuple[int, ...]:
        """Up to min(limit, max_draft) tokens that followed the latest earlier occurrence of the
        context's last n tokens; () when there is none."""
        cfg = self.config
        limit = min(limit, cfg.max_draft, MAX_VERIFY_ROWS - 1)
        if limit <= 0 or len(context) <= cfg.min_ngram:
            return ()
        tokens = np.asarray(context, dtype=np.int64)
        end = len(tokens)
        for n in range(min(cfg.max_ngram, end - 1), cfg.min_ngram - 1, -1):
            # starts i < end - n where tokens[i:i+n] equals the last n tokens
            hits = tokens[: end - n] == tokens[end - n]
            for k in range(1, n):
                hits &= tokens[k : end - n + k] == tokens[end - n + k]
            found = np.flatnonzero(hits)
            if found.size:
                start = int(found[-1]) + n
                draft = []
                for token in tokens[start : start + limit].tolist():
                    draft.append(token)
                    if self._stops[token]:
                        break
                return tuple(draft)
        return ()
