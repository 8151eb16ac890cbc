"""The shipped confidence gate (lsp_server/calibrations.json) is reviewed data: `python -m
bench.gate_fit fit` prints a candidate and a person copies it here. This checks what was copied:
its shape (what lsp_server.confidence_gate reads, nothing missing or extra), and that it is plausible (every
catalogue model fitted, confidence rising with the probability, defaults inside (0, 1), the
unfitted default stricter than any fitted one, and the check ratios that docs/gate.md promises)."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path

import pytest

from engine.catalogue import CATALOGUE
from lsp_server.confidence_gate import CURSOR_CLASSES, Calibration, calibrations, gate_for

SHIPPED = Path(__file__).resolve().parents[2] / "lsp_server" / "calibrations.json"
DATA = json.loads(SHIPPED.read_text(encoding="utf-8"))
MODELS = DATA["models"]
SAVED_TARGET, PRECISION_TARGET = 0.9, 1.5  # on the check replay: docs/gate.md's rule for the default


def test_the_file_has_the_models_and_the_unfitted_default():
    assert set(DATA) == {"about", "models", "unfitted"}
    assert set(DATA["unfitted"]) == {"calibration_of", "min_confidence"}
    assert DATA["unfitted"]["calibration_of"] in MODELS
    assert set(CATALOGUE) <= set(MODELS), "every catalogue model ships with its own fit"
    for ident in MODELS:
        assert ident in CATALOGUE or (ident.startswith("sha256:") and len(ident) == len("sha256:") + 64), ident


@pytest.mark.parametrize("ident", sorted(MODELS))
def test_each_entry_has_the_shape_the_gate_reads(ident: str):
    entry = MODELS[ident]
    assert set(entry) == {"calibration", "min_confidence", "fitted_on", "check"}
    raw = entry["calibration"]
    assert set(raw) == {f.name for f in fields(Calibration)}
    assert len(raw["intercepts"]) == len(CURSOR_CLASSES)
    numbers = [*raw["intercepts"], *(v for k, v in raw.items() if k != "intercepts")]
    assert all(isinstance(x, (int, float)) and math.isfinite(x) for x in numbers), raw
    for name in ("tune", "check"):
        assert entry["fitted_on"][name]["passages"] > 0 and entry["fitted_on"][name]["chars"] > 0


@pytest.mark.parametrize("ident", sorted(MODELS))
def test_each_entry_is_plausible(ident: str):
    entry = MODELS[ident]
    gate = gate_for(ident)
    assert gate.fitted and gate.model == ident
    c = gate.calibration
    assert c.margin_cap > 0 and c.w_log_prob > 0 and c.w_word > 0
    for cursor in CURSOR_CLASSES:  # a likelier text is more likely right, at every kind of cursor
        assert c.confidence(cursor, -0.1, 3.0, True, True, -1.0) > c.confidence(cursor, -6.0, 3.0, True, True, -1.0)
    assert 0 < gate.threshold < 1
    assert entry["check"]["saved_ratio"] >= SAVED_TARGET and entry["check"]["precision_ratio"] >= PRECISION_TARGET


def test_a_model_without_a_fit_gets_a_stricter_default_than_any_fitted_one():
    fitted, unfitted = calibrations(SHIPPED)
    assert not unfitted.fitted and 0 < unfitted.threshold < 1
    assert unfitted.threshold > max(g.threshold for g in fitted.values())
    assert gate_for("sha256:" + "0" * 64) == unfitted
