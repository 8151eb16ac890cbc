"""What the engine reads around a completion once it is generated: the document-word choice
(engine.core.word_choice), the gate's signals (engine.core.signals) and the other first words
(engine.core.alternatives), from the rows the backend gives (engine.backend)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from engine.backend import Backend, Cancelled
from engine.core.alternatives import (
    CANDIDATES_PER_ALTERNATIVE,
    BudgetedRows,
    alternatives,
    first_tokens,
)
from engine.core.generation import Generated
from engine.core.path_rows import PathRows
from engine.core.sequence import Sequence
from engine.core.signals import TOP as SIGNAL_TOP
from engine.core.signals import compute as compute_signals
from engine.core.vocab import VocabIndex
from engine.core.word_choice import WordScorer, choose, first_word, is_word_char
from engine.types import CompletionRequest, Signals

RIVALS = 16  # with nothing typed, the prompt row's first tokens looked at for the margin (engine.core.signals)


class Readings:
    """The readings of one engine: its backend's rows, its vocabulary, and `spell` (the tokens of
    a text alone, engine.prompt_window `_spell`)."""

    def __init__(self, backend: Backend, vocab: VocabIndex, spell: Callable[[bytes], list[int]]) -> None:
        self._backend, self._vocab, self._spell = backend, vocab, spell

    def coverings(self, request: CompletionRequest, prompt: tuple[int, ...], seq: Sequence, n: int):
        """(the best `n` coverings of the typed prefix, the log of their summed mass): from the
        exact search, or with nothing to cover from the prompt's row (its first tokens, mass 1)."""
        if seq.search is not None:
            return seq.search.ranked(n), seq.search.log_mass()
        if request.required or not self._backend.remembers(prompt):  # masking, or the row is gone: no decode for it
            return [], 0.0
        return first_tokens(self._backend.logits_after(prompt), self._vocab, n), 0.0

    def seen_alike(self, request: CompletionRequest, prompt: tuple[int, ...], seq: Sequence):
        """(the coverings the gate's signals read, the log of their summed mass): those along the
        chosen covering among each row's SIGNAL_TOP most probable tokens (CoveringSearch.along),
        which a remote backend sees as the in-process one does; with nothing typed, the prompt's
        row's first tokens (mass 1)."""
        if seq.search is not None and seq.covering is not None:
            return seq.search.along(seq.covering, request.required.encode("utf-8", "replace"), SIGNAL_TOP)
        return self.coverings(request, prompt, seq, RIVALS)

    def signals(
        self,
        request: CompletionRequest,
        first_seq: Sequence,
        seq: Sequence,
        gen: Generated,
        seen_alike: tuple[list, float],
    ) -> Signals:
        """The completion's confidence (engine.core.signals), normalised by the first pass's coverings
        (a lexicon word's second pass covers a longer prefix, on the same prompt row)."""
        seen, log_mass = seen_alike
        steps = list(gen.steps)
        if seq.covering is not None:
            covered = b"".join(self._vocab.pieces[t] for t in seq.covering.path)
            steps.insert(0, (covered, seq.covering.log_prob - log_mass))
        rivals = [(b"".join(self._vocab.pieces[t] for t in c.path), c.log_prob - log_mass) for c in seen]
        raw = tuple(lp for _, lp in gen.steps)
        return compute_signals(
            request.required, steps, rivals, typed_log_prob(first_seq, log_mass), gen.reason == "eos", raw
        )

    def alternatives(
        self, request, prompt, first_seq: Sequence, gen: Generated, signals: Signals, seen_alike, budget, cancel
    ):
        """(other first words (engine.core.alternatives) within `max_cover_decodes` decodes (`budget` 0:
        remembered rows only), the decodes spent); none when cancelled meanwhile. Their signals
        read the same coverings as the completion's (`seen_alike`)."""
        ranked, _ = self.coverings(request, prompt, first_seq, request.alternatives * CANDIDATES_PER_ALTERNATIVE + 1)
        seen, log_mass = seen_alike
        primary = gen.text[: signals.word_ends[0].chars] if signals.word_ends else gen.text
        chosen = first_seq.covering.path if first_seq.covering is not None else gen.first_token
        rows = BudgetedRows(
            PathRows(self._backend, prompt, cancel), request.max_cover_decodes if budget is None else budget
        )
        try:
            found = alternatives(
                self._vocab, rows, request.required, ranked, log_mass, primary, chosen, request.alternatives,
                request.sampling.single_line, seen, typed_log_prob(first_seq, log_mass),
            )  # fmt: skip
        except Cancelled:
            found = ()
        return found, rows.decodes

    def choose_word(self, prompt: tuple[int, ...], request: CompletionRequest, text: str, cancel: threading.Event):
        """The lexicon's choice between the model's word and the document words (engine.core.word_choice);
        (None, decodes) when the budget or a cancel cut it short."""
        typed = typed_word(request.required)
        whitespace = request.required[: len(request.required) - len(typed)]
        base_word = first_word(text[len(whitespace) :])
        candidates = [c for c in request.candidates if c.startswith(typed) and c != typed]
        if not typed or not base_word or not candidates:
            return None, 0
        rows = PathRows(self._backend, prompt, cancel)
        scorer = WordScorer(self._vocab, rows, self._spell, request.lexicon_decodes)
        try:
            return choose(scorer, whitespace, base_word, candidates, request.lexicon_prior), scorer.decodes
        except Cancelled:
            return None, scorer.decodes


def typed_log_prob(seq: Sequence, log_mass: float) -> float:
    """log p(typed prefix | prompt) from a mass relative to the prompt's row (0: nothing typed)."""
    return log_mass - seq.search.root_log_norm if seq.search is not None else 0.0


def typed_word(required: str) -> str:
    """The partial word at the end of a required prefix (after its boundary whitespace)."""
    start = len(required)
    while start > 0 and is_word_char(required[start - 1]):
        start -= 1
    return required[start:]
