"""A completion the gate hid, judged again after the user typed some of it: no model work.

The engine computed the whole completion and, for each step of it (the covering, then each token),
log P(text so far | what was typed) (`Signals.step_ends`). When the user types along it, the
confidence of the rest given what is *now* typed is arithmetic on those numbers:

    log P(text up to a word end | typed + t) = log P(text up to it | typed) - log P(typed + t | typed)

where log P(typed + t | typed) is read at the step that first covers `t` (one covering's share, as
the engine's own normaliser is the mass of the coverings it found). The word ends are shifted to
the new required prefix (after a space the prompt grows by a word, and the required prefix is only
what follows it), and the gate (lsp_server.confidence_gate) judges the result as if the engine had answered.
At temperature 0 this is the same text the engine would give: the most probable covering of a
longer typed prefix is the path already taken.
"""

from __future__ import annotations

from dataclasses import replace

from engine import NO_RIVAL, Completion, Signals, WordEnd
from lsp_server.split import LINE_BREAKS, Split


def _log_prob_at(signals: Signals, start: int, chars: int) -> float:
    """log P(the completion's text begins with its first `chars` code points | typed); `start`:
    the required prefix's length (up to there it is given). Read at the first step reaching
    `chars`; without step ends (an older engine), at the last word end before it (a lower bound
    of the rest's confidence)."""
    if chars <= start:
        return 0.0
    if signals.step_ends:
        for end in signals.step_ends:
            if end.chars >= chars:
                return end.log_prob
        return signals.step_ends[-1].log_prob
    before = [end.log_prob for end in signals.word_ends if end.chars <= chars]
    return before[-1] if before else 0.0


def along(completion: Completion, required: str, typed: str, now: Split) -> Completion | None:
    """`completion` (made for the required prefix `required`) as the engine would give it at
    `now`, the split after `typed` was typed along it; None when `typed` leaves it (or crosses a
    line), or it has no signals to judge it by."""
    s = completion.signals
    text = completion.text
    if s is None or completion.cancelled or not text.startswith(required) or any(c in LINE_BREAKS for c in typed):
        return None
    start = len(required)
    at = start + len(typed)  # the new cursor, in `text`
    if not text.startswith(typed, start) or not text[:at].endswith(now.required):
        return None
    shift = at - len(now.required)  # how far the new text's start is into the old one
    lp_typed = _log_prob_at(s, start, at)
    ends = tuple(WordEnd(e.chars - shift, e.log_prob - lp_typed) for e in s.word_ends if e.chars > at)
    steps = tuple(WordEnd(e.chars - shift, e.log_prob - lp_typed) for e in s.step_ends if e.chars > at)
    same_word = bool(ends) and bool(s.word_ends) and s.word_ends[0].chars == ends[0].chars + shift
    # log p(the new required prefix | the new prompt): the old normaliser and what was typed when
    # the prompt is the same, else what the new prompt's required part took of the old text
    typed_lp = s.typed_log_prob + lp_typed if shift == 0 else lp_typed - _log_prob_at(s, start, shift)
    signals = Signals(
        word_log_prob=ends[0].log_prob if ends else 0.0,
        margin=s.margin if same_word else NO_RIVAL,  # rivals known only for the first word
        word_ends=ends,
        typed_log_prob=typed_lp,
        token_log_probs=s.token_log_probs,
        step_ends=steps,
    )
    return replace(completion, text=now.required + text[at:], signals=signals, alternatives=())
