"""Bench logic that needs no model: scoring, summaries and the table format."""

from __future__ import annotations

from bench import report
from bench.quality import Outcome, _outcome, first_word, summarize
from tests.support.cases import Case


def _case(kind: str, word: str = "yesterday", typed: int = 4) -> Case:
    return Case(kind, f"/{kind}.txt", offset=10 + typed, word_start=10, word=word, context_start=0)


def test_first_word_stops_at_the_first_non_word_character():
    assert first_word("yesterday, we") == "yesterday"
    assert first_word("foo_bar(") == "foo_bar"
    assert first_word(" leading") == ""


def test_a_case_is_right_only_when_the_finished_word_is_the_original():
    case = _case("prose")
    assert _outcome(0, case, "exact", "server", "yesterday's", True).correct
    assert not _outcome(0, case, "exact", "server", "yesterdays", True).correct
    assert not _outcome(0, case, "exact", "server", None, True).correct  # nothing shown: word unfinished


def test_summary_counts_the_server_for_exact_and_cross_checks_the_engine():
    cases = [_case("python"), _case("prose")]
    outcomes = [
        Outcome(0, "python", "naive", "engine", "yest x", False, None),
        Outcome(1, "prose", "naive", "engine", "yesterday", True, None),
        Outcome(0, "python", "mask", "engine", "yesterday", True, True),
        Outcome(1, "prose", "mask", "engine", None, False, True),
        Outcome(0, "python", "exact", "engine", "yesterday", True, True),
        Outcome(1, "prose", "exact", "engine", "yesteryear", False, True),
        Outcome(0, "python", "exact", "server", "yesterday", True, True, cover_decodes=0),
        Outcome(1, "prose", "exact", "server", "yesterday", True, True, cover_decodes=2),
    ]
    summary = summarize(outcomes, cases)
    rows = {r["method"]: r for r in summary["rows"]}
    assert summary["kinds"] == ["python", "prose", "all"]
    assert rows["exact"]["via"] == "server" and rows["exact"]["all"] == 1.0 and rows["exact"]["cases"] == 2
    assert rows["mask"]["python"] == 1.0 and rows["mask"]["prose"] == 0.0 and rows["mask"]["shown"] == 0.5
    assert rows["naive"]["begins_with_typed"] is None
    assert summary["server_matches_engine"] == "1/2"


def test_tables_render_aligned_with_a_title_and_dashes_for_missing_numbers():
    text = report.render(("demo", ["tokens", "peer warm med"], [["32", report.num(None)], ["838", report.num(12.345)]]))
    lines = text.splitlines()
    assert lines[0] == "## demo"
    assert len({len(line) for line in lines[1:]}) == 1
    assert lines[2].split() == ["32", "-"] and lines[3].split() == ["838", "12.3"]


def test_results_go_to_the_checkout_or_the_current_directory(tmp_path, monkeypatch):
    from pathlib import Path

    from bench.report import output_root

    assert (output_root() / "pyproject.toml").is_file()  # run from the checkout
    installed = tmp_path / "site-packages" / "bench"
    installed.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert output_root(installed) == Path.cwd() == tmp_path  # installed: not next to the package
