"""Inference core: exact required-prefix completion on llama.cpp, with KV reuse and cancellation.

`engine` knows nothing of LSP, documents or positions. Import of this package is cheap; the
llama.cpp bindings load only when `Engine` is first touched.
"""

from engine.types import (
    COLD_EXTRA_TOKENS,
    COLD_SHARE,
    NO_RIVAL,
    Alternative,
    BudgetError,
    Completion,
    CompletionRequest,
    ContextFile,
    DecodeStats,
    EngineConfig,
    HiddenCheck,
    ModelLoadError,
    ModelServerError,
    Prefetched,
    RepoContext,
    SamplingConfig,
    Signals,
    WordEnd,
    server_urls,
)

__all__ = [
    "COLD_EXTRA_TOKENS",
    "COLD_SHARE",
    "NO_RIVAL",
    "Alternative",
    "BudgetError",
    "Completion",
    "CompletionRequest",
    "HiddenCheck",
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
    "server_urls",
    "resolve_model",
]


def __getattr__(name: str):
    if name == "Engine":
        from engine.engine import Engine

        return Engine
    if name == "resolve_model":  # a catalogue name or a path -> the GGUF file (no llama.cpp); lazy, so
        from engine.model_files import (
            resolve_model,  # `python -m engine.model_files` runs it fresh
        )

        return resolve_model
    raise AttributeError(name)
