"""The default model: code goes to a code model, prose to a prose model.

Measured (README, "Models"): on mid-word cursors Qwen2.5-Coder 0.5B gets the first word right far
more often than Gemma 3 270M in code, and Gemma does better in prose, at a third of the cold cost.
So with no `model` set (in-process), each request goes to the model for its document's kind of
text, by the LSP languageId: the prose languages below go to Gemma, every other language to the
code model. Each model loads on the first request of its kind (a document's prefetch on didOpen
usually), on the engine's worker thread, and both stay loaded: about 0.75 GB of weights in all.
Each such load is reported as it starts and ends (the status bar says "loading <model>", then
"<model> loaded in N s"); a model that failed to load is not tried again on every keystroke.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from engine import Completion, CompletionRequest, EngineConfig, ModelLoadError, Prefetched, resolve_model
from lsp_server.loading import EngineLike, Event, LoadResult, ModelLoading

logger = logging.getLogger(__name__)

CODE_MODEL = "qwen2.5-coder-0.5b"
PROSE_MODEL = "gemma-3-270m"
# LSP languageIds of prose (VS Code's and Neovim's names), and no id at all (Neovim sends "" for a
# buffer without a filetype, which is mostly text: a note, a draft). Any other id counts as code:
# editors name every programming language they know, and one they have no name for is code too.
PROSE_LANGUAGES = frozenset({
    "plaintext", "text", "markdown", "mdx", "restructuredtext", "rst", "asciidoc", "latex", "tex",
    "bibtex", "org", "git-commit", "gitcommit", "git-rebase", "mail", "txt", "",
})  # fmt: skip


def text_kind(language: str | None) -> str:
    """ "prose" for the prose languages (and no languageId), "code" for any other."""
    return "prose" if (language or "").strip().lower() in PROSE_LANGUAGES else "code"


def routes(config: EngineConfig) -> bool:
    """Whether `config` means the routed default: no model chosen, and no model server (a model
    server runs one model, whose vocabulary `model` names)."""
    return config.model_path is None and not config.model_server


class RoutedEngine:
    """Two engines behind the scheduler's one: each request goes to its kind's model.

    Both model files are resolved (joined and verified on first use) when this is made, so a
    missing model is a load error the user sees at start, not a failed keystroke later; the
    weights load on first use. Used from the scheduler's worker thread (close from any).
    """

    def __init__(self, config: EngineConfig, load: Callable[[EngineConfig], Any]) -> None:
        for name in (CODE_MODEL, PROSE_MODEL):
            resolve_model(name)  # joined and verified once; later calls read the stamp
        self._configs = {
            "code": replace(config, model_path=CODE_MODEL),
            "prose": replace(config, model_path=PROSE_MODEL),
        }
        self._load = load
        self._engines: dict[str, EngineLike] = {}
        self._failed: dict[str, ModelLoadError] = {}  # a kind whose load failed: not tried on every keystroke
        self._lock = threading.Lock()  # close() may come from another thread while a load runs
        self._on_event: Callable[[Event], None] = lambda event: None
        self.last_kind = "code"

    def listen(self, on_event: Callable[[Event], None]) -> None:
        """Report each model's load on first use to `on_event` (the scheduler's: the status bar)."""
        self._on_event = on_event

    def engine(self, kind: str) -> EngineLike:
        """The engine for `kind`, loaded on first use (ModelLoadError if that load failed)."""
        with self._lock:
            found, failed = self._engines.get(kind), self._failed.get(kind)
        if found is not None:
            return found
        if failed is not None:
            raise failed
        config = self._configs[kind]
        logger.info("loading the %s model (%s)", kind, config.model_path)
        self._on_event(ModelLoading(config))
        started = time.perf_counter()
        try:
            found = self._load(config)
        except Exception as exc:
            failed = (
                exc
                if isinstance(exc, ModelLoadError)
                else ModelLoadError(
                    config.model_path, f"{type(exc).__name__}: {exc}", "See the server's log (`logLevel`: info)"
                )
            )
            with self._lock:
                self._failed[kind] = failed
            self._on_event(LoadResult(config, str(failed), time.perf_counter() - started))
            if failed is exc:
                raise
            raise failed from exc
        with self._lock:
            self._engines[kind] = found
        self._on_event(LoadResult(config, None, time.perf_counter() - started))
        return found

    def _for(self, request: CompletionRequest) -> EngineLike:
        self.last_kind = text_kind(request.language)
        return self.engine(self.last_kind)

    @property
    def model_id(self) -> str | None:
        """The id of the model that answered last (the scheduler reads it right after a call)."""
        engine = self._engines.get(self.last_kind)
        return engine.model_id if engine is not None else None

    def complete(self, request: CompletionRequest, cancel: threading.Event) -> Completion:
        return self._for(request).complete(request, cancel=cancel)

    def prefetch(self, request: CompletionRequest, cancel: threading.Event) -> Prefetched:
        return self._for(request).prefetch(request, cancel)

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()


def load_engine(config: EngineConfig) -> EngineLike:
    """The real engine (llama.cpp loads here, on the worker thread, not at import); with no model
    chosen, the routed default (lsp_server.routing: code and prose models)."""
    from engine import Engine

    if routes(config):
        return RoutedEngine(config, Engine.load)
    return Engine.load(config)
