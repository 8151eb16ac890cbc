"""What the tests share: texts, a fake engine, and the two ways to run the server.

- `fake_server`: `build_server(load=...)` with a `FakeEngine`, running its real stdio loop on a
  thread of the test process over two pipes. Every handler, the transport and the protocol
  overrides run as in production; only the model is fake. Fast: this is the default tier.
- `model_server`: `python -m lsp_server` as a subprocess with the real model, one per test module
  (a module may set `SERVER_SETTINGS` and `SERVER_LOG_LEVEL`). Tests that use it are marked
  `model` automatically; tests that load the model another way carry the mark themselves.
- `llama_server`: a real llama-server (tests.support.llama_server) with the default model and 4 slots on
  127.0.0.1, one per test module; `start_llama_server(...)` starts others (another model, a key).

Both are driven by the one raw JSON-RPC client, `tests.support.lsp_client.LspClient` (also the
benchmarks'), with `Editor` for document bookkeeping.

Registered as a plugin in `tests/conftest.py`, so the fixtures need no import.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import (
    Alternative,
    Completion,
    CompletionRequest,
    DecodeStats,
    EngineConfig,
    ModelLoadError,
    Prefetched,
    Signals,
    WordEnd,
)
from tests.support.llama_server import LlamaServer, start_llama_server  # noqa: F401  (re-exported)
from tests.support.lsp_client import Editor, LspClient, Reply, end_position, frame  # noqa: F401  (re-exported)

DRAFT = "Thanks for sending over the draft yest"
FAST = {"maxTokens": 4, "threads": 1}  # real-model settings that keep a completion short
WORDS = ("yesterday", "Monday", "return", "review", "proposal", "password", "zebracorn42")


# --- a fake engine ------------------------------------------------------------------------------


class FakeEngine:
    """Stands in for `engine.Engine` behind the scheduler.

    It finishes the required word from `words` (the first one that extends it) and then adds
    " done" when `max_tokens` allows more than one token; without a matching word the text is
    `required + " done"`. The other words that extend it are its alternatives (as many as asked).
    `decoded_tokens` is 0 when the prompt is the previous one, as with the real KV cache. `block` makes `complete` spin until cancelled, like decode steps would;
    `step_s` makes each call take that long (a slow machine).
    """

    def __init__(self, block: bool = False, words: tuple[str, ...] = (), step_s: float = 0.0) -> None:
        self.model_id: str | None = None  # engine.Engine.model_id; the loaders set it
        self.block = block
        self.words = words
        self.step_s = step_s
        self.started = threading.Event()
        self.threads: set[str] = set()
        self.calls: list[str] = []
        self.requests: list[CompletionRequest] = []
        self.prefetched: list[str] = []
        self.closed = False
        self._last_prompt: str | None = None

    def complete(self, request: CompletionRequest, cancel: threading.Event) -> Completion:
        self.threads.add(threading.current_thread().name)
        self.calls.append(request.prompt)
        self.requests.append(request)
        self.started.set()
        deadline = time.monotonic() + self.step_s
        while (self.block or time.monotonic() < deadline) and not cancel.is_set():
            time.sleep(0.001)  # one "decode step"
        prompt_tokens = len(request.prompt.split()) + 1
        decoded = 0 if request.prompt == self._last_prompt else prompt_tokens
        self._last_prompt = request.prompt
        if cancel.is_set():
            return Completion("", "cancelled", DecodeStats(prompt_tokens=prompt_tokens, decoded_tokens=decoded))
        partial = request.required.lstrip()
        fits = [w for w in self.words if w.startswith(partial) and len(w) > len(partial)]
        word = fits[0] if fits else partial
        text = request.required + word[len(partial) :] + (" done" if request.max_tokens > 1 else "")
        # The other words that finish it, as the engine's alternatives (each to its word's end).
        # Their signals: a sure word (its end confirmed, probability 0.9), so the gate shows them.
        others = (
            tuple(
                Alternative(alt, Signals(-0.1, 5.0, (WordEnd(len(alt), -0.1),)))
                for alt in (request.required + w[len(partial) :] for w in fits[1:])
            )[: request.alternatives]
            if partial
            else ()
        )
        # As the real engine: alternatives that would cost decodes are left for later when asked so.
        deferred = request.alternatives_later and decoded > 0 and bool(others)
        stats = DecodeStats(
            prompt_tokens=prompt_tokens, decoded_tokens=decoded, reused_tokens=prompt_tokens - decoded,
            generated_tokens=2, kv_tokens=prompt_tokens + 2, alternatives_deferred=deferred,
        )  # fmt: skip
        return Completion(text, "eos", stats, alternatives=() if deferred else others)

    def prefetch(self, request: CompletionRequest, cancel: threading.Event) -> Prefetched:
        """Like the real one: the prompt is warm afterwards, unless cancelled first."""
        self.prefetched.append(request.prompt)
        if cancel.is_set():
            return Prefetched(0, 0, False, 0.0)
        self._last_prompt = request.prompt
        return Prefetched(len(request.prompt.split()) + 1, 0, True, 0.0)

    def close(self) -> None:
        self.closed = True


def loaded_scheduler(engine: FakeEngine, wait: float = 5.0) -> Any:
    """A `Scheduler` whose engine (`engine`) has loaded."""
    from lsp_server.scheduler import Scheduler

    scheduler = Scheduler(lambda config: engine)
    assert scheduler.load(EngineConfig()).result(wait).ok
    return scheduler


class FakeLoader:
    """`load` for `build_server`/`Scheduler`: a FakeEngine per config; a config in `broken` fails
    like a missing model file. Keeps every engine it made, and refuses to make a second while one
    is open (the server must never hold two models)."""

    def __init__(self, **engine_args: Any) -> None:
        self.engine_args = engine_args
        self.engines: list[tuple[EngineConfig, FakeEngine]] = []
        self.broken: set[EngineConfig] = set()

    def __call__(self, config: EngineConfig) -> FakeEngine:
        missing = isinstance(config.model_path, Path) and not config.model_path.exists()  # a str is a catalogue name
        if config in self.broken or missing:
            raise ModelLoadError(config.model_path, "the file does not exist", "Check the `model` setting")
        assert not [e for _, e in self.engines if not e.closed], "a second model while one is loaded"
        engine = FakeEngine(**self.engine_args)
        engine.model_id = config.model_path if isinstance(config.model_path, str) else "sha256:fake"
        self.engines.append((config, engine))
        return engine

    @property
    def engine(self) -> FakeEngine:
        """The engine loaded last."""
        return self.engines[-1][1]


# --- the server in this process ----------------------------------------------------------------


class InProcessServer:
    """`build_server(settings, load)` serving over two pipes on a thread; `client` talks to it."""

    def __init__(self, settings: Any = None, load: Callable[[EngineConfig], Any] | None = None) -> None:
        from lsp_server.server import build_server

        self.loader = load if load is not None else FakeLoader(words=WORDS)
        self.server = build_server(settings, load=self.loader)
        to_server, from_client = os.pipe()
        to_client, from_server = os.pipe()
        self._server_in, self._server_out = open(to_server, "rb"), open(from_server, "wb")
        self.thread = threading.Thread(target=self._run, name="in-process-server", daemon=True)
        self.thread.start()
        self.client = LspClient.over(open(to_client, "rb"), open(from_client, "wb"))

    def _run(self) -> None:
        try:
            self.server.start_io(self._server_in, self._server_out)
        finally:
            for stream in (self._server_out, self._server_in):
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass

    def close(self) -> None:
        self.client.shutdown()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the in-process server did not stop"


@pytest.fixture
def fake_server() -> Iterator[InProcessServer]:
    """A fresh in-process server with a fake engine (initialize it yourself: `.client.initialize()`)."""
    server = InProcessServer()
    yield server
    server.close()


@pytest.fixture
def fake_editor(fake_server: InProcessServer) -> Editor:
    """An initialized in-process server with a fake engine, through an `Editor` (UTF-16)."""
    fake_server.client.initialize({"cpcLsp": {}}, wait_loaded=True, timeout=30)
    return Editor(fake_server.client)


@pytest.fixture(scope="module")
def fake_module_server() -> Iterator[InProcessServer]:
    """One initialized in-process server with a fake engine for a whole module; it must still be
    serving at the end."""
    server = InProcessServer()
    server.client.initialize({"cpcLsp": {}}, wait_loaded=True, timeout=30)
    yield server
    assert server.client.alive() and server.thread.is_alive()
    server.close()


# --- tiny generated GGUF models (tests/support/tiny_gguf.py) --------------------------------------


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The two tiny models, written once per session: "fim" (with FIM tokens) and "plain"."""
    from tests.support.tiny_gguf import write_model

    folder = tmp_path_factory.mktemp("tiny-gguf")
    return {"fim": write_model(folder / "fim.gguf", True), "plain": write_model(folder / "plain.gguf", False)}


