"""The covering search's frontier asked of a (fake) llama-server in one request of many prompts
(engine.remote.frontier, engine.remote.batch): fewer round trips, the same covering as an exact search,
one new token decoded per prompt, caps that leave banned tokens out, and one TCP connection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core.covering import CoveringSearch
from engine.core.sequence import Sequence
from engine.remote.batch import BOOST, asks
from engine.remote.http import ModelServerClient
from engine.remote.rows import RemoteRows
from engine.types import SamplingConfig
from tests.engine.fake_llama_server import FakeLlamaServer
from tests.engine.toy import EOG, toy_vocab
from tests.support.fault_proxy import FaultProxy

# Two tokens spell " " (as Gemma has two "m"): the required "  ab" has the spellings " " " ab"
# (either space), "  " "ab", and longer ones. Listing one token per step, the first request (the
# grammar's greedy path, "  " "ab": 0.2) leaves both single spaces known only by a bound (0.4).
PIECES = [" ", " ", "  ", "a", "b", "ab", " a", " ab", "x", EOG, "<bos>"]
S1, S1X, S2, A, B, AB, SA, SAB, X, END, BOS = range(11)
VOCAB = toy_vocab(PIECES, control=("<bos>",))
TABLE = {
    (): {S2: 0.4, S1: 0.3, S1X: 0.25},
    (S2,): {AB: 0.5, X: 0.3},
    (S1,): {SAB: 0.8, X: 0.1},
    (S1X,): {SAB: 0.1, X: 0.8},
    (S2, AB): {END: 0.9},
    (S1, SAB): {X: 0.9},
    (S1, SAB, X): {END: 0.9},
    (S1X, SAB): {END: 0.9},
}
PROMPT = (BOS,)
REQUIRED = b"  ab"


class ExactRows:
    """The fake server's own distributions, whole: what the in-process engine would read."""

    decodes = 0

    def __init__(self, server: FakeLlamaServer) -> None:
        self._server = server

    def row(self, path: tuple[int, ...]) -> np.ndarray:
        return np.asarray(self._server.logprobs(path))


@pytest.fixture
def fake():
    server = FakeLlamaServer(VOCAB, TABLE)
    yield server
    server.close()


def remote_for(url: str) -> RemoteRows:
    rows = RemoteRows(ModelServerClient(url, None, 5.0), VOCAB, 2048, 1, None, n_probs=1)
    rows.begin(None, max_tokens=3)
    return rows


def test_both_unknown_spellings_are_asked_in_one_request_and_the_exact_covering_is_chosen(fake):
    best = CoveringSearch(VOCAB, ExactRows(fake), 1 << 10).run(REQUIRED)
    assert best.path == (S1, SAB)  # 0.3 * 0.8 beats "  " "ab" (0.2): the greedy path is not it
    rows = remote_for(fake.url)
    seq = Sequence(rows, VOCAB, SamplingConfig())
    assert seq.decode_prompt(PROMPT, REQUIRED, True, 8)
    assert seq.covering.path == best.path
    assert abs(seq.covering.log_prob - best.log_prob) < 1e-3  # exact, not a bound
    assert rows.fallbacks == []
    streamed = [b for b in fake.bodies if b.get("stream")]
    grammar, batch, refine = streamed
    assert grammar["grammar"] == 'root ::= "  ab" .*'
    # Both spellings' rows in one request, each prompt one token past the prompt; the tokens
    # consistent with their own bytes raised (no grammar), so each one's greedy token bounds them.
    assert batch["prompt"] == [[BOS, S1], [BOS, S1X]] and batch["n_predict"] == 1
    assert "grammar" not in batch
    assert sorted(t for t, _ in batch["logit_bias"]) == sorted([S1, S1X, SA, SAB])
    assert {b for _, b in batch["logit_bias"]} == {BOOST}
    # What is left to prove is the first token's exact value: forced, then on into the suggestion.
    assert refine["grammar"] == f'root ::= <[{S1}]> " ab" .*'
    assert [seq.sample_next().token for _ in range(3)] == [S1, SAB, X]
    # The prefetch naming the slot, the grammar's stream, the batch, the forced one: 4 requests
    # where one branch per request took 5 (each spelling's own, then the suggestion's).
    assert rows.client.traffic.round_trips == 4


