"""`python -m bench.profiled_server [server options]`: the language server with every Python thread
under cProfile, timed in each thread's own CPU time (`time.thread_time`).

CPU time, not wall time: the machines are shared, and a thread waiting for a core is not charged
for the wait, so the attribution holds on a loaded machine. What a thread spends inside a C call
(llama_decode, numpy, the tokenizer) is charged to the Python function that made it.
llama.cpp's own worker threads are not Python threads: only the calling thread's share of a
decode is counted.

Each thread's stats go to `<CPC_BENCH_PROFILE>.<thread name>.pstats` when it ends (the engine's
worker ends at shutdown), or at exit for a thread still running. bench.warm_cost (`--profile`)
starts this instead of `python -m lsp_server`. For benchmarks only: the product never profiles
itself.
"""

from __future__ import annotations

import cProfile
import os
import re
import sys
import threading
import time
from pathlib import Path

PROFILE_ENV = "CPC_BENCH_PROFILE"


class ThreadProfiles:
    """One cProfile profile per thread, written to `<base>.<thread name>.pstats`."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._running: dict[int, tuple[str, cProfile.Profile]] = {}

    def start(self, name: str) -> cProfile.Profile:
        profile = cProfile.Profile(time.thread_time)
        with self._lock:
            self._running[threading.get_ident()] = (name, profile)
        profile.enable()
        return profile

    def stop(self, name: str, profile: cProfile.Profile) -> None:
        profile.disable()
        with self._lock:
            self._running.pop(threading.get_ident(), None)
        self._write(name, profile)

    def stop_all(self) -> None:
        """At exit: write the threads still running (their profiles end here)."""
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for name, profile in running:
            self._write(name, profile)

    def _write(self, name: str, profile: cProfile.Profile) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        profile.dump_stats(str(self.base.with_name(f"{self.base.name}.{safe}.pstats")))


def install(profiles: ThreadProfiles) -> None:
    """Every thread started from now on runs under its own profile."""
    run = threading.Thread.run

    def profiled_run(thread: threading.Thread) -> None:
        name = f"{thread.name}-{threading.get_ident()}"
        profile = profiles.start(name)
        try:
            run(thread)
        finally:
            profiles.stop(name, profile)

    threading.Thread.run = profiled_run  # type: ignore[method-assign]


def main() -> int:
    from lsp_server.__main__ import main as serve

    profiles = ThreadProfiles(Path(os.environ[PROFILE_ENV]))
    install(profiles)
    profile = profiles.start("main")
    try:
        return serve(sys.argv[1:])
    finally:
        profiles.stop("main", profile)
        profiles.stop_all()


if __name__ == "__main__":
    sys.exit(main())
