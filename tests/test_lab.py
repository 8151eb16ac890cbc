"""The lab stays out of the product: bench/ is a tool run from a checkout, not shipped, and the
product's tests do not depend on it. Shared test support lives in tests/support, which bench may
use and which never imports bench (no cycle)."""

from __future__ import annotations

from pathlib import Path

import pytest
from setuptools import find_packages

from tests.test_floors import imported_modules

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_TESTS = sorted(p for p in (ROOT / "tests").rglob("*.py") if "bench" not in p.relative_to(ROOT / "tests").parts)


def _imports_of(path: Path, top: set[str]) -> list[str]:
    return [m for m in imported_modules(path) if m.split(".")[0] in top]


@pytest.mark.parametrize("path", PRODUCT_TESTS, ids=lambda p: str(p.relative_to(ROOT / "tests")))
def test_no_product_test_nor_test_support_imports_bench(path: Path):
    assert _imports_of(path, {"bench"}) == [], f"{path.relative_to(ROOT)}: move what it needs to tests/support"


@pytest.mark.parametrize("path", sorted([*(ROOT / "engine").rglob("*.py"), *(ROOT / "lsp_server").rglob("*.py")]),
                         ids=lambda p: str(p.relative_to(ROOT)))  # fmt: skip
def test_the_product_imports_neither_bench_nor_tests(path: Path):
    assert _imports_of(path, {"bench", "tests"}) == [], str(path.relative_to(ROOT))


def test_the_wheel_ships_the_product_only():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    found = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"][
        "find"
    ]
    shipped = find_packages(str(ROOT), include=found["include"], exclude=found.get("exclude", ()))
    assert {p.split(".")[0] for p in shipped} == {"engine", "lsp_server"}, shipped