def test_every_prompt_adds_one_token_to_what_the_slot_holds():
    """The server decodes a prompt's uncached tail as one batch, which moves the numbers (a
    four-token tail moved a row by 0.38 nats on Gemma 3 270M): ancestors go in first."""
    prompt = (1, 2)
    assert asks(prompt, prompt + (5,), [(6, 7, 8), (9,)]) == [(6,), (6, 7), (6, 7, 8), (9,)]
    assert asks(prompt, prompt + (6, 7), [(6, 7, 8), (6, 3)]) == [(6, 3), (6, 7), (6, 7, 8)]
    assert asks(prompt, prompt[:-1], [(4,)]) == [(), (4,)]  # the prompt's last token alone first


def test_a_cap_that_leaves_tokens_out_bounds_only_the_others():
    rows = RemoteRows(ModelServerClient("http://127.0.0.1:9", None, 1.0), VOCAB, 2048, 1, None, n_probs=1)
    key = PROMPT + (S2,)
    # AB is listed (0.5), so every unlisted token is below it; with AB banned, the best token
    # consistent with "ab" was X's 0.02 (as if it were): every consistent token but AB is below that.
    rows.nodes.record(key, X, math.log(0.02), [(AB, math.log(0.5))], (False, b"ab", frozenset({AB})))
    row = rows.nodes.bounded_row(rows.node(key), b"ab", False)
    assert row[AB] == pytest.approx(math.log(0.5))  # exact, and left out of the cap
    assert math.log(0.02) - 1e-6 < row[A] <= math.log(0.02)  # "a" (consistent, unlisted): the cap
    assert row[B] == -np.inf and row[SA] == -np.inf  # not consistent with "ab"
    rows.client.close()


def test_a_token_known_by_a_cap_loses_a_tie_with_the_token_that_set_it():
    """The greedy pick under the grammar of "a" was "ab" (exact), which caps "a" at the same value.
    The search adds the path's log-probability; one float step below the cap did not survive that
    sum, so "a" (first in byte order) tied and was chosen, and asked about again and again."""
    rows = RemoteRows(ModelServerClient("http://127.0.0.1:9", None, 1.0), VOCAB, 2048, 1, None, n_probs=1)
    key = PROMPT + (S2,)
    value = -6.177627086639404  # "pos" after `max_help_` on Gemma 3 270M
    rows.nodes.record(key, AB, value, [(AB, value)], (True, b"a"))
    row = rows.nodes.bounded_row(rows.node(key), b"a", False)
    path = -8.75  # the log-probability of the path before it, which the search adds
    assert path + row[A] < path + row[AB] == path + value
    rows.client.close()


def test_a_keystroke_that_needs_several_branches_keeps_one_connection(fake):
    """Streams are read to their end instead of closed, so the kept-alive connection serves the
    next request (a proxy keeps the client's connection; the fake closes its own each time)."""
    with FaultProxy(fake.url) as proxy:
        rows = remote_for(proxy.url)
        seq = Sequence(rows, VOCAB, SamplingConfig())
        assert seq.decode_prompt(PROMPT, REQUIRED, True, 8)
        [seq.sample_next() for _ in range(2)]
        rows.end()
        assert rows.client.traffic.round_trips == 4
        assert proxy.connections == 1


def test_a_prefetch_of_a_prompt_the_slot_holds_sends_nothing(fake):
    rows = remote_for(fake.url)
    seq = Sequence(rows, VOCAB, SamplingConfig())
    assert seq.decode_prompt(PROMPT, REQUIRED, True, 8)
    rows.end()
    before = rows.client.traffic.round_trips
    rows.begin(None, max_tokens=0)
    rows.prefill(PROMPT)  # typing inside a word leaves the prompt as it was
    rows.end()
    assert rows.client.traffic.round_trips == before


def test_the_frontier_is_every_unknown_row_and_loose_value_above_the_floor():
    """Best first over known rows down to the floor (the best covering known exactly): unknown
    rows above it are asked, a finishing token known only by a bound marks its node, and a
    strict-prefix token's bound alone does not (the row after it is asked instead)."""
    from engine.remote.frontier import frontier

    known = {  # path -> (exact values, bounded row: log-probabilities for "  ab")
        (): ({S2: math.log(0.4)}, {S2: 0.4, S1: 0.35, S1X: 0.35}),
        (S2,): ({AB: math.log(0.5)}, {AB: 0.5, A: 0.3}),
    }

    def exact_at(path):
        return known[path][0] if path in known else None

    def row_at(path, remaining):
        row = np.full(VOCAB.size, -np.inf)
        for token, p in known[path][1].items():
            row[token] = math.log(p)
        return row

    floor = math.log(0.4 * 0.5)  # "  " "ab", both exact
    front = frontier(VOCAB, exact_at, row_at, b"  ab", floor, 8)
    assert [path for path, _ in front.rows] == [(S1,), (S1X,)]  # 0.35 each; "  " "a" (0.12) is below
    assert [left for _, left in front.rows] == [b" ab", b" ab"]
    assert front.values == ()  # the only finishing token above the floor ("ab") is exact
    assert front.best == ((S2, AB), pytest.approx(floor))
    assert frontier(VOCAB, exact_at, row_at, b"  ab", floor, 1).rows == (((S1,), b" ab"),)  # the limit
    assert not frontier(VOCAB, exact_at, row_at, b"  ab", math.log(0.36), 8)  # nothing beats it


