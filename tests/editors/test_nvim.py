"""editors/nvim in a real headless Neovim 0.11.4 against the real server and default model.

Neovim 0.11 has no inline completion, so `cpc_lsp` falls back to `vim.lsp.completion`: typing the
start of a word opens the completion menu with the server's word, and the accept key takes it.
Neovim negotiates UTF-8 positions, so text with multibyte characters before the cursor checks
that the server counts bytes, not characters or UTF-16 units.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from engine import model_files
from tests.editors.conftest import NVIM_RUNTIME, TIMEOUT_S

HERE = Path(__file__).resolve().parent


def _isolated_env(tmp_path: Path) -> dict[str, str]:
    """Neovim's config, data, state (LSP log) and cache under tmp_path, not the user's home. The
    server keeps the user's model cache, as after `make install` (a fresh XDG cache would make it
    join the default models' 0.75 GB again for every test)."""
    env = dict(os.environ)
    env[model_files.CACHE_ENV] = str(model_files.cache_dir())
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp_path / name.lower())
    env["NVIM_LOG_FILE"] = str(tmp_path / "nvim.log")
    return env


def _lsp_log(tmp_path: Path) -> str:
    log = tmp_path / "xdg_state_home" / "nvim" / "lsp.log"
    return log.read_text(encoding="utf-8", errors="replace")[-4000:] if log.exists() else "(no lsp.log)"


def run_lua(nvim: str, script: str, spec: dict, tmp_path: Path) -> dict:
    """Run one of the Lua scripts beside this file in a headless Neovim; return its JSON report."""
    out = tmp_path / "report.json"
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({**spec, "rtp": str(NVIM_RUNTIME), "out": str(out)}), encoding="utf-8")
    env = _isolated_env(tmp_path)
    env["CPC_NVIM_TEST"] = str(spec_file)
    try:
        proc = subprocess.run(
            [nvim, "--headless", "--clean", "-n", "-u", str(HERE / script)],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S * 4,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"nvim did not finish in {exc.timeout} s\nLSP log:\n{_lsp_log(tmp_path)}")
    report = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    if proc.returncode != 0 or report is None or report.get("error"):
        pytest.fail(
            f"nvim exited {proc.returncode}: {report and report.get('error')}\n"
            f"report: {json.dumps(report, ensure_ascii=False)[:3000]}\n"
            f"stderr: {proc.stderr[-2000:]}\nLSP log:\n{_lsp_log(tmp_path)}"
        )
    return report


def run_driver(
    nvim: str, server_command: list[str], tmp_path: Path, before: str, typed: str, name: str = "note.txt", left: int = 0
) -> dict:
    """Open a file `name` holding `before`, type `typed` at its end (or `left` characters before
    it), accept; return what Neovim saw."""
    note = tmp_path / name
    note.write_text(before + "\n", encoding="utf-8")
    spec = {
        "cmd": server_command,
        "settings": {},
        "file": str(note),
        "typed": typed,
        "accept_key": "<Tab>",
        "timeout_ms": TIMEOUT_S * 1000,
        "keystroke_ms": 60,
        "lsp_log_level": os.environ.get("CPC_TEST_NVIM_LSP_LOG", "warn"),
        "left": left,
    }
    return run_lua(nvim, "nvim_driver.lua", spec, tmp_path)


CASES = [
    pytest.param("Thanks for sending over the draft", " yest", id="ascii"),
    pytest.param("Café crème — thanks for sending over the draft", " yest", id="multibyte"),
]


@pytest.mark.parametrize(("before", "typed"), CASES)
def test_typing_shows_and_accepts_the_word(nvim, server_command, tmp_path, before, typed):
    report = run_driver(nvim, server_command, tmp_path, before, typed)
    word = typed.strip()
    line = before + typed
    word_start = len((before + typed[: typed.index(word)]).encode("utf-8"))  # byte column
    cursor = len(line.encode("utf-8"))

    assert report["nvim"].startswith("0.11."), report["nvim"]
    assert report["inline_completion"] is False  # 0.11: the completion fallback is in use
    assert report["filetype"] == "text"
    assert report["offset_encoding"] == "utf-8"
    assert report["server_capabilities"]["positionEncoding"] == "utf-8"

    # What the completion menu received while typing: the server's word, ready to accept.
    words = [item["word"] for item in report["menu"]["items"]]
    assert any(w.startswith("yesterday") for w in words), words
    assert report["menu"]["cursor"]["line"] == line

    # The same through the attached client: items whose edits cover the typed word in UTF-8.
    request = report["request"]
    assert request.get("err") is None, request["err"]
    assert request["position"] == {"line": 0, "character": cursor}
    items = sorted(request["result"]["items"], key=lambda item: item["sortText"])
    assert items, request  # the suggestion, then the other ways to finish the word (the menu's entries)
    for item in items:
        edit = item["textEdit"]
        assert edit["range"] == {
            "start": {"line": 0, "character": word_start},
            "end": {"line": 0, "character": cursor},
        }
        assert edit["newText"].startswith("yest"), edit["newText"]
    assert items[0]["textEdit"]["newText"].startswith("yesterday"), items

    # The server's info lines (one per request) stay out of Neovim's LSP log, where every stderr
    # line is an error: setup's default log_level.
    log = tmp_path / "xdg_state_home" / "nvim" / "lsp.log"
    assert " INFO " not in (log.read_text(encoding="utf-8") if log.exists() else ""), _lsp_log(tmp_path)

    # Accepting replaces the typed word with the suggestion and leaves the text before it intact.
    accepted = report["after_accept"]["line"]
    assert accepted.startswith(before + " yesterday"), accepted
    assert accepted in {before + " " + w for w in words}, (accepted, words)
    assert report["after_accept"]["col"] == len(accepted.encode("utf-8"))


