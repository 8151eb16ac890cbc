"""The typing replay's rules and sources, without a model."""

from __future__ import annotations

import pytest

from bench.replay import accepts, next_word, passages, summarize, used_files
from tests.support.cases import build_cases, check_cases


def test_one_accept_takes_the_suggestion_up_to_the_end_of_its_first_word():
    assert next_word("terday. I am") == "terday"
    assert next_word(" the draft") == " the"
    assert next_word("(self, x)") == "(self"
    assert next_word("):") == "" and next_word("") == ""


def test_a_word_is_accepted_only_when_it_is_exactly_right():
    assert accepts("terday", "terday was fine")
    assert accepts(" the", " the")
    assert not accepts("ter", "terday")  # the word goes on: not exactly right
    assert not accepts("terdays", "terday")
    assert not accepts("", "anything")


@pytest.fixture(scope="module")
def sets():
    tuning = build_cases(50, 0)
    return tuning, check_cases(50, tuning)


def test_the_check_set_and_the_replay_use_files_the_tuning_set_does_not(sets):
    tuning, check = sets
    assert len(check) == len(tuning) == 200
    assert not {c.file for c in check} & {c.file for c in tuning}
    items = passages(2, used_files(tuning, check))
    assert len(items) == 8
    assert not {p.file for p in items} & used_files(tuning, check)
    for p in items:
        assert p.before.endswith("\n") or p.before == ""
        assert len(p.text) >= 200


def test_summary_puts_the_server_beside_the_peer():
    runs = [
        {"passage": 0, "kind": "prose", "who": "peer", "where": "before cursor", "chars": 100, "typed": 80,
         "accepted": 20, "accepts": 4, "requests": 84, "ms": [100.0, 120.0], "shown": 80, "begins_with_typed": None},
        {"passage": 0, "kind": "prose", "who": "server lexicon off", "where": "end", "chars": 100, "typed": 60,
         "accepted": 40, "accepts": 8, "requests": 68, "ms": [20.0, 40.0], "shown": 60, "begins_with_typed": True},
    ]  # fmt: skip
    rows = {(r["who"], r["kind"]): r for r in summarize(runs)}
    ours = rows[("server lexicon off", "all")]
    assert ours["not_typed"] == 0.4 and ours["saved_over_peer"] == 2.0
    assert ours["ms_over_peer"] == pytest.approx(30 / 110)
    assert ours["keys_per_char"] == pytest.approx(0.68)


def test_cursor_positions_are_told_apart_by_the_passage():
    from bench.replay import POSITIONS, position_kind

    inside, word_end, after = POSITIONS
    assert position_kind("the dra", "ft was") == inside
    assert position_kind("the draft", " was") == word_end
    assert position_kind("the draft", "") == word_end
    assert position_kind("the draft ", "was") == after
    assert position_kind("", "the") == after


class _Peer:
    """A peer whose completion is `say(text before the cursor)`."""

    def __init__(self, say) -> None:
        self.llm = self
        self.say = say

    def create_completion(self, prompt: str, **_: object) -> dict:
        return {"choices": [{"text": self.say(prompt)}]}


def test_the_replay_accepts_right_words_and_types_the_rest():
    from bench.replay import Passage, replay_peer

    passage = Passage("prose", "f.txt", 0, 8, "Hi. ", "ab cd, e", "")
    oracle = replay_peer(_Peer(lambda prompt: passage.text[len(prompt) - 4 :]), passage, 8)
    # "ab" (its word ends there), " cd" and ", e": three accepts, nothing typed.
    assert (oracle["typed"], oracle["accepted"], oracle["accepts"], oracle["requests"]) == (0, 8, 3, 3)
    assert oracle["positions"]["after a non-word character"] == [1, 1, 2]  # "ab" after "Hi. "
    assert oracle["positions"]["at a word end"] == [2, 2, 6]  # " cd" after "ab", ", e" after "cd"
    silent = replay_peer(_Peer(lambda prompt: ""), passage, 8)
    assert (silent["typed"], silent["accepted"], silent["accepts"], silent["requests"], silent["shown"]) == (
        8,
        0,
        0,
        8,
        0,
    )
    wrong = replay_peer(_Peer(lambda prompt: "zz"), passage, 8)  # never right: every key typed
    assert (wrong["typed"], wrong["accepted"], wrong["shown"]) == (8, 0, 8)
    assert sum(counts[0] for counts in wrong["positions"].values()) == 8


