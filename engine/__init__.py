"""Inference core: exact required-prefix completion on llama.cpp, with KV reuse and cancellation.

`engine` knows nothing of LSP, documents or positions. Import of this package is cheap; the
llama.cpp bindings load only when `Engine` is first touched.
"""

from engine.types import (
    Alternative,
    BudgetError,
    Completion,
    CompletionRequest,
    ContextFile,
    DecodeStats,
    EngineConfig,
    ModelLoadError,
    ModelServerError,
    Prefetched,
    RepoContext,
    SamplingConfig,
    Signals,
    WordEnd,
)

__all__ = [
    "Alternative",
    "BudgetError",
    "Completion",
    "CompletionRequest",
    "ContextFile",
    "DecodeStats",
    "Engine",
    "EngineConfig",
    "ModelLoadError",
    "ModelServerError",
    "Prefetched",
    "RepoContext",
    "SamplingConfig",
    "Signals",
    "WordEnd",
]


def __getattr__(name: str):
    if name == "Engine":
        from engine.engine import Engine

        return Engine
    raise AttributeError(name)
