"""The gate's calibration fit, the threshold choice and the replay walk over records (no model)."""

import math

import numpy as np

from bench.gate_fit import (
    FEATURES,
    PRECISION_TARGET,
    SAVED_TARGET,
    calibration_of,
    choose,
    fit_logistic,
    points,
    simulate,
    weights_of,
    word_done,
)
from lsp_server.confidence_gate import CURSOR_CLASSES


def test_newton_recovers_the_coefficients_of_a_known_logistic_model():
    rng = np.random.default_rng(0)
    n = 60_000
    cls = rng.integers(0, 3, n)
    x = np.zeros((n, len(FEATURES)))
    x[np.arange(n), cls] = 1.0
    x[:, 3] = -rng.exponential(2.0, n)  # log-probabilities
    x[:, 4] = rng.uniform(0, 10, n)
    x[:, 5] = rng.integers(0, 2, n)
    x[:, 6] = rng.integers(0, 2, n)
    x[:, 7] = -rng.exponential(3.0, n)
    x[:, 8] = (cls == 1) & (rng.uniform(size=n) < 0.5)  # a line start is a word start
    x[:, 9] = np.maximum(x[:, 3], -rng.exponential(1.0, n))  # the weakest step is no less probable than the whole
    x[:, 10] = np.log1p(rng.integers(0, 20, n))  # the piece's length
    true = np.array([-1.0, -2.0, -1.5, 1.2, 0.2, 0.5, 2.0, 0.05, -0.7, 0.4, -0.6])
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(x @ true)))).astype(float)
    w = fit_logistic(x, y)
    assert np.allclose(w, true, atol=0.15), w
    c = calibration_of(w, 10.0)
    assert np.allclose(weights_of(c), w)
    z = w[1] + w[3] * -0.5 + w[4] * 3.0 + w[5] + w[6] + w[7] * -1.0
    assert math.isclose(c.confidence(CURSOR_CLASSES[1], -0.5, 3.0, True, True, -1.0), 1 / (1 + math.exp(-z)))


def test_the_default_clears_both_targets_by_the_most():
    curve = [
        {"threshold": 0.0, "precision": 0.2, "saved": 0.5},
        {"threshold": 0.1, "precision": 0.28, "saved": 0.49},  # precision 1.4x: misses
        {"threshold": 0.2, "precision": 0.32, "saved": 0.48},  # 1.6x / 0.96x: headroom min(1.067, 1.067)
        {"threshold": 0.3, "precision": 0.40, "saved": 0.46},  # 2.0x / 0.92x: min(1.33, 1.022)
        {"threshold": 0.4, "precision": 0.60, "saved": 0.40},  # 0.8x saved: misses
    ]
    assert (SAVED_TARGET, PRECISION_TARGET) == (0.9, 1.5)
    assert choose(curve) == 0.2
    # With a second set, the threshold clears both targets on both sets by the most: 0.2 misses the
    # precision there (1.45x), 0.3 keeps 1.7x / 0.92x there and 2.0x / 0.92x here.
    other = [
        {"threshold": 0.0, "precision": 0.2, "saved": 0.5},
        {"threshold": 0.1, "precision": 0.26, "saved": 0.49},
        {"threshold": 0.2, "precision": 0.29, "saved": 0.47},
        {"threshold": 0.3, "precision": 0.34, "saved": 0.46},
        {"threshold": 0.4, "precision": 0.5, "saved": 0.35},
    ]
    assert choose(curve, other) == 0.3


def record(shown, log_prob=-0.1, ends=None):
    ends = ends if ends is not None else []
    return {
        "shown": shown,
        "signals": {"wordLogProb": log_prob, "margin": 3.0, "typedLogProb": 0.0, "wordEnds": ends},
        "ms": 1,
    }


def test_the_walk_over_records_accepts_a_right_word_and_jumps_past_it():
    """The passage "ab cd" typed at the end: at position 0 the suggestion "ab cd" is right (its next
    word "ab"), so the user jumps to position 2; there nothing is shown, so " " is typed; at 3 "cd"
    is right. With a threshold above every confidence nothing is shown and every character is typed."""
    passage = {"kind": "prose", "text": "ab cd", "before": "x\n", "after": ""}
    positions = [
        record("ab cd", ends=[[2, -0.1], [5, -0.2]]),  # at 0: "ab" is right
        record("bx", ends=[]),
        record(None),  # at 2 (after "ab"): nothing
        record("cd", ends=[]),  # at 3 (after "ab "): right, but no confirmed word end to gate by
        record("d", ends=[]),
    ]
    pts = points(passage, {"where": "end", "positions": positions})
    assert [p.cls for p in pts][:3] == [CURSOR_CLASSES[1], CURSOR_CLASSES[0], CURSOR_CLASSES[0]]
    (run,) = simulate([(passage, pts, "end")], 0.0)
    assert run["accepts"] == 2 and run["accepted"] == 4 and run["typed"] == 1 and run["chars"] == 5
    (gated,) = simulate([(passage, pts, "end")], 0.99)
    assert gated["accepts"] == 0 and gated["shown"] == 0 and gated["typed"] == 5


def test_the_peer_stream_stops_once_its_first_word_has_ended():
    assert not word_done(" foo")
    assert word_done(" foo(")
    assert not word_done("(")
    assert word_done("(x)")


def test_a_suggestion_of_the_next_line_at_a_line_end_is_replayed_as_the_server_shapes_it():
    """At a line's end the server may suggest the next line (its text starts with a line break):
    the replay shapes it with the server's block (suggestion.shaping_block), so it is shown and
    accepted across the line break, with the gate off and at a threshold its confidence clears."""
    passage = {"kind": "python", "text": "x = 1\ny = 2", "before": "def f():\n", "after": ""}
    positions = [record(None) for _ in range(5)]
    # at 5, the line's end: the item starts with the partial word "1", the engine's text with " 1"
    positions.append(record("1\ny = 2", log_prob=-0.1, ends=[[4, -0.1], [8, -0.2]]))
    positions += [record(None) for _ in range(5)]
    pts = points(passage, {"where": "end", "positions": positions})
    assert pts[5].block is not None
    (run,) = simulate([(passage, pts, "end")], 0.0)
    assert run["accepts"] == 1 and run["accepted"] == 2  # "\ny": the next line's first word
    (gated,) = simulate([(passage, pts, "end")], 0.99)
    assert gated["accepts"] == 0
