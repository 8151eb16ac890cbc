"""The confidence gate: show a suggestion only as far as it is likely to be accepted.

Raw probabilities of a small model are badly calibrated, so the gate does not threshold them. It
maps the engine's signals (engine.signals: the probability of the text so far *given what was
typed*, and the margin of the first word to the best other word) and the cursor class to a
calibrated probability that the text up to a word end is exactly right:

    confidence = sigmoid(INTERCEPT[class] + W_LOG_PROB · log P(text so far | typed)
                         + W_MARGIN · min(margin, MARGIN_CAP) + W_FIRST · [first word]
                         + W_WORD · [has a word character] + W_TYPED · log p(typed | prompt)
                         + W_LINE_START · [the cursor is in a line's indentation]
                         + W_MIN_STEP · the least log-probability of one step up to there
                         + W_LENGTH · log(1 + characters of the text so far, spaces aside))

The last term is the weakest link: the covering (given what was typed) and each generated token
up to the step that confirms the word end (`Signals.step_ends`); one unlikely token says more than
the sum does (on Gemma's records it lifted the first word's AUC on the check set from 0.81 to 0.86).
The length term: a long piece is exactly right less often than its probability says (fitted
negative for all three models). Without it no threshold met both of the gate's targets on the
0.5B's check records (at best 0.90x the characters saved at 1.49x the precision); with it its
default keeps 0.91x at 1.53x (docs/gate.md).

A suggestion is shown up to the last word end at which the confidence is still at least
`minConfidence` (null: the model's own threshold); nothing when its first word is below. It is arithmetic on numbers the engine
returned with the completion: typing along a suggestion stays free.

The coefficients are fitted per model by `python -m bench.gate_fit fit --model NAME` (a logistic
regression, numpy only) on the tuning replay's saved records, and checked on a replay of other
files (see bench.gate_fit). They live in `calibrations.json` beside this module, keyed by the model's
identity (its catalogue name, or "sha256:<hex>" of its file), with the model's default threshold;
a small model's probabilities are miscalibrated each in its own way, so one fit does not carry to
another (Gemma's coefficients kept 80% of the 0.5B's characters saved for 1.48x the precision).
A model with no fit gets the `unfitted` entry: a conservative default (docs/gate.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engine import HiddenCheck, Signals
from lsp_server.split import LINE_BREAKS, Split, is_word_char

CURSOR_CLASSES = ("inside a word", "word start", "after punctuation")


@dataclass(frozen=True)
class Calibration:
    """Logistic coefficients (see the module docstring); one intercept per cursor class."""

    intercepts: tuple[float, float, float]  # in CURSOR_CLASSES order
    w_log_prob: float  # log P(text so far | typed)
    w_margin: float  # the first word's margin, capped at margin_cap
    w_first: float  # this is the first word end
    w_word: float  # the text so far has a word character (`);` alone has none)
    w_typed: float  # log p(typed prefix | prompt), floored at -TYPED_FLOOR: was the user's word expected?
    margin_cap: float = 10.0
    # Nothing but indentation before the cursor on its line (a "word start" where the model guesses
    # a whole statement): a calibration fitted without it has 0 here.
    w_line_start: float = 0.0
    w_min_step: float = 0.0  # the least step log-probability up to the word end, floored at -TYPED_FLOOR
    w_length: float = 0.0  # log(1 + characters past the typed prefix up to the word end, spaces aside)

    def confidence(
        self,
        cursor: str,
        log_prob: float,
        margin: float,
        first: bool,
        word: bool,
        typed: float,
        line_start: bool = False,
        min_step: float = 0.0,
        length: int = 0,
    ) -> float:
        z = self.intercepts[CURSOR_CLASSES.index(cursor)] + self.w_log_prob * min(log_prob, 0.0)
        z += self.w_margin * min(margin, self.margin_cap) + self.w_first * first + self.w_word * word
        z += self.w_typed * max(typed, -TYPED_FLOOR) + self.w_line_start * line_start
        z += self.w_min_step * max(min(min_step, 0.0), -TYPED_FLOOR) + self.w_length * math.log1p(length)
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


TYPED_FLOOR = 20.0
CALIBRATIONS = Path(__file__).with_name(
    "calibrations.json"
)  # reviewed data: `python -m bench.gate_fit fit` prints a candidate
DEFAULT_MODEL = "gemma-3-270m"  # the model installed with the server (engine.model_files)


@dataclass(frozen=True)
class ModelGate:
    """One model's gate: its calibration and its default `minConfidence`."""

    model: str | None  # the identity it was fitted for (None: the conservative default)
    calibration: Calibration
    threshold: float  # the model's default minConfidence

    @property
    def fitted(self) -> bool:
        return self.model is not None


def _calibration(raw: dict[str, Any]) -> Calibration:
    return Calibration(**{**raw, "intercepts": tuple(raw["intercepts"])})


