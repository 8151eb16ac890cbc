"""`model` takes a catalogue name as well as a path, and the loaded model's identity reaches
`cpcLsp/stats`. Fast: the settings alone, and the in-process server with a fake engine."""

from __future__ import annotations

from pathlib import Path

from lsp_server.settings import Settings, apply, from_command_line

DOC = "file:///tmp/model-setting/notes.txt"


def test_a_catalogue_name_is_kept_as_a_name_in_its_own_spelling():
    updated, problems = apply(Settings(), {"cpcLsp": {"model": " Qwen2.5-Coder-0.5B "}})
    assert problems == [] and updated.model == "qwen2.5-coder-0.5b"
    assert updated.engine_config().model_path == "qwen2.5-coder-0.5b"  # resolved by the engine, not here


def test_a_path_is_still_a_path():
    updated, _ = apply(Settings(), {"model": "~/models/qwen2.5-coder-0.5b.gguf"})
    assert updated.engine_config().model_path == Path("~/models/qwen2.5-coder-0.5b.gguf").expanduser()


def test_empty_and_null_still_mean_the_servers_default():
    named, _ = from_command_line({"model": "qwen2.5-coder-1.5b"})
    for value in ("", None):
        updated, problems = apply(Settings(), {"model": value}, defaults=named)
        assert problems == [] and updated.engine_config().model_path == "qwen2.5-coder-1.5b"
    assert apply(Settings(), {"model": ""})[0].engine_config().model_path is None


def test_the_error_for_a_wrong_kind_of_value_names_the_catalogue():
    _, problems = apply(Settings(), {"model": 7})
    assert problems and "qwen2.5-coder-0.5b" in problems[0] and "path to a .gguf file" in problems[0]


def test_the_stats_say_which_model_answered(fake_server):
    fake_server.client.initialize({"cpcLsp": {"model": "qwen2.5-coder-1.5b"}}, wait_loaded=True, timeout=30)
    from tests.support.lsp_client import Editor

    editor = Editor(fake_server.client)
    editor.open(DOC, "Thanks for sending over the draft yest")
    assert editor.suggestion(DOC).startswith("yesterday")
    config, _ = fake_server.loader.engines[-1]
    assert config.model_path == "qwen2.5-coder-1.5b"
    assert editor.stats()["model"] == "qwen2.5-coder-1.5b"
