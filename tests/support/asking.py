"""How a benchmark asks for one case: through the language server's own pipeline
(lsp_server.pipeline: split, block, request, gate, shaping), so it measures what the editor runs.

A benchmark of one stage turns the others off in its settings (`alone`) instead of leaving their
code out: the request and the suggestion are then the pipeline's, with those stages doing nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine import Completion, RepoContext
from lsp_server.documents import Document
from lsp_server.pipeline import Ask, ask, shape, snapshot
from lsp_server.settings import Settings
from lsp_server.suggestion import Suggestion

# Every stage a one-case benchmark may leave out, off: no alternatives, one line, no gate, no
# document words, no other files' context, no text after the cursor in the prompt.
STAGES_OFF: dict[str, Any] = {
    "alternatives": 0, "multi_line": "off", "min_confidence": 0.0, "lexicon": False, "extra_context": False,
    "fim_suffix_lines": 0,
}  # fmt: skip


def alone(settings: Settings, **kept: Any) -> Settings:
    """`settings` with the stages of STAGES_OFF off, except those given in `kept` (their values)."""
    return replace(settings, **{**STAGES_OFF, **kept})


def one_line(settings: Settings) -> Settings:
    """`settings` with suggestions kept to one line (`multiLine` "off"), the rest as they are."""
    return replace(settings, multi_line="off")


def asked(text: str, cursor: int, settings: Settings, language: str = "", context: RepoContext | None = None) -> Ask:
    """The pipeline's engine request at `cursor` of `text` (a document of its own), with other
    files' `context` as the benchmark chose it."""
    return ask(snapshot("", Document("", text, language_id=language), cursor, settings), settings, context=context)


def shown(step: Ask, completion: Completion, model: str | None = None) -> Suggestion | None:
    """The first item the pipeline shows for `completion`, the answer to `step` (the gate of `model`)."""
    found = shape(step, completion, model)[1]
    return found[0] if found else None
