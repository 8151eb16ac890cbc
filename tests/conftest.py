"""The shared fixtures live in `tests/fixtures.py` (one module, not copies per test file)."""

pytest_plugins = ["tests.fixtures"]
