"""The routed default model: code to the code model, prose to the prose model (fakes: logic only;
the real pair is in tests/lsp_server/test_default_models.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine import CompletionRequest, EngineConfig
from lsp_server import routing
from tests.fixtures import FakeEngine


@pytest.mark.parametrize(
    ("language", "kind"),
    [("python", "code"), ("c", "code"), ("typescriptreact", "code"), ("cobol-85", "code"), ("", "prose"), (None, "prose"),
     ("plaintext", "prose"), ("markdown", "prose"), ("Markdown", "prose"), ("git-commit", "prose")],
)  # fmt: skip
def test_languages_map_to_kinds(language, kind):
    assert routing.text_kind(language) == kind


def test_only_an_unset_in_process_model_is_routed():
    assert routing.routes(EngineConfig())
    assert not routing.routes(EngineConfig(model_path=Path("/m.gguf")))
    assert not routing.routes(EngineConfig(model_server="http://127.0.0.1:9"))


def _routed(monkeypatch):
    monkeypatch.setattr(routing, "resolve_model", lambda name: Path(f"/models/{name}.gguf"))
    loaded: dict[str, FakeEngine] = {}

    def load(config: EngineConfig) -> FakeEngine:
        engine = FakeEngine(words=("yesterday",))
        engine.model_id = config.model_path
        loaded[config.model_path] = engine
        return engine

    return routing.RoutedEngine(EngineConfig(), load), loaded


def test_each_kind_loads_its_model_once_on_first_use(monkeypatch):
    engine, loaded = _routed(monkeypatch)
    assert loaded == {}  # nothing loads before a request needs it
    cancel = threading.Event()
    engine.complete(CompletionRequest("x = ", " va", language="python"), cancel)
    assert list(loaded) == [routing.CODE_MODEL] and engine.model_id == routing.CODE_MODEL
    engine.prefetch(CompletionRequest("Dear Ann, the", " yest", language="plaintext"), cancel)
    engine.complete(CompletionRequest("Dear Ann, the", " yest", language="markdown"), cancel)
    assert sorted(loaded) == sorted([routing.CODE_MODEL, routing.PROSE_MODEL])
    assert engine.model_id == routing.PROSE_MODEL
    assert loaded[routing.PROSE_MODEL].prefetched == ["Dear Ann, the"]
    assert loaded[routing.PROSE_MODEL].calls == ["Dear Ann, the"]
    assert loaded[routing.CODE_MODEL].calls == ["x = "]
    engine.close()
    assert all(e.closed for e in loaded.values())


def test_a_missing_model_file_fails_when_made_not_on_a_keystroke(monkeypatch):
    from engine import ModelLoadError

    def missing(name):
        raise ModelLoadError(None, f"{name} is not installed", "Run `make model MODEL=...`")

    monkeypatch.setattr(routing, "resolve_model", missing)
    with pytest.raises(ModelLoadError, match="not installed"):
        routing.RoutedEngine(EngineConfig(), lambda config: FakeEngine())


def test_each_first_use_load_is_reported_and_a_failed_one_is_not_tried_on_every_keystroke(monkeypatch):
    """The status bar hears "loading" and "loaded" around each model's first use (it said "ready"
    when only the files had been found), and a model that failed says why once, then fails fast."""
    from engine import ModelLoadError
    from lsp_server.loading import LoadResult, ModelLoading

    monkeypatch.setattr(routing, "resolve_model", lambda name: Path(f"/models/{name}.gguf"))
    tries: list[str] = []

    def load(config: EngineConfig) -> FakeEngine:
        tries.append(config.model_path)
        if config.model_path == routing.PROSE_MODEL:
            raise ValueError("Failed to load model from file")
        return FakeEngine()

    engine = routing.RoutedEngine(EngineConfig(), load)
    events: list[object] = []
    engine.listen(events.append)
    cancel = threading.Event()
    engine.complete(CompletionRequest("x = ", " va", language="python"), cancel)
    engine.complete(CompletionRequest("x = ", " val", language="python"), cancel)
    assert [type(e) for e in events] == [ModelLoading, LoadResult]
    assert events[0].config.model_path == routing.CODE_MODEL and events[1].ok
    for _ in range(2):
        with pytest.raises(ModelLoadError, match="Failed to load model from file"):
            engine.prefetch(CompletionRequest("Dear Ann, the", " yest", language="plaintext"), cancel)
    assert tries == [routing.CODE_MODEL, routing.PROSE_MODEL]  # the broken one was tried once
    assert [type(e) for e in events[2:]] == [ModelLoading, LoadResult]
    assert events[3].config.model_path == routing.PROSE_MODEL and "Failed to load" in events[3].error
