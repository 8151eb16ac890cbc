"""How many documents' KV the engine keeps: the budget, capped by the machine's memory."""

from pathlib import Path

import pytest

from engine.local.load import MAX_REMEMBERED, available_memory_bytes, remembered_sequences
from engine.types import EngineConfig

MIB = 1024 * 1024
PER_TOKEN = 18_000  # about the default model's KV bytes per token


def test_default_budget_keeps_three_other_documents():
    assert remembered_sequences(EngineConfig(), PER_TOKEN, available=64 * 1024 * MIB) == 4


def test_no_budget_keeps_only_the_live_document():
    assert remembered_sequences(EngineConfig(memory_budget_mib=0), PER_TOKEN, available=None) == 1


def test_huge_budget_is_capped_by_half_the_available_memory():
    config = EngineConfig(context_tokens=131_072, memory_budget_mib=65_536)
    per_context = 131_072 * PER_TOKEN
    assert remembered_sequences(config, PER_TOKEN, available=None) == 1 + MAX_REMEMBERED
    # 8 GiB available: half of it holds 1 more whole context of this size, not 15.
    assert remembered_sequences(config, PER_TOKEN, available=8 * 1024 * MIB) == 1 + (4 * 1024 * MIB) // per_context


def test_available_memory_is_read_on_linux():
    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        pytest.skip("no /proc/meminfo: the engine then caps by the budget alone")
    fields = {
        name: int(value.split()[0]) * 1024
        for name, value in (line.split(":", 1) for line in meminfo.read_text().splitlines())
    }
    available = available_memory_bytes()
    assert available is not None and 0 < available <= fields["MemTotal"]
    assert abs(available - fields["MemAvailable"]) < fields["MemTotal"] // 10  # in bytes, read a moment apart
