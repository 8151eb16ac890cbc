"""Document words against the model's own word: which whole word should the typed prefix become?

The covering search spells the typed prefix by its most probable token path and generation then
finishes the word. A *candidate* is a word of the open documents that begins with the typed
word (the caller finds them; the engine knows no documents). Every word, the model's own
included, is scored on one footing:

    log p(tokens of boundary whitespace + word | prompt) + log p(the word ends there)

where the tokens are the word's own tokenization and "ends there" is the probability that the
next token starts with a character that is not a word character (or ends generation). Words found
in the documents get a small prior (nats). The extra decodes are bounded by a budget: a word that
cannot be scored within it is not a candidate. If a candidate wins, its bytes become the
required prefix and the completion is made again (its rows are already in the KV cache).
"""

from __future__ import annotations

import unicodedata
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.core.covering import RowSource
from engine.core.sampler import log_sum_exp
from engine.core.vocab import VocabIndex


def is_word_char(ch: str) -> bool:
    """The server's word characters (lsp_server.split.is_word_char; the engine cannot import it)."""
    return ch == "_" or unicodedata.category(ch)[0] in "LMN"


_ENDS: weakref.WeakKeyDictionary[VocabIndex, np.ndarray] = weakref.WeakKeyDictionary()


def word_end_tokens(vocab: VocabIndex) -> np.ndarray:
    """Token ids that end a word when they come next: their text starts with a non-word character,
    or they end generation. Computed once per vocabulary."""
    ends = _ENDS.get(vocab)
    if ends is None:
        mask = np.zeros(vocab.size, dtype=bool)
        for token, piece in enumerate(vocab.pieces):
            if not piece:
                mask[token] = bool(vocab.eog[token])
            elif piece[0] < 0x80:
                mask[token] = not is_word_char(chr(piece[0]))
            else:
                head = piece[:4].decode("utf-8", "ignore")[:1]
                mask[token] = bool(head) and not is_word_char(head)
        ends = np.flatnonzero(mask)
        _ENDS[vocab] = ends
    return ends


def first_word(text: str) -> str:
    """The leading run of word characters of `text`."""
    end = 0
    while end < len(text) and is_word_char(text[end]):
        end += 1
    return text[:end]


@dataclass(frozen=True)
class Choice:
    word: str  # the winning word (boundary whitespace not included)
    base_word: str  # the model's own word
    scored: int  # words scored within the budget, the model's own included


class WordScorer:
    """Scores whole words after one prompt; `rows` counts its real decodes against `budget`."""

    def __init__(self, vocab: VocabIndex, rows: RowSource, tokenize: Callable[[bytes], Sequence[int]], budget: int):
        self._vocab, self._rows, self._tokenize, self._budget = vocab, rows, tokenize, budget
        self._start = rows.decodes
        self._ends = word_end_tokens(vocab)

    @property
    def decodes(self) -> int:
        return self._rows.decodes - self._start

    def score(self, spelled: bytes) -> float | None:
        """log p(spelled's tokens) + log p(a word end next); None when the budget runs out first,
        -inf when the tokenizer cannot spell it exactly."""
        path = tuple(self._tokenize(spelled))
        if not path:
            return float("-inf")
        total = 0.0
        for i in range(len(path) + 1):
            if i and self.decodes >= self._budget:
                return None
            row = self._rows.row(path[:i])
            norm = log_sum_exp(row)
            if i < len(path):
                total += float(row[path[i]]) - norm
            else:
                total += log_sum_exp(row[self._ends]) - norm
        return total


def choose(
    scorer: WordScorer, whitespace: str, base_word: str, candidates: Sequence[str], prior: float
) -> Choice | None:
    """The best word among the model's own and the candidates (document words get `prior`)."""
    lexicon = set(candidates)
    base = scorer.score((whitespace + base_word).encode("utf-8"))
    if base is None:
        return None
    best, best_score, scored = base_word, base + (prior if base_word in lexicon else 0.0), 1
    for word in candidates:
        if base_word.startswith(word):  # as a required prefix it could not change the word
            continue
        score = scorer.score((whitespace + word).encode("utf-8"))
        if score is None:
            break
        scored += 1
        if score + prior > best_score:
            best, best_score = word, score + prior
    return Choice(best, base_word, scored)
