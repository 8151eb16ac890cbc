"""Two engines asked the same requests, compared: the remote backend against the in-process one,
on the seed examples and the mid-word cases (tests.support.cases) as the language server would ask
them (the pipeline, one line: tests.support.asking). Used by tests/engine/test_remote.py and bench.remote_engine.
"""

from __future__ import annotations

import statistics

from engine import CompletionRequest, Engine
from lsp_server.settings import Settings
from tests.support.asking import alone, asked
from tests.support.cases import build_cases

SEEDS = (
    ("Thanks for sending over the draft", " yest"),
    ("import", " num"),
    ("The model's", " behavi"),
    ("", "Once upon a ti"),
)


def seed_requests(max_tokens: int = 8) -> list[CompletionRequest]:
    return [CompletionRequest(prompt, required, max_tokens=max_tokens) for prompt, required in SEEDS]


def case_requests(n: int, max_tokens: int) -> list[tuple[str, CompletionRequest, str, str]]:
    """(label, request, typed, word) for `n` mid-word cases, as the language server would ask."""
    settings = alone(Settings(max_tokens=max_tokens))
    out = []
    for i, case in enumerate(build_cases(max(1, n // 4))[:n]):
        document = case.document()
        out.append(
            (f"{i}:{case.kind}:{case.word}", asked(document, len(document), settings).request, case.typed, case.word)
        )
    return out


def compare(local: Engine, remote: Engine, requests) -> dict:
    """Both engines on each (label, request, ...); the differing ones with their stats."""
    differ, fallbacks, trips = [], 0, []
    for label, request, *_ in requests:
        mine = local.complete(request)
        theirs = remote.complete(request)
        trips.append(theirs.stats.round_trips)
        fallbacks += theirs.stats.fallback is not None
        if mine.text != theirs.text:
            differ.append({
                "case": label, "local": mine.text, "remote": theirs.text,
                "local_cover_decodes": mine.stats.cover_decodes, "remote_round_trips": theirs.stats.round_trips,
                "remote_fallback": theirs.stats.fallback,
            })  # fmt: skip
    n = len(requests)
    return {
        "cases": n, "equal": n - len(differ), "share": (n - len(differ)) / max(1, n),
        "fallbacks": fallbacks, "round_trips_median": statistics.median(trips) if trips else None, "differ": differ,
    }  # fmt: skip