@cache
def calibrations(path: Path = CALIBRATIONS) -> tuple[dict[str, ModelGate], ModelGate]:
    """(model identity -> its fitted gate, the gate for a model without one), read once."""
    data = json.loads(path.read_text(encoding="utf-8"))
    fitted = {
        ident: ModelGate(ident, _calibration(entry["calibration"]), float(entry["min_confidence"]))
        for ident, entry in data["models"].items()
    }
    default = data["unfitted"]
    base = fitted[default["calibration_of"]].calibration
    return fitted, ModelGate(None, base, float(default["min_confidence"]))


def gate_for(model: str | None) -> ModelGate:
    """The gate of the model with this identity (Engine.model_id: a catalogue name or
    "sha256:<hex>"); a model with no fitted calibration gets the conservative default."""
    fitted, default = calibrations()
    return fitted.get(model or "", default)


def identity(engine_model_id: str | None) -> str | None:
    """The identity of the model that answered, for `gate_for`: the engine's own (Engine.model_id,
    read on the worker right after the call, so the routed default's answering model); None (an
    engine that does not say) gets the unfitted default."""
    return engine_model_id or None


def threshold(gate: ModelGate, min_confidence: float | None) -> float:
    """`minConfidence` as set, else (null) the model's own threshold."""
    return gate.threshold if min_confidence is None else min_confidence


# The default model's, for callers that judge without a loaded engine (tests, the bench's replays).
CALIBRATION = calibrations()[0][DEFAULT_MODEL].calibration


def cursor_class(split: Split) -> str:
    """Inside a word (a partial word is typed), at a word start (after whitespace or at a line's
    start) or after punctuation (any other character before the cursor)."""
    if split.word:
        return CURSOR_CLASSES[0]
    before = split.required[-1:] or split.prompt[-1:]
    if not before or before.isspace() or before in LINE_BREAKS:
        return CURSOR_CLASSES[1]
    return CURSOR_CLASSES[2]


def at_line_start(split: Split) -> bool:
    """Nothing but indentation (or nothing) before the cursor on its line."""
    return not split.word and (not split.prompt or split.prompt[-1] in LINE_BREAKS) and not split.required.strip()


def weakest_steps(signals: Signals) -> list[tuple[int, float]]:
    """(characters, the least step log-probability so far) at each step of `signals.step_ends`."""
    out, previous, least = [], 0.0, 0.0
    for end in signals.step_ends:
        least = min(least, end.log_prob - previous)
        previous = end.log_prob
        out.append((end.chars, least))
    return out


def piece_length(piece: str) -> int:
    """The length the gate's `w_length` reads: the characters of a piece of suggestion, spaces aside."""
    return len(piece.strip())


def min_step_at(weakest: list[tuple[int, float]], chars: int) -> float:
    """The least step log-probability up to the step that reaches `chars` (0: no steps known)."""
    for reached, least in weakest:
        if reached >= chars:
            return least
    return weakest[-1][1] if weakest else 0.0


def confidences(
    text: str,
    start: int,
    signals: Signals,
    cursor: str,
    calibration: Calibration = CALIBRATION,
    line_start: bool = False,
) -> list[tuple[int, float]]:
    """(characters of the completion's `text`, confidence) at each of its word ends, in order;
    `start`: where the text after the typed prefix begins; `line_start`: `at_line_start`."""
    out = []
    weakest = weakest_steps(signals)
    for i, end in enumerate(signals.word_ends):
        piece = text[start : end.chars]
        word = any(is_word_char(ch) for ch in piece)
        c = calibration.confidence(
            cursor,
            end.log_prob,
            signals.margin,
            i == 0,
            word,
            signals.typed_log_prob,
            line_start,
            min_step_at(weakest, end.chars),
            piece_length(piece),
        )
        out.append((end.chars, c))
    return out


def hidden_check(split: Split, min_confidence: float | None) -> HiddenCheck:
    """The engine's stop check for a suggestion at `split` (CompletionRequest.hidden): True once a
    word end of it is below the gate of the model making it. `confident_length` shows nothing past
    the first such end (on any line: a block is cut there too), so generating on is work no one
    sees (32 of 48 fresh engine calls showed nothing, docs/speed.md); what typing along it needs
    is made after the answer (lsp_server.server `_rest_later`)."""
    cursor, line_start, start = cursor_class(split), at_line_start(split), len(split.required)

    def hidden(model: str | None, text: str, signals: Signals) -> bool:
        gate = gate_for(model)
        least = threshold(gate, min_confidence)
        return least > 0 and any(
            c < least for _, c in confidences(text, start, signals, cursor, gate.calibration, line_start)
        )

    return hidden


def confident_length(
    text: str,
    start: int,
    signals: Signals,
    cursor: str,
    min_confidence: float,
    limit: int,
    calibration: Calibration = CALIBRATION,
    line_start: bool = False,
) -> int:
    """How much of the completion's `text` to show: up to the last word end at most `limit`
    characters in whose confidence, and every earlier one's, is at least `min_confidence`; 0 when
    the first is below. `start`: where the text after the typed prefix begins (the required
    prefix's length). Per line of a multi-line suggestion: pass the line's end as `limit`."""
    kept = 0
    for chars, confidence in confidences(text, start, signals, cursor, calibration, line_start):
        if chars > limit or confidence < min_confidence:
            break
        kept = chars
    return kept