MIDLINE = "\n".join([
    "def shift(s: str) -> str:",
    '    return "".join(chr(ord(ch) + 5) for ch in s)',
    "",
    "",
    "def unshift(s: str) -> str:",
    '    return "".join(chr(ord(ch) - 5) for ch in s)',
    "",
    "",
    "def roundtrip(s: str) -> str:",
    "    return unshift()",
])  # fmt: skip


def test_a_word_inside_a_line_meets_the_rest_of_it(nvim, server_command, tmp_path):
    """Python, the cursor before the `)` that ends the line: the item inserts at the cursor (its
    range ends there, the `)` stays) and the accepted line parses: one `)` for each `(`."""
    report = run_driver(nvim, server_command, tmp_path, MIDLINE, "shi", name="midline.py", left=1)
    assert report["filetype"] == "python"
    head = "    return unshift(shi"
    assert report["before_accept"]["line"] == head + ")", report["before_accept"]
    cursor = len(head.encode("utf-8"))
    items = sorted(report["request"]["result"]["items"], key=lambda item: item["sortText"])
    assert items, report["request"]
    for item in items:
        assert item["textEdit"]["range"]["end"] == {"line": 9, "character": cursor}, item
    accepted = report["after_accept"]["line"]
    assert accepted.startswith(head) and accepted.endswith(")"), accepted
    assert accepted == "    return unshift(" + items[0]["textEdit"]["newText"] + ")", (accepted, items[0])
    ast.parse(MIDLINE.replace("    return unshift()", accepted))  # a SyntaxError fails the test


def test_one_server_for_every_buffer_with_or_without_a_filetype(nvim, server_command, tmp_path):
    files = [tmp_path / "a" / "draft", tmp_path / "b" / "note.md", tmp_path / "b" / "mail.txt"]
    for path in files:
        path.parent.mkdir(exist_ok=True)
        path.write_text("Thanks for sending over the draft\n", encoding="utf-8")
    spec = {"cmd": server_command, "files": [str(p) for p in files], "timeout_ms": TIMEOUT_S * 1000}
    report = run_lua(nvim, "nvim_attach.lua", spec, tmp_path)
    assert report["filetypes"] == ["", "markdown", "text"]
    assert len(set(report["client_ids"])) == 1, report
    assert report["clients"] == 1


def test_setup_options_and_the_012_inline_path(nvim, tmp_path):
    """Logic without a server; 0.12's vim.lsp.inline_completion is a recording stand-in."""
    report = run_lua(nvim, "nvim_unit.lua", {}, tmp_path)
    failed = {name: result for name, result in report["checks"].items() if result is not True}
    assert failed == {}
    assert len(report["checks"]) == 11


def test_per_filetype_switch_and_status_with_the_real_server(nvim, server_command, tmp_path):
    """`enable = { ['*'] = true, markdown = false }`, then `:CpcLsp toggle` and `:CpcLsp disable`."""
    note = tmp_path / "note.md"
    note.write_text("# Notes\n\nThanks for sending over the draft\n", encoding="utf-8")
    spec = {"cmd": server_command, "file": str(note), "timeout_ms": TIMEOUT_S * 1000, "keystroke_ms": 60}
    report = run_lua(nvim, "nvim_enable.lua", spec, tmp_path)
    assert report["filetype"] == "markdown"
    # The status followed the server: loading the model, then ready; markdown is off here.
    assert report["statuses"][:1] == ["starting"] and "loading" in report["statuses"], report["statuses"]
    assert report["ready"] == {"state": "ready", "message": report["ready"]["message"], "enabled": False}
    assert report["status_ready"] == "cpc-lsp: off"
    # Off: typing asked nothing and showed nothing.
    assert report["line_off"].endswith("draft yest")
    assert report["requests_off"] == 0 and report["words_off"] == []
    # :CpcLsp toggle: on for markdown, and the next keystroke gets the word.
    assert report["after_toggle"]["enabled"] is True
    assert report["requests_on"] > 0 and any(w.startswith("yesterday") for w in report["words_on"])
    # :CpcLsp disable: off again.
    assert report["off_again"]["enabled"] is False and report["status_off"] == "cpc-lsp: off"