def test_the_server_replay_counts_the_same_way(fake_editor):
    from bench.replay import Passage, replay_server

    # The fake engine finishes "yest" as "yesterday" (tests/fixtures.py WORDS) and adds " done".
    passage = Passage("prose", "f.txt", 0, 13, "Hi. ", "yesterday was", "")
    result = replay_server(fake_editor, passage, "file:///bench/replay/fake.txt", in_place=False)
    assert result["begins_with_typed"] is True and result["requests"] == result["typed"] + result["accepts"]
    assert result["typed"] + result["accepted"] == len(passage.text)
    assert result["accepts"] >= 1  # "yesterday" once its first letter is typed


class _InfillPeer:
    """llama.vim's peer stand-in: `llama_vim_shown(text, cursor)` answers `say(before, after)`; it
    records what it saw after the cursor."""

    def __init__(self, say) -> None:
        self.say, self.afters = say, []

    def llama_vim_shown(self, text: str, cursor: int) -> tuple[float, str, dict]:
        self.afters.append(text[cursor:])
        return 1.0, self.say(text[:cursor], text[cursor:]), {}


def test_the_infill_peer_replays_by_the_same_rule_and_sees_the_text_after_in_place():
    from bench.replay import Passage, replay_infill

    passage = Passage("python", "f.py", 0, 8, "x = 1\n", "ab cd, e", "\nrest()")
    oracle = _InfillPeer(lambda before, after: passage.text[len(before) - 6 :])
    got = replay_infill(oracle, passage, in_place=True)
    assert (got["typed"], got["accepted"], got["accepts"], got["requests"]) == (0, 8, 3, 3)
    assert set(oracle.afters) == {"\nrest()"}
    at_end = _InfillPeer(lambda before, after: "")
    got = replay_infill(at_end, passage, in_place=False)
    assert (got["typed"], got["accepted"], got["shown"]) == (8, 0, 0) and set(at_end.afters) == {""}


def test_the_infill_peer_is_compared_placement_by_placement():
    base = {"passage": 0, "kind": "python", "chars": 100, "typed": 0, "accepts": 0, "requests": 1, "ms": [10.0],
            "shown": 1, "begins_with_typed": None}  # fmt: skip
    runs = [
        {**base, "who": "peer", "where": "end", "accepted": 10}, {**base, "who": "peer", "where": "in place", "accepted": 20},
        {**base, "who": "server", "where": "end", "accepted": 30}, {**base, "who": "server", "where": "in place", "accepted": 30},
    ]  # fmt: skip
    rows = {(r["who"], r["where"], r["kind"]): r for r in summarize(runs)}
    assert rows[("server", "end", "all")]["saved_over_peer"] == pytest.approx(3.0)
    assert rows[("server", "in place", "all")]["saved_over_peer"] == pytest.approx(1.5)


def test_llama_vims_rendering_of_a_whole_suggestion():
    from bench.infill import local_context, render

    text = "def f(x):\n    if x:\n  \n    return 1\n"
    blank = text.index("  \n") + 2  # two spaces typed on a blank line
    ctx = local_context(text, blank)
    # llama.vim asked from the line's start; what it shows after the cursor skips the typed whitespace
    assert render(ctx, "    y = 2\n", text, blank) == "  y = 2"
    assert render(ctx, "    return 1", text, blank) == ""  # retypes the next non-blank line
    end = text.index("if x:") + 5
    ctx = local_context(text, end)
    assert render(ctx, "\n        y = 2\n", text, end) == "\n        y = 2"  # a first line empty, lines below
    assert render(ctx, "\n  \n    return 1", text, end) == ""  # the lines below repeat the buffer's
    assert render(ctx, "", text, end) == "" and render(ctx, "\n\n", text, end) == ""
    # /completion continues at the cursor: nothing is trimmed
    assert render(local_context(text, blank), "  y = 2", text, blank, from_cursor=True) == "  y = 2"


