"""editors/vscode without VS Code: the manifest, the modules that do not import `vscode`, and the
real server answering the extension's own options with UTF-16 inline completions.

The extension in a real VS Code is test_vscode_real.py. These are the fast checks of the parts
that are ours: the manifest and its settings, the settings, log-level and process modules (plain
Node, so no `vscode` import), and a Node client built on the extension's JSON-RPC library that
sends what VS Code sends: incremental didChange per keystroke, an inline completion request after
each, and `$/cancelRequest` for the one superseded.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess

import pytest

from lsp_server.settings import SECTION, Settings, apply
from tests.editors.conftest import TIMEOUT_S, VSCODE

MANIFEST = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))
PROPERTIES = MANIFEST["contributes"]["configuration"]["properties"]
REQUEST_CANCELLED = -32800


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _node_json(node: str, script: str, stdin: str | None = None, timeout: float = 30) -> dict:
    proc = subprocess.run(
        [node, "-e", script], cwd=VSCODE, input=stdin, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def settings_module(node) -> dict:
    """What editors/vscode/settings.js builds with no user settings, run by plain Node.

    Plain Node has no `vscode` module, so this also proves the module does not import it.
    """
    return _node_json(
        node,
        "const s = require('./settings');"
        "const get = () => undefined;"
        "console.log(JSON.stringify({keys: s.serverSettingKeys(), settings: s.serverSettings(get),"
        " init: s.initializationOptions(s.serverSettings(get)),"
        " change: s.didChangeConfigurationParams(s.serverSettings(get)),"
        " executable: s.serverExecutable(get)}));",
    )


# --- the manifest ------------------------------------------------------------------------------


def test_manifest_is_a_loadable_extension(node, vscode_packages):
    assert MANIFEST["name"] and MANIFEST["publisher"] and MANIFEST["version"]
    assert (VSCODE / MANIFEST["main"]).is_file()
    # At start-up: the server is running, and the model loading, before the first keystroke.
    assert MANIFEST["activationEvents"] == ["*"]
    # vscode-languageclient states the oldest VS Code it runs on: ours must not be older.
    client = json.loads((vscode_packages / "vscode-languageclient" / "package.json").read_text())
    assert MANIFEST["engines"]["vscode"] == client["engines"]["vscode"] == "^1.91.0"
    # Versions are pinned, and the lock file pins the same ones.
    lock = json.loads((VSCODE / "package-lock.json").read_text(encoding="utf-8"))
    for group in ("dependencies", "devDependencies"):
        for name, version in MANIFEST[group].items():
            assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} {version} is not pinned"
            assert lock["packages"][f"node_modules/{name}"]["version"] == version
        assert lock["packages"][""][group] == MANIFEST[group]
    # Every command the manifest shows is registered by the extension, and nothing else.
    source = (VSCODE / "extension.js").read_text(encoding="utf-8")
    registered = set(re.findall(r"registerCommand\('([^']+)'", source))
    assert registered == {c["command"] for c in MANIFEST["contributes"]["commands"]}
    for path in (*sorted(p.name for p in VSCODE.glob("*.js")), "test/inline_completion.js"):
        check = subprocess.run([node, "--check", str(VSCODE / path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_every_setting_is_described():
    for name, schema in PROPERTIES.items():
        assert name.startswith(f"{SECTION}."), name
        assert schema.get("description") or schema.get("markdownDescription"), name
        assert "default" in schema, name


def test_settings_are_the_servers_with_the_servers_defaults(settings_module):
    """Same keys, types and defaults as lsp_server.settings.Settings."""
    server = {_camel(f.name): f for f in dataclasses.fields(Settings)}
    assert settings_module["keys"] == list(server)  # also in the same order
    json_type = {int: "integer", float: "number", bool: "boolean", str: "string", tuple: "array"}
    defaults = Settings()
    for key, field in server.items():
        schema = PROPERTIES[f"{SECTION}.{key}"]
        default = getattr(defaults, field.name)
        if default is None and schema["type"] == ["number", "null"]:  # minConfidence: null, the model's own
            assert schema["default"] is None, key
            continue
        if default is None and key == "modelServer":  # one URL, or a list of them; "" means not set
            assert schema["type"] == ["string", "array"] and schema["items"] == {"type": "string"}, key
            assert schema["default"] == "", key
            continue
        if default is None:  # model, modelServerApiKey: "" in the editor means not set
            assert schema["type"] == "string" and schema["default"] == "", key
            continue
        assert schema["type"] == json_type[type(default)], key
        if isinstance(default, tuple):
            assert schema["default"] == list(default), key
        elif schema["type"] == "number":  # JSON writes 1.0 as 1
            assert float(schema["default"]) == default, key
        else:
            assert schema["default"] == default and type(schema["default"]) is type(default), key
    # What is sent when nothing is set: the server keeps exactly its defaults, with no complaint.
    assert settings_module["init"] == {SECTION: settings_module["settings"]}
    assert settings_module["change"] == {"settings": {SECTION: settings_module["settings"]}}
    assert settings_module["settings"]["model"] is None
    assert apply(Settings(), settings_module["init"]) == (Settings(), [])
    assert apply(Settings(), settings_module["change"]["settings"]) == (Settings(), [])
    # Client-only settings stay in the client.
    assert settings_module["executable"] == {"command": "cpc-lsp", "args": []}
    client_only = {"server.command", "server.args", "trace.server", "enable"}
    assert not client_only & set(settings_module["settings"])
    assert set(PROPERTIES) == {f"{SECTION}.{k}" for k in client_only | set(settings_module["keys"])}


def _bounds(key: str, schema: dict):
    """(value the server must accept, value it must refuse) for each bound the manifest declares."""
    integer = schema["type"] == "integer"
    step = 1 if integer else 0.001
    if "minimum" in schema:
        yield schema["minimum"], schema["minimum"] - step
    if "exclusiveMinimum" in schema:
        yield schema["exclusiveMinimum"] + step, schema["exclusiveMinimum"]
    if "maximum" in schema:
        yield schema["maximum"], schema["maximum"] + step


def test_the_settings_ui_allows_what_the_server_accepts():
    """Bounds in the manifest are the server's: the edge is accepted, one step past it refused."""
    checked = 0
    for name, schema in PROPERTIES.items():
        key = name.removeprefix(f"{SECTION}.")
        for good, bad in _bounds(key, schema):
            # contextTokens must stay above maxTokens; give the other one room.
            base = Settings(max_tokens=1, context_tokens=131_072)
            assert apply(base, {key: good})[1] == [], (key, good)
            assert apply(base, {key: bad})[1] != [], (key, bad)
            checked += 1
    assert checked >= 15
    stop = PROPERTIES[f"{SECTION}.stop"]
    assert apply(Settings(), {"stop": ["x"] * stop["maxItems"]})[1] == []
    assert apply(Settings(), {"stop": ["x"] * (stop["maxItems"] + 1)})[1] != []
    assert stop["items"]["minLength"] == 1 and apply(Settings(), {"stop": [""]})[1] != []


