"""The settings schema: one declaration per setting, and the manifest, docs/settings.md and the
engine's defaults agreeing with it. A failure here usually means: run `python -m lsp_server.settings --write`."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

import pytest

from engine import CompletionRequest, EngineConfig, SamplingConfig
from lsp_server import schema
from lsp_server.schema import Int, Strings, setting
from lsp_server.settings import SPECS, Settings, apply, from_command_line

FIX = "run `python -m lsp_server.settings --write` and commit the result"


def test_the_manifest_has_exactly_the_schemas_server_settings():
    manifest = json.loads(schema.MANIFEST.read_text(encoding="utf-8"))
    properties = manifest["contributes"]["configuration"]["properties"]
    generated = schema.manifest_properties(Settings)
    stray = [name for name in properties if schema.is_server_entry(name) and name not in generated]
    assert not stray, (
        f"{stray}: not a setting of lsp_server.settings.Settings (a client key? add it to schema.CLIENT_KEYS)"
    )
    in_manifest = {name: entry for name, entry in properties.items() if name in generated}
    assert in_manifest == generated, FIX


def test_the_settings_page_table_is_the_schemas():
    page = schema.SETTINGS_PAGE.read_text(encoding="utf-8")
    assert schema.updated_settings_page(page, Settings) == page, FIX


def test_every_field_is_a_setting_and_every_default_is_valid():
    assert [spec.name for spec in SPECS.values()] == [f.name for f in fields(Settings)]
    for spec in SPECS.values():
        if spec.default is not None:
            assert spec.check(spec.kind.to_json(spec.default)) == spec.default, spec.key
        assert spec.doc.endswith(".") and spec.doc[0].isupper(), spec.key


def test_defaults_are_the_engines():
    """The engine's dataclasses are where these defaults live; the schema reads them from there."""
    s = Settings()
    assert s.sampling() == SamplingConfig()
    assert s.engine_config() == EngineConfig()
    request = CompletionRequest("")
    assert (s.max_tokens, s.max_cover_decodes, s.stop) == (request.max_tokens, request.max_cover_decodes, request.stop)


@dataclass(frozen=True)
class _Toy:
    width: int = setting(3, Int(1, 9), "How wide.")
    words: tuple[str, ...] = setting((), Strings(2), "Some words.", scope="machine")


def test_adding_a_setting_is_one_declaration():
    """A new field shows up in the manifest (beside the other server keys; every other key kept
    where it was) and in the settings table."""
    manifest = {"contributes": {"configuration": {"properties": {
        "cpcLsp.server.command": {"type": "string"},
        "cpcLsp.width": {"type": "integer", "default": 1},
        "cpcLsp.removedLongAgo": {"type": "boolean"},
        "cpcLsp.trace.server": {"type": "string"},
        "cpcLsp.enable": {"type": "boolean"},
    }}}}  # fmt: skip
    properties = schema.updated_manifest(manifest, _Toy)["contributes"]["configuration"]["properties"]
    assert list(properties) == [
        "cpcLsp.server.command", "cpcLsp.width", "cpcLsp.words", "cpcLsp.removedLongAgo", "cpcLsp.trace.server",
        "cpcLsp.enable",
    ]  # fmt: skip
    assert schema.is_server_entry("cpcLsp.removedLongAgo")  # kept, and the manifest test reports it
    assert properties["cpcLsp.width"] == {
        "type": "integer", "default": 3, "minimum": 1, "maximum": 9, "markdownDescription": "How wide."
    }  # fmt: skip
    assert properties["cpcLsp.words"]["scope"] == "machine" and properties["cpcLsp.words"]["default"] == []
    table = schema.readme_table(_Toy)
    assert "| `width` | `3` | integer 1–9 | How wide. |" in table and "`words`" in table


def test_a_field_without_a_schema_is_refused():
    @dataclass
    class Bare:
        width: int = 3

    with pytest.raises(TypeError, match="setting"):
        list(schema.specs(Bare))


def test_the_command_line_checks_through_the_same_schema():
    s, problems = from_command_line({"maxTokens": 4, "model": "", "stop": "END"})
    assert problems == [] and (s.max_tokens, s.model, s.stop) == (4, None, ("END",))
    _, problems = from_command_line({"maxTokens": 0, "method": "fast"})
    assert problems == [
        "--max-tokens: expected an integer from 1 to 512",
        '--method: expected one of "exact", "mask", "naive"',
    ]
    _, problems = from_command_line({"maxTokens": 200, "contextTokens": 256})
    assert problems == ["--max-tokens must be at most half of --context-tokens (256)"]
    # the same value from a client gets the same verdict
    _, client = apply(Settings(), {"maxTokens": 0})
    assert client == ["cpcLsp.maxTokens: expected an integer from 1 to 512; keeping 16"]


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [("4", "maxTokens", 4), ("0.5", "topP", 0.5), ("false", "singleLine", False), ("END", "stop", "END"),
     ('["a", "b"]', "stop", ["a", "b"]), ("exact", "method", "exact"), ("123", "model", "123")],
)  # fmt: skip
def test_command_line_values_read_as_json_or_text(text, key, value):
    assert schema.parse_cli(text, SPECS[key]) == value
