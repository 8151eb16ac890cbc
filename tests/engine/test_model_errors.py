"""A missing or broken model gives one clear ModelLoadError naming the path and what to do."""

import os
import subprocess
import sys

import pytest

from engine import Engine, EngineConfig, ModelLoadError
from engine.model_files import default_model_path


def load_error(path, **config) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as caught:
        Engine.load(EngineConfig(model_path=path, **config))
    return caught.value


def test_a_missing_file(tmp_path):
    error = load_error(tmp_path / "nope.gguf")
    assert "does not exist" in str(error) and "nope.gguf" in str(error)
    assert error.remedy


def test_a_directory(tmp_path):
    assert "not a file" in str(load_error(tmp_path))


def test_a_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"PK\x03\x04 this is a zip, not a model")
    error = load_error(bad)
    assert "not a GGUF file" in str(error) and str(bad) in str(error)


def test_a_truncated_gguf(tmp_path):
    real = default_model_path()
    truncated = tmp_path / "truncated.gguf"
    with real.open("rb") as src:
        truncated.write_bytes(src.read(3_000_000))
    error = load_error(truncated)
    assert "could not load" in str(error) and str(truncated) in str(error)


def test_a_context_too_small_for_any_prompt():
    error = load_error(None, context_tokens=16)
    assert "too small" in str(error) and "contextTokens" in str(error)


def test_an_unwritable_cache_directory_says_where_to_point_it(tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    env = {**os.environ, "CPC_LSP_CACHE_DIR": str(blocker / "cache")}
    out = subprocess.run(
        [sys.executable, "-m", "engine", "--prompt", "x"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert "CPC_LSP_CACHE_DIR" in out.stderr and "not writable" in out.stderr


def test_the_cli_fails_clearly_on_a_bad_model(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a model")
    out = subprocess.run(
        [sys.executable, "-m", "engine", "--prompt", "x", "--model", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "not a GGUF file" in out.stderr and str(bad) in out.stderr
