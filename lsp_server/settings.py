"""User settings: one typed, immutable value, and the validation that produces it.

Clients send settings as JSON under the section ``cpcLsp`` (in ``initializationOptions`` and
``workspace/didChangeConfiguration``). Updates are patches: a key that is absent keeps its value,
``null`` restores the default (for ``model``, so does ``""``: the model given on the command line,
else the one from PyPI), and an invalid value is reported and leaves the old value in place.
Unknown keys are ignored, since editors put their own keys in the same section (``trace.server``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import EngineConfig, SamplingConfig

SECTION = "cpcLsp"


@dataclass(frozen=True)
class Settings:
    """Every knob the server reads, with its default."""

    model: str | None = None  # GGUF path; None: the default model from PyPI
    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repetition_penalty: float = 1.0
    seed: int = 0
    single_line: bool = True
    context_tokens: int = 2048
    stop: tuple[str, ...] = ()
    max_cover_decodes: int = 8
    method: str = "exact"  # "exact" | "mask" | "naive": how the typed word is honoured (for comparisons)
    threads: int = 0  # CPU threads for the model; 0: all cores
    memory_budget_mib: int = 128  # KV kept for other recent documents (each context costs 36 MiB)
    prefetch: bool = True  # decode an opened or edited document's prompt while the engine is idle
    log_document_text: bool = False  # debug only: lets logs carry document text

    def engine_config(self) -> EngineConfig:
        """What loading the engine needs; a change here means a reload."""
        path = None if self.model is None else Path(self.model).expanduser()
        return EngineConfig(
            model_path=path,
            context_tokens=self.context_tokens,
            threads=self.threads or None,
            memory_budget_mib=self.memory_budget_mib,
        )

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            seed=self.seed,
            single_line=self.single_line,
        )


class _Invalid(ValueError):
    """A value that does not fit its setting; the message says what would."""


def _int(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        # bool is an int in Python, but `true` is not a token count.
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _Invalid(f"expected an integer from {low} to {high}")
        return value

    return check


def _float(low: float, high: float, *, open_low: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and value <= high
        ok = ok and (value > low if open_low else value >= low)
        if not ok:
            bracket = "(" if open_low else "["
            raise _Invalid(f"expected a number in {bracket}{low}, {high}]")
        return float(value)

    return check


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid("expected true or false")
    return value


def _choice(*allowed: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in allowed:
            raise _Invalid("expected one of " + ", ".join(f'"{a}"' for a in allowed))
        return value

    return check


def _model(value: Any) -> str | None:
    if not isinstance(value, str):
        raise _Invalid("expected a path to a .gguf file")
    return value.strip()


def _stop(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise _Invalid("expected a list of non-empty strings")
    if len(value) > 16:
        raise _Invalid("expected at most 16 stop strings")
    return tuple(value)


# JSON key -> (dataclass field, validator)
_SCHEMA: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "model": ("model", _model),
    "maxTokens": ("max_tokens", _int(1, 512)),
    "temperature": ("temperature", _float(0.0, 10.0)),
    "topK": ("top_k", _int(0, 1_000_000)),
    "topP": ("top_p", _float(0.0, 1.0, open_low=True)),
    "minP": ("min_p", _float(0.0, 1.0)),
    "repetitionPenalty": ("repetition_penalty", _float(0.0, 10.0, open_low=True)),
    "seed": ("seed", _int(0, 2**32 - 1)),
    "singleLine": ("single_line", _bool),
    "contextTokens": ("context_tokens", _int(128, 131_072)),
    "stop": ("stop", _stop),
    "maxCoverDecodes": ("max_cover_decodes", _int(0, 1024)),
    "method": ("method", _choice("exact", "mask", "naive")),
    "threads": ("threads", _int(0, 256)),
    "memoryBudgetMiB": ("memory_budget_mib", _int(0, 65_536)),
    "prefetch": ("prefetch", _bool),
    "logDocumentText": ("log_document_text", _bool),
}


def section_of(raw: Any) -> Mapping[str, Any] | None:
    """Accept ``{"cpcLsp": {...}}`` as well as the bare ``{...}``; None when neither."""
    if not isinstance(raw, Mapping):
        return None
    inner = raw.get(SECTION, raw)
    return inner if isinstance(inner, Mapping) else None


def apply(current: Settings, raw: Any, defaults: Settings = Settings()) -> tuple[Settings, list[str]]:
    """Patch `current` with the client's JSON; returns the new settings and one problem per bad key.

    `defaults` is what ``null`` restores (the server's command line may have set the model).
    """
    section = section_of(raw)
    if section is None:
        if raw is None:
            return current, []
        return current, [f"{SECTION} settings must be a JSON object; settings unchanged"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in section.items():
        if key not in _SCHEMA:
            continue
        name, check = _SCHEMA[key]
        if value is None or (key == "model" and isinstance(value, str) and not value.strip()):
            changes[name] = getattr(defaults, name)  # null (or an empty model path): the default
            continue
        try:
            changes[name] = check(value)
        except _Invalid as exc:
            problems.append(f"{SECTION}.{key}: {exc}; keeping {_show(getattr(current, name))}")
    updated = replace(current, **changes)
    if 2 * updated.max_tokens > updated.context_tokens:  # the rest is for the prompt
        problems.append(
            f"{SECTION}.maxTokens must be at most half of contextTokens "
            f"({updated.context_tokens}); keeping {current.max_tokens} and {current.context_tokens}"
        )
        updated = replace(updated, max_tokens=current.max_tokens, context_tokens=current.context_tokens)
    return updated, problems


def _show(value: Any) -> str:
    if value is None:
        return "the default"
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
