"""How busy the machine was with *other* work during a run (Linux /proc; None elsewhere).

The load average counts the benchmark's own threads, so it cannot tell a quiet run from a
contended one. Instead: CPU time all processes used during the run, minus what this process and
the server used, as a share of the CPU time available.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_seconds() -> float | None:
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / TICKS


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process (all its threads)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_until_idle(pids: Sequence[int], still_for: float = 0.2, at_most: float = 10.0) -> None:
    """Until processes `pids` (a language server, a llama-server) stop using the CPU: their CPU
    time still for `still_for` seconds (waiting `at_most`), so what they make after an answer (a
    prefetch, the rest of a hidden suggestion) is not in what is timed next."""
    cpu = lambda: sum(process_cpu_seconds(pid) or 0.0 for pid in pids)  # noqa: E731
    deadline = time.monotonic() + at_most
    last = cpu()
    while time.monotonic() < deadline:
        time.sleep(still_for)
        now = cpu()
        if now - last < 0.1 * still_for:
            return
        last = now


@dataclass
class CpuWatch:
    wall: float
    busy: float | None
    own: float

    @classmethod
    def start(cls) -> CpuWatch:
        t = os.times()
        return cls(time.perf_counter(), _busy_seconds(), t.user + t.system)

    def others_share(self, server_cpu_seconds: float = 0.0) -> float | None:
        """Share of all CPUs used by other processes since `start` (0.0 = the machine was ours)."""
        busy = _busy_seconds()
        if busy is None or self.busy is None:
            return None
        t = os.times()
        own = t.user + t.system - self.own + server_cpu_seconds
        available = (time.perf_counter() - self.wall) * (os.cpu_count() or 1)
        return max(0.0, (busy - self.busy - own) / available) if available > 0 else None
