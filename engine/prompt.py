"""Prompt layouts: the text before the cursor alone, or fill-in-the-middle (FIM) with the text after it.

A model trained for FIM (Qwen2.5-Coder, StarCoder2, CodeGemma, DeepSeek-Coder, CodeLlama...) has
three control tokens, read from its GGUF by llama.cpp: PRE, SUF and MID. The middle is generated
after MID, and it begins with the required prefix (boundary whitespace + partial word), exactly as
a plain prompt's continuation does. Two orders exist:

- PSM, ``PRE prefix SUF suffix MID``: what most models are trained on. A new word in the prefix
  changes the prompt before the suffix, so the suffix is decoded again (hence its token bound).
- SPM, ``SUF suffix PRE prefix MID``: for models trained on it (CodeLlama, and models trained on
  both orders). The suffix sits first, so a new word in the prefix decodes only that word.

Either way, typing inside a word changes nothing here (the word-boundary split keeps the prefix
and the suffix as they are), so the whole prompt's KV is reused on every such keystroke.
"""

from __future__ import annotations

from dataclasses import dataclass

PSM, SPM = "psm", "spm"
ORDERS = (PSM, SPM)


@dataclass(frozen=True)
class FimTokens:
    """A model's FIM token ids (llama.cpp's fim_pre / fim_suf / fim_mid)."""

    pre: int
    suf: int
    mid: int

    @classmethod
    def of(cls, pre: int, suf: int, mid: int) -> FimTokens | None:
        """The model's FIM tokens, or None when it lacks any of the three (llama.cpp reports -1)."""
        if min(pre, suf, mid) < 0:
            return None
        return cls(pre, suf, mid)


def fim_prompt(
    head: tuple[int, ...], prefix: tuple[int, ...], suffix: tuple[int, ...], fim: FimTokens, order: str = PSM
) -> tuple[int, ...]:
    """The FIM prompt in the model's order; `head` (BOS, if the model adds one) goes first."""
    if order == SPM:
        return head + (fim.suf,) + suffix + (fim.pre,) + prefix + (fim.mid,)
    if order != PSM:
        raise ValueError(f"unknown FIM order {order!r}; expected one of {', '.join(ORDERS)}")
    return head + (fim.pre,) + prefix + (fim.suf,) + suffix + (fim.mid,)


FIM_EXTRA_TOKENS = 3  # PRE, SUF and MID
