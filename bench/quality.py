"""Quality at mid-word cursors: is the first word after the cursor the word the author wrote?

Three ways to ask, on the same cases and the same token budget, greedy:

- ``naive``: the text with the partial word in the prompt, no constraint;
- ``mask``: the word-boundary split, per-step masking of the required prefix (seed 001);
- ``exact``: the split with the exact covering search (what the server does).

``naive`` and ``mask`` run through the engine in this process with the server's own pipeline
(`tests.support.asking`: split, request and suggestion, one line, no gate), which is faster
than a server round trip per case (the server's ``method`` setting runs them too); ``exact`` runs
through the real server over LSP. ``exact``
also runs through the engine, to check that the two paths suggest the same thing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from engine import CompletionRequest, SamplingConfig
from lsp_server.settings import Settings
from lsp_server.split import is_word_char
from tests.support.asking import alone, asked, shown
from tests.support.cases import KINDS, Case
from tests.support.lsp_client import Editor, insert_text

METHODS = ("naive", "mask", "exact")
LANGUAGES = {"python": "python", "javascript": "javascript", "c": "c", "prose": "plaintext"}


@dataclass(frozen=True)
class Outcome:
    case: int
    kind: str
    method: str
    via: str  # "server" or "engine"
    suggestion: str | None  # what would replace the partial word (None: nothing shown)
    correct: bool  # the first word after the cursor is the original word
    begins_with_typed: bool | None  # the model's output starts with what was typed (None: n/a)
    cover_decodes: int | None = None
    decoded_tokens: int | None = None


def first_word(text: str) -> str:
    end = 0
    while end < len(text) and is_word_char(text[end]):
        end += 1
    return text[:end]


def _outcome(i: int, case: Case, method: str, via: str, shown: str | None, begins: bool | None, **extra) -> Outcome:
    finished = first_word(shown) if shown is not None else case.typed
    return Outcome(i, case.kind, method, via, shown, finished == case.word, begins, **extra)


def run_engine(engine, cases: list[Case], max_tokens: int, methods: tuple[str, ...] = METHODS) -> list[Outcome]:
    """`naive`, `mask` and (as a cross-check) `exact` through the engine, the server's split and suggestion code."""
    outcomes = []
    for i, case in enumerate(cases):
        document = case.document()
        for method in methods:
            if method == "naive":
                request = CompletionRequest(document, "", max_tokens, sampling=SamplingConfig())
                completion = engine.complete(request)
                added = completion.text.split("\n", 1)[0]
                outcomes.append(
                    _outcome(i, case, method, "engine", case.typed + added if added.strip() else None, None)
                )
                continue
            step = asked(document, len(document), alone(Settings(max_tokens=max_tokens, method=method)))
            parts = step.snapshot.parts
            completion = engine.complete(step.request)
            found = shown(step, completion)
            outcomes.append(_outcome(
                i, case, method, "engine", found.insert_text if found else None,
                completion.text.startswith(parts.required),
                cover_decodes=completion.stats.cover_decodes, decoded_tokens=completion.stats.decoded_tokens,
            ))  # fmt: skip
    return outcomes


def run_server(editor: Editor, cases: list[Case], timeout: float = 120.0) -> list[Outcome]:
    """`exact` through the real server: open the case's document, ask at its end, read the stats
    (`timeout`: seconds one request may take; a bigger model on a busy machine needs more)."""
    outcomes = []
    for i, case in enumerate(cases):
        uri = f"file:///bench/quality/{i}-{case.kind}.txt"
        document = case.document()
        editor.open(uri, document, LANGUAGES[case.kind])
        shown = insert_text(editor.inline(uri, timeout=timeout))
        stats = editor.stats() or {}
        editor.close(uri)
        begins = bool(stats.get("requiredSatisfied")) and (shown is None or shown.startswith(case.typed))
        outcomes.append(_outcome(
            i, case, "exact", "server", shown, begins,
            cover_decodes=stats.get("coverDecodes"), decoded_tokens=stats.get("decodedTokens"),
        ))  # fmt: skip
    return outcomes


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarize(outcomes: list[Outcome], cases: list[Case]) -> dict[str, Any]:
    """Accuracy per method and kind of text (the server's row for `exact`), plus the cross-check."""
    chosen = [o for o in outcomes if o.method != "exact" or o.via == "server"]
    by: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    for o in chosen:
        by[(o.method, o.kind)].append(o)
        by[(o.method, "all")].append(o)
    kinds = [k for k in KINDS if any(c.kind == k for c in cases)] + ["all"]
    rows = []
    for method in METHODS:
        via = "server" if method == "exact" else "engine"
        row: dict[str, Any] = {"method": method, "via": via}
        for kind in kinds:
            row[kind] = _share([o.correct for o in by[(method, kind)]])
        every = by[(method, "all")]
        row["cases"] = len(every)
        row["shown"] = _share([o.suggestion is not None for o in every])
        begins = [o.begins_with_typed for o in every if o.begins_with_typed is not None]
        row["begins_with_typed"] = _share(begins)
        rows.append(row)
    engine_exact = {o.case: o.suggestion for o in outcomes if o.method == "exact" and o.via == "engine"}
    server_exact = {o.case: o.suggestion for o in outcomes if o.method == "exact" and o.via == "server"}
    both = sorted(set(engine_exact) & set(server_exact))
    same = sum(engine_exact[i] == server_exact[i] for i in both)
    same_word = sum(_word(engine_exact[i]) == _word(server_exact[i]) for i in both)
    return {
        "kinds": kinds,
        "rows": rows,
        "per_kind_cases": {k: sum(c.kind == k for c in cases) for k in kinds[:-1]},
        "server_matches_engine": f"{same}/{len(both)}",
        "server_matches_engine_first_word": f"{same_word}/{len(both)}",
    }


def _word(suggestion: str | None) -> str | None:
    return None if suggestion is None else first_word(suggestion)


def outcomes_from_json(rows: list[dict[str, Any]]) -> list[Outcome]:
    return [Outcome(**row) for row in rows]


def outcomes_json(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [asdict(o) for o in outcomes]
