"""Seed 004's tests for stop sequences, ported to Python."""

from engine.core.stops import first_stop


def test_should_find_earliest_stop_and_report_its_start():
    pos, which = first_stop("hello END world", ["END"])
    assert pos == 6
    assert which == "END"
    assert "hello END world"[:pos] == "hello "


def test_should_pick_the_earliest_when_multiple_stops_match():
    assert first_stop("a STOP b HALT c", ["HALT", "STOP"]) == (2, "STOP")


def test_ties_go_to_the_longer_stop_then_the_earlier():
    assert first_stop("xx ENDING", ["END", "ENDING"]) == (3, "ENDING")
    assert first_stop("xx AB", ["AB", "AB"]) == (3, "AB")


def test_should_ignore_empty_stop_strings():
    assert first_stop("anything", [""]) is None


def test_should_return_none_when_no_stop_present():
    assert first_stop("nothing here", ["END", "STOP"]) is None


def test_should_truncate_on_a_utf8_boundary():
    text = "café STOP"
    pos, _ = first_stop(text, ["STOP"])
    assert text[:pos] == "café "
    text[:pos].encode("utf-8")  # a whole string: never a split code point
