"""The three floors (docs/architecture.md): engine/ never imports the LSP stack, lsp_server/ never
imports llama_cpp nor the engine's modules behind its public names (engine/__init__.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _files(floor: str) -> list[Path]:
    return sorted((ROOT / floor).rglob("*.py"))


@pytest.mark.parametrize("path", _files("engine"), ids=lambda p: p.name)
def test_the_engine_never_imports_the_lsp_stack(path: Path):
    banned = [m for m in imported_modules(path) if m.split(".")[0] in {"pygls", "lsprotocol", "lsp_server", "bench"}]
    assert banned == [], f"{path.relative_to(ROOT)} imports {banned}"


@pytest.mark.parametrize("path", _files("lsp_server"), ids=lambda p: p.name)
def test_the_server_uses_only_the_engines_public_names(path: Path):
    modules = imported_modules(path)
    assert not [m for m in modules if m.split(".")[0] == "llama_cpp"], f"{path.relative_to(ROOT)} imports llama_cpp"
    internals = [m for m in modules if m.startswith("engine.")]
    assert internals == [], f"{path.relative_to(ROOT)} imports {internals}; use `from engine import ...`"
