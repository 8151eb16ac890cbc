"""bench.machine.wait_until_idle: the benches wait for a server's work after an answer with it."""

from __future__ import annotations

import pytest

from bench import machine


def _fake_clock(monkeypatch: pytest.MonkeyPatch, cpu_seconds: list[float]) -> list[float]:
    """Sleeps advance a fake clock; each read of the processes' CPU time takes the next value
    (the last one repeats). Returns the sleeps taken."""
    now = [0.0]
    slept: list[float] = []
    readings = iter(cpu_seconds)
    last = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    def cpu(pid: int) -> float:
        last[0] = next(readings, last[0])
        return last[0]

    monkeypatch.setattr(machine.time, "sleep", sleep)
    monkeypatch.setattr(machine.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(machine, "process_cpu_seconds", cpu)
    return slept


def test_returns_after_one_still_interval_when_nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _fake_clock(monkeypatch, [5.0, 5.0])
    machine.wait_until_idle([1])
    assert slept == [0.2]


def test_waits_while_the_process_uses_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # busy for three intervals (0.2 s of CPU each), then still
    slept = _fake_clock(monkeypatch, [1.0, 1.2, 1.4, 1.6, 1.61])
    machine.wait_until_idle([1])
    assert len(slept) == 4


def test_gives_up_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _fake_clock(monkeypatch, [float(n) for n in range(100)])
    machine.wait_until_idle([1], still_for=0.5, at_most=2.0)
    assert sum(slept) == pytest.approx(2.0)


def test_no_process_is_idle_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _fake_clock(monkeypatch, [])
    machine.wait_until_idle([])
    assert slept == [0.2]
