"""How sure the model is of a completion, from numbers the covering search and generation have anyway.

Raw token probabilities of a small model are badly calibrated, and at a word start most of the
probability is spread over many words. What says more is the probability *given what was typed*:

    P(text so far | typed) = p(chosen covering) · p(continuation tokens) / p(typed)

where p(typed) is the mass of the coverings *seen alike on every backend*: those that end at a node
along the chosen covering's path with one of the TOP most probable tokens of that node's row, and
the chosen covering itself (engine.core.covering `CoveringSearch.along`; a lower bound of the true mass).
Not every covering the search found: in-process the search reads dense rows and expands branches
cheaply, while over the network (engine.remote.rows) a row is the TOP tokens the server lists and only
the branches a proof needs are expanded, so the two masses differed (log p(typed) -4.97 against
-6.54 on `ex` after 12 spaces of indentation) and the gate decided differently on the same
completion. The rows along a chosen covering are known on both, and their TOP tokens too. With
nothing typed (after punctuation) the normaliser is 1 and the coverings are the first row's tokens.

A *word* here is what one accept-next-word key takes (bench.replay.next_word): after the typed
prefix, any non-word characters and then a run of word characters, ending where a non-word
character follows; the end of a line also ends a unit (`);` before a line break). An end is
*confirmed* by the token that shows the next character (or by the end of generation); the
probability at an end includes that token, so it is the probability that the text goes on
exactly so far and the word ends there.

The *margin* is log P(first word | typed) minus the log-probability of the best of those coverings
that spells a different first word (an upper bound of that word's probability: its continuation can
only lower it). Coverings that stop inside the first word (" yest" against " yesterday") are
undecided and not counted. Nothing here decodes: it is arithmetic on rows already computed, so a
remote backend that provides rows provides these signals too.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence

from engine.core.word_choice import is_word_char
from engine.types import NO_RIVAL, Signals, WordEnd

# Tokens of each row the signals read: what a model server lists per row (engine.remote.rows N_PROBS,
# which must stay at least this), so both backends compute the same signals.
TOP = 40


def word_ends_of(text: str, start: int) -> list[int]:
    """Offsets past `start` where a word of `text` ends (a word character, then a non-word one)."""
    return [i for i in range(start + 1, len(text)) if is_word_char(text[i - 1]) and not is_word_char(text[i])]


def end_points(text: str, start: int, ended: bool) -> list[int]:
    """Where a unit of `text` past `start` ends: a word end, a line's end (the text before a line
    break: `);` is a unit there), and the end of the text when generation ended after it."""
    points = set(word_ends_of(text, start))
    points.update(i for i in range(start + 1, len(text)) if text[i] in "\r\n" and text[i - 1] not in "\r\n")
    if ended and len(text) > start and text[-1] not in "\r\n":
        points.add(len(text))
    return sorted(points)


def _decoded_lengths(pieces: Iterable[bytes]) -> list[int]:
    """Code points decoded after each piece (a piece may end inside a UTF-8 character)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    total, lengths = 0, []
    for piece in pieces:
        total += len(decoder.decode(piece))
        lengths.append(total)
    return lengths


def compute(
    required: str,
    steps: Sequence[tuple[bytes, float]],
    rivals: Iterable[tuple[bytes, float]] = (),
    typed_log_prob: float = 0.0,
    ended: bool = False,
    token_log_probs: tuple[float, ...] = (),
) -> Signals:
    """Signals of a completion that begins with `required`.

    `steps`: (bytes, log-probability given the typed prefix) in order: the chosen covering as one
    step (its log-probability already normalised), then each generated token. `ended`: generation
    ended after the last step (end of generation), which confirms a word ending at the very end.
    `rivals`: (bytes, normalised log-probability) of other coverings the search knows."""
    text = b"".join(piece for piece, _ in steps).decode("utf-8", "replace")
    lengths = _decoded_lengths(piece for piece, _ in steps)
    cumulative, total = [], 0.0
    for _, lp in steps:
        total += lp
        cumulative.append(total)
    start = len(required)
    ends: list[WordEnd] = []
    for at in end_points(text, start, ended):
        # the first step that shows the character after the end (or the end of generation) confirms it
        i = next((k for k, n in enumerate(lengths) if n > at), None)
        if i is None and ended:
            i = len(steps) - 1
        if i is not None:
            ends.append(WordEnd(at, cumulative[i]))
    if ends:
        word, word_lp = text[: ends[0].chars], ends[0].log_prob
    else:  # no word end confirmed: the whole text so far stands for the first word (an upper bound)
        word, word_lp = text, (cumulative[-1] if cumulative else 0.0)
    margin = NO_RIVAL
    best_rival = max((lp for piece, lp in rivals if _other_word(piece, word)), default=None)
    if best_rival is not None:
        margin = word_lp - best_rival
    steps_at = tuple(WordEnd(n, lp) for n, lp in zip(lengths, cumulative))
    return Signals(word_lp, margin, tuple(ends), typed_log_prob, token_log_probs, steps_at)


def _other_word(piece: bytes, word: str) -> bool:
    """A covering spelling `piece` surely begins with another first word than `word` (whose text
    ends where that word does): it disagrees with it, or goes on with a word character past it."""
    known = piece.decode("utf-8", "ignore")
    if word.startswith(known):
        return False  # stops inside the word (or at its end): undecided
    return not known.startswith(word) or is_word_char(known[len(word)])
