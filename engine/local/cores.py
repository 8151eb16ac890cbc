"""How many cores the model may use right now: all of them on an idle machine, fewer while other
processes keep some busy.

Why: llama.cpp's threads meet at a barrier after every operation of a decode. When another
process holds a core, the thread that shares it waits for its time slice at each barrier, and one
cold request took 3.0x as long with one of two cores busy. One thread fewer than the cores others
leave free avoids that; on an idle machine every core is used. The share other processes used is
read from /proc/stat (all CPUs) minus this process's own CPU time (/proc/self/stat), over the time
since the last reading (at least `WINDOW_S`), so the choice follows the machine within one prompt
chunk. Where /proc cannot be read the answer is every core.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WINDOW_S = 0.1  # /proc/stat counts in 10 ms ticks: shorter windows are mostly rounding
IDLE_MARGIN = 0.25  # cores others may use and still count as idle (a browser tab, an editor)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), not every core of the machine."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _machine_busy_s() -> float | None:
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / _TICKS


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class CoreMeter:
    """`threads()`: the thread count for the next decode, at most `cores`."""

    def __init__(self, cores: int | None = None) -> None:
        self.cores = cores or usable_cores()
        self._last = (time.monotonic(), _machine_busy_s(), _own_cpu_s())
        self._threads = self.cores
        self.others = 0.0  # cores other processes used over the last window (diagnostics)

    def threads(self) -> int:
        now = time.monotonic()
        then, busy_then, own_then = self._last
        if now - then < WINDOW_S:
            return self._threads
        busy, own = _machine_busy_s(), _own_cpu_s()
        self._last = (now, busy, own)
        if busy is None or busy_then is None:
            return self._threads
        self.others = max(0.0, (busy - busy_then) - (own - own_then)) / (now - then)
        free = (os.cpu_count() or self.cores) - self.others
        self._threads = max(1, min(self.cores, int(free + IDLE_MARGIN)))
        return self._threads