def test_the_completion_request_sends_the_text_before_the_cursor_raw():
    from bench.infill import completion_request

    body = completion_request("a\nb\nc = fo", 10)
    assert body["prompt"] == "a\nb\nc = fo" and "input_prefix" not in body and "n_indent" not in body
    assert body["samplers"] == ["top_k", "top_p"] and body["top_k"] == 40


def test_places_tell_line_ends_and_indentation_apart():
    from bench.replay import PLACES, place_of

    line_end, indentation, inside, word_end, after_space, after_punct = PLACES
    assert place_of("    x = f(a)", "\n    y") == line_end
    assert place_of("x\n  ", "  y = 1") == indentation and place_of("x\n", "y") == indentation
    assert place_of("x = fo", "o()") == inside and place_of("x = foo", "()") == word_end
    assert place_of("x = ", "foo") == after_space and place_of("x = f(", "a)") == after_punct


def test_the_models_table_puts_each_models_replay_beside_its_peer():
    from bench.models import replay_rows, replay_table
    from bench.replay import by_cursor, summarize

    base = {"passage": 0, "kind": "python", "where": "in place", "chars": 100, "requests": 10, "ms": [5.0],
            "begins_with_typed": True}  # fmt: skip

    def run(who: str, accepted: int, accepts: int, shown: int) -> dict:
        cursors = {"inside a word": [10, shown, accepts, accepted], "word start": [0] * 4, "after punctuation": [0] * 4}
        return {**base, "who": who, "accepted": accepted, "accepts": accepts, "typed": 100 - accepted, "shown": shown,
                "cursors": cursors}  # fmt: skip

    runs = [run("server gate off", 50, 10, 40), run("server gate default", 45, 9, 20), run("peer", 40, 8, 40)]
    found = {"runs": runs, "table": summarize(runs), "cursors": by_cursor(runs), "peer_endpoint": "/infill"}
    rows = {r["who"]: r for r in replay_rows({"replay": {"m": found}})}
    default = rows["server gate default"]
    assert default["saved_over_peer"] == pytest.approx(45 / 40)
    assert default["saved_over_gate_off"] == pytest.approx(0.9)
    assert default["precision_over_gate_off"] == pytest.approx((9 / 20) / (10 / 40))
    title, header, body = replay_table({"replay": {"m": found}})
    assert len(body) == 3 and body[2][1] == "llama.vim's request (/infill)"


def test_merge_cuts_every_side_to_what_the_slowest_finished(tmp_path):
    from bench.replay import _Tally, merge

    source = tmp_path / "f.txt"
    source.write_text("Hi. ab cd ef\n")
    passage = {"kind": "prose", "file": str(source), "start": 4, "end": 12, "chars": 8, "text": "ab cd ef"}

    def run(who: str, words: list[str], upto: int | None = None) -> dict:
        tally, pos, text = _Tally(), 0, passage["text"]
        while pos < (upto or len(text)):
            chunk = words.pop(0) if words else ""
            tally.ms.append(1.0)
            pos += tally.step("Hi. " + text[:pos], text[pos:], chunk, bool(chunk))
        out = {"passage": 0, "kind": "prose", "who": who, "where": "in place", **tally.result(len(text), True)}
        return {**out, "partial_chars": pos} if upto else out

    ours = {"passages": [passage], "runs": [run("server", ["ab", " cd", " ef"])]}  # every word accepted
    peer = {"passages": [passage], "runs": [run("peer", [], upto=3)]}  # typed "ab " and was stopped
    rows = {r["who"]: r for r in merge([ours, peer])["table"] if r["kind"] == "all"}
    assert rows["peer"]["chars"] == rows["server"]["chars"] == 3
    assert rows["peer"]["not_typed"] == 0 and rows["server"]["not_typed"] == pytest.approx(3 / 3)