def test_a_descents_likely_rows_follow_the_known_covering_from_where_its_bytes_end():
    """The batch that spends the budget carries the rows of the descent the search then makes:
    the best covering known exactly, spelled from where the descent's first row ends (a gap up to
    that covering's next token boundary spelled by one token)."""
    from engine.remote.batch import continuation

    assert continuation(VOCAB, (S1,), REQUIRED, (S2, AB)) == ((S1, S1),)  # " " then the other " "
    assert continuation(VOCAB, (S2,), REQUIRED, (S2, AB)) == ()  # only the covering token is left
    assert continuation(VOCAB, (S1,), REQUIRED, (S2, A, B)) == ((S1, S1), (S1, S1, A))


def test_a_groups_cap_is_its_boosted_pick_with_slack_and_many_tokens_go_under_the_grammar(fake, monkeypatch):
    """The batch raises the tokens consistent with its group's bytes instead of sending a grammar
    (llama.cpp passes a grammar over the whole vocabulary at every prompt whose greedy token it
    refuses); the cap is the boosted pick's value plus the float32 rounding slack. A group whose
    consistent tokens are more than BOOST_MAX goes under the grammar, as before."""
    import engine.remote.batch as batching

    best = CoveringSearch(VOCAB, ExactRows(fake), 1 << 10).run(REQUIRED)
    rows = remote_for(fake.url)
    seq = Sequence(rows, VOCAB, SamplingConfig())
    assert seq.decode_prompt(PROMPT, REQUIRED, True, 8) and seq.covering.path == best.path
    node = rows.node(PROMPT + (S1X,))
    assert [cap[1:3] for cap in node.caps] == [(b" ab", pytest.approx(node.exact[SAB] + batching.BOOST_SLACK))]
    rows.client.close()

    monkeypatch.setattr(batching, "BOOST_MAX", 1)
    fake.bodies.clear()
    rows = remote_for(fake.url)
    seq = Sequence(rows, VOCAB, SamplingConfig())
    assert seq.decode_prompt(PROMPT, REQUIRED, True, 8) and seq.covering.path == best.path
    batch = [b for b in fake.bodies if isinstance(b["prompt"][0], list)][0]
    assert batch["grammar"] == 'root ::= " ab" .*' and "logit_bias" not in batch
    rows.client.close()


def test_rows_asked_ahead_stop_where_the_descent_estimated_with_the_coverings_values_cannot_win():
    """The descent from " " reads the row after " " " " only while its value, estimated with the
    known covering's value for the token ending at the same byte ("  ": 0.4), beats the floor."""
    from engine.remote.batch import _likely, continuation
    from engine.remote.rows import BoundedRows

    rows = RemoteRows(ModelServerClient("http://127.0.0.1:9", None, 1.0), VOCAB, 2048, 1, None, n_probs=2)
    rows.nodes.record(PROMPT, S2, math.log(0.4), [(S2, math.log(0.4)), (S1, math.log(0.3))], None)
    rows.nodes.record(PROMPT + (S2,), AB, math.log(0.5), [(AB, math.log(0.5))], None)
    bounded = BoundedRows(rows, PROMPT, REQUIRED, None, 8)
    ahead = continuation(VOCAB, (S1,), REQUIRED, (S2, AB))
    assert ahead == ((S1, S1),)
    # 0.3 * 0.4 = 0.12: below the covering "  " "ab" (0.2), above 0.1.
    assert _likely(bounded, (S1,), ahead, (S2, AB), math.log(0.2)) == ()
    assert _likely(bounded, (S1,), ahead, (S2, AB), math.log(0.1)) == ahead
    rows.client.close()
