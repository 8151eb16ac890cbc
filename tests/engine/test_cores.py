"""engine.cores: the thread count follows the cores other processes leave free."""

from __future__ import annotations

import os

import pytest

from engine.local import cores


class Clock:
    def __init__(self) -> None:
        self.now, self.busy, self.own = 100.0, 50.0, 5.0

    def advance(self, seconds: float, others: float, own: float) -> None:
        """`seconds` pass; other processes use `others` cores and this one `own` cores."""
        self.now += seconds
        self.busy += seconds * (others + own)
        self.own += seconds * own


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(cores.time, "monotonic", lambda: c.now)
    monkeypatch.setattr(cores, "_machine_busy_s", lambda: c.busy)
    monkeypatch.setattr(cores, "_own_cpu_s", lambda: c.own)
    monkeypatch.setattr(cores.os, "cpu_count", lambda: 2)
    return c


def test_idle_machine_uses_every_core(clock):
    meter = cores.CoreMeter(cores=2)
    clock.advance(1.0, others=0.05, own=0.0)
    assert meter.threads() == 2


def test_one_busy_core_of_two_leaves_one_thread_and_the_model_own_use_does_not_count(clock):
    meter = cores.CoreMeter(cores=2)
    clock.advance(0.5, others=1.0, own=1.0)  # the model on one core, a spinner on the other
    assert meter.threads() == 1 and meter.others == pytest.approx(1.0)
    clock.advance(0.5, others=0.0, own=1.0)  # the spinner stopped
    assert meter.threads() == 2


def test_a_small_background_load_still_counts_as_idle_but_a_third_of_a_core_does_not(clock):
    meter = cores.CoreMeter(cores=2)
    clock.advance(1.0, others=0.2, own=0.0)
    assert meter.threads() == 2
    clock.advance(1.0, others=0.35, own=0.0)
    assert meter.threads() == 1


def test_readings_closer_than_the_window_keep_the_last_choice(clock):
    meter = cores.CoreMeter(cores=2)
    clock.advance(1.0, others=1.0, own=0.0)
    assert meter.threads() == 1
    clock.advance(cores.WINDOW_S / 2, others=0.0, own=0.0)
    assert meter.threads() == 1  # too short a window to tell: unchanged
    clock.advance(cores.WINDOW_S, others=0.0, own=0.0)
    assert meter.threads() == 2


def test_never_more_than_the_usable_cores_and_never_zero(clock):
    meter = cores.CoreMeter(cores=1)
    clock.advance(1.0, others=0.0, own=0.0)
    assert meter.threads() == 1
    meter = cores.CoreMeter(cores=2)
    clock.advance(1.0, others=5.0, own=0.0)  # a heavy build
    assert meter.threads() == 1


def test_without_proc_every_core(monkeypatch):
    monkeypatch.setattr(cores, "_machine_busy_s", lambda: None)
    meter = cores.CoreMeter(cores=2)
    assert meter.threads() == 2


def test_usable_cores_is_the_affinity_mask():
    assert cores.usable_cores() == len(os.sched_getaffinity(0))


@pytest.mark.model
def test_changing_the_thread_count_mid_request_changes_no_token():
    """The default (threads None) re-chooses its thread count before every decode; forced to
    alternate 1, 2, 1, ... it still produces the one-thread run's greedy text."""
    from engine import CompletionRequest, Engine, EngineConfig
    from tests.lsp_server.test_huge import prose

    request = CompletionRequest(prose(3_000, 5) + "\nThanks for sending over the draft", " yest", max_tokens=12)
    fixed = Engine.load(EngineConfig(threads=1, memory_budget_mib=0))
    try:
        expected = fixed.complete(request).text
    finally:
        fixed.close()
    engine = Engine.load(EngineConfig(threads=None, memory_budget_mib=0))
    try:
        context = engine._context
        counts = iter([1, 2] * 1000)
        context._meter.threads = lambda: next(counts)
        done = engine.complete(request)
        assert context.threads in (1, 2)
        assert done.text == expected and done.text.startswith(" yest")
    finally:
        engine.close()
