"""bench.warm_cost's pure parts: the server's log lines read back, the robust fit, the tables."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from bench.warm_cost import (
    EngineCall,
    call_summary,
    latency_rows,
    parse_calls,
    percentile,
    theil_sen,
)


def _log_line(number: int, shown: bool, decoded: int, generated: int, ms: float, cover: int = 0) -> str:
    """A line as the server's own logger writes it (lsp_server.server's format string)."""
    record = logging.LogRecord(
        "lsp_server.server", logging.INFO, __file__, 1,
        "#%d %s: stop=%s required=%d chars prompt=%d reused=%d decoded=%d cover=%d generated=%d alternatives=%d ms=%.0f",
        (number, "shown" if shown else "nothing to add", "line", 3, 900, 900 - decoded, decoded, cover, generated, 0, ms),
        None,
    )  # fmt: skip
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s").format(record)


def test_parse_calls_reads_the_servers_lines_and_nothing_else() -> None:
    log = "\n".join([
        "2026-01-01 INFO lsp_server.server: #1 superseded",
        _log_line(2, True, 0, 3, 120.4),
        "2026-01-01 INFO lsp_server.server: #3 shown: the rest of the suggestion already shown (no engine work)",
        _log_line(4, False, 2, 11, 401.6, cover=1),
    ])  # fmt: skip
    calls = parse_calls(log)
    assert [c.number for c in calls] == [2, 4]
    assert calls[0] == EngineCall(2, True, "line", 3, 900, 900, 0, 0, 3, 0, 120.0)
    assert (calls[1].shown, calls[1].decoded, calls[1].cover, calls[1].generated, calls[1].ms) == (
        False,
        2,
        1,
        11,
        402.0,
    )


def test_theil_sen_finds_the_line_and_ignores_an_outlier() -> None:
    xs = [1, 2, 3, 4, 5, 6, 7, 8]
    ys = [150 + 24 * x for x in xs]
    ys[3] += 900  # one call slowed down by another process
    fit = theil_sen(xs, ys)
    assert fit is not None
    assert fit.slope == pytest.approx(24)
    assert fit.intercept == pytest.approx(150)
    assert fit.points == 8


def test_theil_sen_with_ties_and_without_two_distinct_x() -> None:
    fit = theil_sen([2, 2, 4, 4], [10, 12, 20, 22])
    assert fit is not None and fit.slope == pytest.approx(5) and fit.intercept == pytest.approx(1)
    assert theil_sen([3, 3, 3], [1, 2, 3]) is None
    assert theil_sen([], []) is None
    with pytest.raises(ValueError):
        theil_sen([1, 2], [1])


def test_latency_rows_put_ours_beside_the_peers() -> None:
    ours = [float(v) for v in range(1, 101)]  # 1..100 ms
    peer = [200.0] * 50 + [400.0] * 50
    rows = {r["what"]: r for r in latency_rows(ours, peer)}
    assert list(rows) == ["p50", "p75", "p90", "p95", "over 300 ms"]
    assert (rows["p50"]["ours_ms"], rows["p75"]["ours_ms"], rows["p90"]["ours_ms"], rows["p95"]["ours_ms"]) == (
        50,
        75,
        90,
        95,
    )
    assert rows["p50"]["peer_ms"] == 200 and rows["p75"]["peer_ms"] == 400
    assert rows["p50"]["ratio"] == pytest.approx(0.25)
    assert rows["over 300 ms"]["ours_ms"] == 0 and rows["over 300 ms"]["peer_ms"] == 0.5
    assert rows["over 300 ms"]["ratio"] == 0


def test_latency_rows_with_no_peer() -> None:
    rows = latency_rows([5.0, 500.0], [])
    assert all(r["peer_ms"] is None and r["ratio"] is None for r in rows)
    assert rows[-1]["ours_ms"] == 0.5


def test_call_summary_fits_warm_calls_and_counts_what_showed_nothing() -> None:
    calls = [
        EngineCall(n, n % 2 == 0, "line", 0, 900, 900, 0, 0, g, 0, 150 + 25 * g, 8 if g > 2 else 0, 0, 160 + 25 * g)
        for n, g in enumerate(range(1, 9), start=2)
    ]
    calls.append(EngineCall(20, False, "length", 0, 900, 0, 900, 0, 4, 0, 5000.0))  # cold: not warm, not fitted
    calls.append(EngineCall(21, True, "line", 0, 900, 900, 0, 0, 3, 0, 4.0))  # every row remembered: not fitted
    found = call_summary(calls, floor_ms=25.0)
    assert found["engine_calls"] == 10 and found["warm_calls"] == 8 and found["remembered_calls"] == 1
    assert found["fit_engine_ms"]["intercept"] == pytest.approx(150) and found["fit_engine_ms"][
        "slope"
    ] == pytest.approx(25)
    assert found["fit_client_ms"]["intercept"] == pytest.approx(160)
    assert found["outside_engine_ms_median"] == pytest.approx(10) and found["outside_engine_ms"]["p90"] == 10
    assert found["fit_engine_ms_by_decode_steps"]["points"] == 8
    assert found["warm_means"]["alternative_decodes"] == pytest.approx(6)  # 8 on six calls of eight
    assert found["alternative_decodes_at_budget_share"] == pytest.approx(6 / 8)
    assert found["stopped_at_budget_share"] == 0
    assert found["slope_over_floor"] == pytest.approx(1.0)
    assert found["intercept_in_floor_tokens"] == pytest.approx(6.0)
    assert found["two_tokens_ms_median"] == pytest.approx(200)
    hidden = [c for c in calls if not c.shown]
    assert found["nothing_shown_calls"] == len(hidden) == 5
    assert found["nothing_shown_generated_total"] == sum(c.generated for c in hidden)
    assert found["nothing_shown_share"] == pytest.approx(5 / 10)


def test_decode_steps_count_every_llama_decode_of_a_call() -> None:
    call = EngineCall(5, True, "line", 2, 700, 697, 3, 1, 6, 2, 900.0, 8, 0)
    assert (
        call.decode_steps() == 5 + 1 + 8 + 0 + 2
    )  # generated but the first, covering, alternatives, prompt run + last
    assert replace(call, decoded=1).decode_steps() == 5 + 1 + 8 + 1
    assert replace(call, decoded=0, generated=0).decode_steps() == 1 + 8
    assert replace(call, alternative_decodes=None).decode_steps() is None


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100..1, unsorted
    assert [percentile(values, s) for s in (0.5, 0.55, 0.75, 0.9, 0.95, 1.0)] == [50, 55, 75, 90, 95, 100]
    assert percentile([7.0], 0.5) == 7 and percentile([], 0.5) is None
    assert percentile([1.0, 2.0, 3.0], 0.0) == 1