# --- the real server with the real model --------------------------------------------------------


@pytest.fixture(scope="module")
def model_server(request: pytest.FixtureRequest) -> Iterator[LspClient]:
    """`python -m lsp_server` with the real model, initialized with the module's `SERVER_SETTINGS`
    (default `FAST`) and loaded; shut down cleanly at the end of the module."""
    settings = getattr(request.module, "SERVER_SETTINGS", FAST)
    client = LspClient(["--log-level", getattr(request.module, "SERVER_LOG_LEVEL", "info")])
    client.initialize({"cpcLsp": settings}, wait_loaded=True)
    yield client
    assert client.alive(), client.stderr()
    assert client.shutdown() == 0


@pytest.fixture(scope="session")
def model_engine() -> Iterator[Any]:
    """The engine on the real default model, one thread, shared by the whole session."""
    from engine import Engine

    engine = Engine.load(EngineConfig(threads=1))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def small_context_engine() -> Iterator[Any]:
    """The real model with a 512-token context: for claims about prompts longer than the context,
    which then need a quarter of the decoding."""
    from engine import Engine

    engine = Engine.load(EngineConfig(context_tokens=512, threads=1))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaServer]:
    """A real llama-server on 127.0.0.1 (default model, 4 slots of 2048 tokens, no key), one per
    module. A test that stops or kills it restarts it before it ends; it is stopped at the end.
    No prompt cache in RAM: the in-process engine it is compared with has none (bench.remote_engine)."""
    server = start_llama_server(slots=4, extra_args=("--cache-ram", "0"))
    yield server
    server.stop()


MODEL_FIXTURES = {"model_server", "model_engine", "small_context_engine", "llama_server"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `model` mark on every test that uses the real model through a fixture, and on the
    editor tests (real Neovim and VS Code clients, always with the real model)."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) or "editors" in item.path.parts:
            item.add_marker(pytest.mark.model)
