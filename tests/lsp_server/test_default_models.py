"""The default a new user gets, through the real server with no `model` set: a Python document is
answered by Qwen2.5-Coder 0.5B, a plain-text one by Gemma 3 270M, in one server, and the seed
sentence still holds (lsp_server.routing; the figures behind the choice are in the README)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lsp_server.routing import CODE_MODEL, PROSE_MODEL
from tests.fixtures import DRAFT, FAST
from tests.support.lsp_client import Editor, LspClient

pytestmark = pytest.mark.model

PYTHON = "import json\n\n\ndef read_config(path):\n    with open(path) as handle:\n        return json.lo"


@pytest.fixture(scope="module")
def default_server() -> Iterator[LspClient]:
    client = LspClient(["--log-level", "info"])
    client.initialize({"cpcLsp": {**FAST, "minConfidence": 0}}, wait_loaded=True, timeout=300)
    yield client
    assert client.alive(), client.stderr()
    assert client.shutdown() == 0


def test_code_goes_to_the_code_model_and_prose_to_the_prose_model(default_server):
    editor = Editor(default_server)
    editor.open("file:///tmp/default/config.py", PYTHON, "python")
    code = editor.suggestion("file:///tmp/default/config.py")
    assert code is not None and code.split("(")[0] in ("load", "loads"), code
    assert editor.stats()["model"] == CODE_MODEL

    editor.open("file:///tmp/default/letter.txt", DRAFT, "plaintext")
    prose = editor.suggestion("file:///tmp/default/letter.txt")
    assert prose is not None and prose.startswith("yesterday"), prose
    assert editor.stats()["model"] == PROSE_MODEL

    said = [
        (n["params"]["state"], n["params"]["message"])
        for n in default_server.notifications
        if n["method"] == "cpcLsp/status"
    ]
    assert "loaded in" not in said[1][1], said  # "ready" at start means found, not loaded
    for model in (CODE_MODEL, PROSE_MODEL):  # each model's own load is told as it happens
        loading, loaded = (
            said.index(("loading", f"loading {model}")),
            [i for i, (state, message) in enumerate(said) if message.startswith(f"{model} loaded in ")],
        )
        assert loaded and loaded[0] > loading and said[loaded[0]][0] == "ready", said
