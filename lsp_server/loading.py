"""What the scheduler runs and what a load reports: the engine's interface as the scheduler sees
it, and the events (a load's result, a model loading on first use, the model server's health) that
the scheduler and the routed default send to the server.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from engine import Completion, CompletionRequest, EngineConfig, Prefetched


class EngineLike(Protocol):
    """The part of `engine.Engine` the scheduler uses (a fake in unit tests)."""

    @property
    def model_id(self) -> str | None:
        """What makes the distributions (engine.Engine.model_id); None: not known yet."""
        ...

    def complete(self, request: CompletionRequest, cancel: threading.Event) -> Completion: ...

    def prefetch(self, request: CompletionRequest, cancel: threading.Event) -> Prefetched: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class LoadResult:
    config: EngineConfig
    error: str | None  # None: loaded; else what went wrong and what to do
    seconds: float
    kept: EngineConfig | None = None  # after a failed reload: the previous model, serving again
    kind: str | None = None  # a ModelServerError's kind ("unreachable", "auth", ...), else None
    retry_in: float | None = None  # seconds until the load is tried again (a server that may come back)
    retry: bool = False  # this result is from such a retry

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ServerHealth:
    """A change in how the model server answers requests: `kind` is None when it answers again.
    For "timeout": `seconds` since the slow request was sent, `budget_s` the request's budget, and
    `caught_up` once its prompt has been decoded after all (by the prefetch that went on with it)."""

    kind: str | None
    message: str  # what went wrong and what to do (never the key or document text)
    seconds: float | None = None
    budget_s: float | None = None
    caught_up: bool = False


@dataclass(frozen=True)
class ModelLoading:
    """A model starts loading on first use (the routed default loads each kind's model with the
    first document of that kind); its `LoadResult` follows."""

    config: EngineConfig


Event = LoadResult | ServerHealth | ModelLoading