def test_server_stderr_keeps_its_log_levels(node):
    """vscode-languageclient writes stderr as errors; logs.js routes each line to its own level."""
    lines = [
        "2026-11-30 15:20:00,123 INFO lsp_server.server: loading the default model",
        "2026-11-30 15:20:01,001 WARNING lsp_server.server: maxTokens must be at least 1",
        "2026-11-30 15:20:02,002 DEBUG lsp_server.server: #1 detail",
        "llama_model_loader: loaded meta data",
        "2026-11-30 15:20:03,003 ERROR lsp_server.server: cannot load model",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "ValueError: boom",
    ]
    out = _node_json(
        node,
        "const {StderrLevels} = require('./logs'); const l = new StderrLevels();"
        "const lines = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify({routed: lines.map((x) => l.line(x)), last: l.lastError()}));",
        stdin=json.dumps(lines),
    )
    levels = [r["level"] for r in out["routed"]]
    assert levels == ["info", "warn", "debug", "debug", "error", "error", "error", "error"]
    assert out["routed"][0]["text"] == "lsp_server.server: loading the default model"  # the channel adds the time
    assert out["last"] == "ValueError: boom"
    # argparse's complaint has no level: the last line still names the cause.
    out = _node_json(
        node,
        "const {StderrLevels} = require('./logs'); const l = new StderrLevels();"
        "const levels = [l.line('usage: cpc-lsp [-h]').level, l.line('cpc-lsp: error: unrecognized arguments: --x').level];"
        "console.log(JSON.stringify({levels, last: l.lastError()}));",
    )
    assert out["levels"] == ["info", "error"]
    assert out["last"] == "cpc-lsp: error: unrecognized arguments: --x"
    # A server killed after ordinary log lines: nothing in them is the cause.
    out = _node_json(
        node,
        "const {StderrLevels} = require('./logs'); const l = new StderrLevels();"
        "l.line('2026-11-30 15:20:03,003 ERROR a: cannot load model');"
        "for (let i = 0; i < 6; i += 1) l.line('2026-11-30 15:20:04,000 INFO a: #' + i + ' shown');"
        "console.log(JSON.stringify({last: l.lastError()}));",
    )
    assert out["last"] == ""


def test_per_language_switch(node):
    """`cpcLsp.enable` in the manner of `github.copilot.enable`."""
    cases = [
        [{"*": True, "plaintext": False}, "plaintext", False],
        [{"*": True, "plaintext": False}, "markdown", True],
        [{"*": False, "python": True}, "python", True],
        [{"*": False, "python": True}, "markdown", False],
        [{}, "markdown", True],
        [None, "markdown", True],
        [False, "markdown", False],
        [{"*": False}, None, False],
    ]
    out = _node_json(
        node,
        "const s = require('./settings');"
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(cases.map(([e, l]) => s.enabledFor(e, l ?? undefined))));",
        stdin=json.dumps(cases),
    )
    assert out == [want for _, _, want in cases]


