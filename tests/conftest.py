"""The shared fixtures live in `tests/fixtures.py` (one module, not copies per test file).

Property tests check what the code does, not how fast: Hypothesis's default 200 ms deadline per
example and its "too slow" health check fail them on a loaded machine (`pytest -n 2` beside a
benchmark), so this profile turns both off for every test."""

from hypothesis import HealthCheck, settings

settings.register_profile("cpc-lsp", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cpc-lsp")

pytest_plugins = ["tests.fixtures"]
