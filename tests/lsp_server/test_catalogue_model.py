"""The real server started with `--model qwen2.5-coder-0.5b`: the name is resolved from the
installed chunk packages, joined into a fresh cache and hash-checked, and the model finishes a word
on a Python line; the stats and `complete --json` say which model answered, by name, also for the
same file given by another path (its hash is its identity)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.catalogue import QWEN_CODER_05B
from engine.model_files import CACHE_ENV
from tests.fixtures import FAST
from tests.support.lsp_client import Editor, LspClient

pytestmark = pytest.mark.model

NAME = QWEN_CODER_05B.name
PYTHON = "import json\n\n\ndef read_config(path):\n    with open(path) as handle:\n        return json.lo"
URI = "file:///tmp/catalogue/config.py"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty model cache: the server must join the model itself (and it is removed afterwards)."""
    folder = tmp_path_factory.mktemp("catalogue-cache")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def qwen_server(cache: Path) -> Iterator[LspClient]:
    client = LspClient(["--log-level", "info", "--model", NAME], env={CACHE_ENV: str(cache)})
    client.initialize({"cpcLsp": {**FAST, "minConfidence": 0}}, wait_loaded=True, timeout=300)
    yield client
    assert client.alive(), client.stderr()
    assert client.shutdown() == 0


def test_the_name_is_joined_from_its_packages_and_finishes_a_word_in_python(qwen_server, cache):
    joined = cache / QWEN_CODER_05B.file_name
    assert joined.stat().st_size == QWEN_CODER_05B.size
    assert (cache / f"{QWEN_CODER_05B.file_name}.verified").read_text().startswith(f"{QWEN_CODER_05B.size} ")
    editor = Editor(qwen_server)
    editor.open(URI, PYTHON, "python")
    shown = editor.suggestion(URI)
    assert shown is not None and shown.startswith("lo") and len(shown) > len("lo"), shown
    assert shown.split("(")[0] in ("load", "loads"), shown
    stats = editor.stats()
    assert stats["model"] == NAME and stats["requiredSatisfied"]


def complete(cache: Path, model: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "lsp_server", "complete", "--json", "--threads", "1", "--max-tokens", "4",
         "--min-confidence", "0", "--model", model, "--text", PYTHON],
        env={**os.environ, CACHE_ENV: str(cache)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_complete_json_names_the_model_and_a_path_to_the_same_file_gets_the_same_name(qwen_server, cache, tmp_path):
    by_name = complete(cache, NAME)
    assert by_name["model"] == NAME and by_name["insertText"].startswith("lo")
    elsewhere = tmp_path / "my-coder.gguf"
    os.link(cache / QWEN_CODER_05B.file_name, elsewhere)  # another path, the same bytes: hashed, then named
    by_path = complete(cache, str(elsewhere))
    assert by_path["model"] == NAME
    assert by_path["insertText"] == by_name["insertText"]
