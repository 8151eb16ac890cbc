"""`Engine.model_id`: a catalogue name when the file is a catalogue model, else "sha256:<hex>"; on
the remote backend, the identity of the model the server runs (what the distributions come from)."""

from __future__ import annotations

import hashlib

import pytest

from engine import Engine, EngineConfig
from engine.model_files import default_model_path
from engine.remote_load import server_model_id
from tests.support.tiny_gguf import load


def test_a_model_outside_the_catalogue_is_named_by_its_hash(tiny_models):
    engine = load(tiny_models["fim"])
    try:
        assert engine.model_id == "sha256:" + hashlib.sha256(tiny_models["fim"].read_bytes()).hexdigest()
    finally:
        engine.close()


def test_a_servers_model_is_named_by_its_file_when_this_machine_has_it(tiny_models, tmp_path):
    digest = hashlib.sha256(tiny_models["plain"].read_bytes()).hexdigest()
    assert server_model_id({"model_path": str(tiny_models["plain"])}) == f"sha256:{digest}"
    assert server_model_id({"model_path": str(tmp_path / "elsewhere" / "big.gguf")}) == "server:big.gguf"
    assert server_model_id({}) == server_model_id([]) == "server:unknown"


@pytest.mark.model
def test_the_default_model_is_named_in_process_and_remote(model_engine, llama_server):
    assert model_engine.model_id == "gemma-3-270m"
    assert llama_server.model == default_model_path()
    remote = Engine.load(EngineConfig(model_server=llama_server.url, model_server_timeout_s=120.0))
    try:
        assert remote.model_id == "gemma-3-270m"
    finally:
        remote.close()