def test_spawn_failures_name_the_cause(node, tmp_path):
    """The messages a user sees when the server cannot start (checked for real in
    test_vscode_real.py too)."""
    not_executable = tmp_path / "cpc-lsp"
    not_executable.write_text("#!/bin/sh\n")
    script = (
        "const {spawnServer} = require('./server_process');"
        "const [missing, onPath, denied] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "(async () => { const out = [];"
        " for (const c of [missing, onPath, denied]) {"
        "  try { const p = await spawnServer(c, []); await p.kill(0); out.push('started'); }"
        "  catch (e) { out.push(e.message); } }"
        " const p = await spawnServer('sh', ['-c', 'echo boom >&2; exit 3']); await p.ended(5000);"
        " p.stderr = {lastError: () => 'boom'}; out.push(p.describe(' before it was ready'));"
        " console.log(JSON.stringify(out)); })();"
    )
    missing = str(tmp_path / "nowhere" / "cpc-lsp")
    out = _node_json(node, script, stdin=json.dumps([missing, "cpc-lsp-no-such-command", str(not_executable)]))
    assert out[0].startswith(f'cpc-lsp: the server command "{missing}" was not found.')
    assert out[1].startswith('cpc-lsp: the server command "cpc-lsp-no-such-command" was not found on PATH')
    assert "is not executable" in out[2]
    assert out[3] == "exited with code 3 before it was ready: boom"


# --- the server through the extension's options ------------------------------------------------


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


CASES = [
    {"name": "ascii", "before": "Hi Sam,\n\nThanks for sending over the draft", "typed": " yest"},
    {"name": "astral", "before": "😀 Thanks for sending over the draft", "typed": " yest"},
    {
        "name": "astral-untitled",
        "before": "Notes 😀\nCafé 😀 crème — thanks for sending over the draft",
        "typed": " yest",
        "uri": "untitled:Untitled-1",
    },
]


@pytest.fixture(scope="module")
def typed_in_vscode(node, vscode_packages, server_command) -> dict:
    spec = {
        # the confidence gate off: these cases are about positions (UTF-16, astral, untitled), and the
        # gate hides some of their guesses; its own claims are in tests/lsp_server/test_gate_server.py
        "config": {"server.command": server_command[0], "server.args": server_command[1:], "minConfidence": 0},
        "cases": CASES,
        "timeoutMs": TIMEOUT_S * 1000 * 2,
        "keystrokeMs": 40,
    }
    try:
        proc = subprocess.run(
            [node, str(VSCODE / "test" / "inline_completion.js")],
            cwd=VSCODE,
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S * 2 + 60,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the Node client did not finish in {exc.timeout} s")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = None
    if proc.returncode != 0 or report is None or report.get("error"):
        pytest.fail(
            f"the Node client exited {proc.returncode}: {report and report.get('error')}\n"
            f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}"
        )
    return report


def test_the_test_client_speaks_through_the_extensions_library(typed_in_vscode):
    libraries = typed_in_vscode["libraries"]
    assert libraries["protocolFromTest"] == libraries["protocolFromClient"]
    assert typed_in_vscode["executable"]["command"].endswith("cpc-lsp")


def test_server_offers_inline_completion_in_utf16(typed_in_vscode):
    capabilities = typed_in_vscode["initialize"]["capabilities"]
    assert capabilities.get("positionEncoding", "utf-16") == "utf-16"
    assert "inlineCompletionProvider" in capabilities
    assert capabilities["textDocumentSync"]["change"] == 2  # incremental
    errors = [m for m in typed_in_vscode["messages"] if m["type"] <= 2]  # Error, Warning
    assert errors == []


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_typing_gets_the_word_as_an_inline_completion(typed_in_vscode, case):
    result = next(c for c in typed_in_vscode["cases"] if c["name"] == case["name"])
    text = case["before"] + case["typed"]
    last_line = text.split("\n")[-1]
    line = text.count("\n")
    word = case["typed"].strip()
    cursor = {"line": line, "character": _utf16(last_line)}
    start = {"line": line, "character": _utf16(last_line[: len(last_line) - len(word)])}
    assert result["text"] == text and result["cursor"] == cursor

    # Every keystroke's request is answered: with a result, or as cancelled once superseded.
    for request in result["requests"][:-1]:
        assert request["kind"] == "result" or (request["kind"] == "error" and request["code"] == REQUEST_CANCELLED), (
            request
        )
    final = result["final"]
    assert final["kind"] == "result", final
    items = final["result"]["items"] if isinstance(final["result"], dict) else final["result"]
    # The best suggestion first, then the alternatives (distinct ways to finish the same word).
    assert items and items[0]["insertText"].startswith("yesterday"), items
    assert len({item["insertText"] for item in items}) == len(items), items
    for item in items:
        assert item["range"] == {"start": start, "end": cursor}
        assert item["insertText"].startswith(word), item["insertText"]


def test_server_shuts_down_cleanly(typed_in_vscode):
    assert typed_in_vscode["exit"] == {"code": 0, "signal": None}
