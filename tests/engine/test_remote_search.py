"""The remote backend's exact covering search over a fake llama-server on hand-built
distributions (no model): what is proven from one request, what needs another, what typing along
costs, and what happens when the budget runs out."""

from __future__ import annotations

import math
import threading
import time

import pytest

from engine.backend import Cancelled
from engine.core.sequence import Sequence
from engine.remote.http import ModelServerClient
from engine.remote.rows import RemoteRows
from engine.remote.slots import SlotBook
from engine.types import SamplingConfig
from tests.engine.fake_llama_server import FakeLlamaServer
from tests.engine.toy import EOG, toy_vocab

PIECES = ["a", "b", "ab", "c", EOG, "x", "<bos>"]
A, B, AB, C, END, X, BOS = range(7)
VOCAB = toy_vocab(PIECES, control=("<bos>",))
# Per-step masking takes "a" (0.4) then "b" (0.5): 0.2 in all; the exact covering is "ab" (0.3).
TABLE = {
    (): {A: 0.4, AB: 0.3, B: 0.2, END: 0.05},
    (A,): {B: 0.5, A: 0.4},
    (A, B): {X: 0.9},
    (AB,): {C: 0.9},
    (AB, C): {END: 0.9},
}
PROMPT = (BOS,)


@pytest.fixture
def fake():
    server = FakeLlamaServer(VOCAB, TABLE)
    yield server
    server.close()


def remote_for(server: FakeLlamaServer, n_probs: int = 1) -> RemoteRows:
    rows = RemoteRows(ModelServerClient(server.url, None, 5.0), VOCAB, 2048, 1, None, n_probs=n_probs)
    rows.begin(None, max_tokens=4)
    return rows


def run(rows: RemoteRows, required: bytes, budget: int = 8) -> list[int]:
    seq = Sequence(rows, VOCAB, SamplingConfig())
    assert seq.decode_prompt(PROMPT, required, True, budget)
    out = []
    while len(out) < 6:
        result = seq.sample_next()
        if result.is_eos:
            break
        out.append(result.token)
    return out


def test_the_masked_path_is_not_taken_when_another_covering_is_more_probable(fake):
    rows = remote_for(fake)
    start = rows.client.traffic.round_trips
    assert run(rows, b"ab") == [AB, C]
    # A new document: a prefetch (its answer names the slot), then the grammar's request, which
    # proved nothing ("ab" was not listed and "a" capped it at 0.4); one request for the best
    # covering token (strict prefixes banned) made "ab" exact and proved it.
    assert rows.client.traffic.round_trips - start == 3
    named, first, second = fake.bodies[-3:]
    assert named["n_predict"] == 0 and named["id_slot"] == -1 and not named["cache_prompt"]
    assert first["grammar"] == 'root ::= "ab" .*' and "logit_bias" not in first
    assert second["logit_bias"] == [[A, False]]
    assert first["prompt"] == [BOS] and first["n_probs"] == 1
    # Decoded whole once, then every request names the slot and reuses it.
    assert (first["id_slot"], second["id_slot"]) == (0, 0) and first["cache_prompt"] and second["cache_prompt"]
    assert rows.fallbacks == []


def test_typing_along_the_suggestion_costs_no_request(fake):
    rows = remote_for(fake)
    run(rows, b"ab")
    before = rows.client.traffic.round_trips
    assert run(rows, b"abc") == [AB, C]
    assert rows.client.traffic.round_trips == before


def test_with_the_listed_tokens_one_request_proves_it_and_generation_starts_from_the_covering(fake):
    rows = remote_for(fake, n_probs=4)
    assert run(rows, b"ab") == [AB, C]
    # The prefetch naming the slot; the grammar's stream went down "a" "b"; the listed "ab" beat
    # it, proven at once. What comes after "ab" takes one plain request from there.
    assert rows.client.traffic.round_trips == 3
    assert fake.bodies[-1]["prompt"] == [BOS] and fake.bodies[-1]["grammar"] == f"root ::= <[{AB}]> .*"


def test_out_of_budget_the_best_covering_known_exactly_is_used_and_said(fake):
    rows = remote_for(fake)
    assert run(rows, b"ab", budget=0)[:3] == [A, B, X]
    assert rows.fallbacks == ["unproven"]


def test_a_covering_first_token_is_proven_by_the_grammar_alone(fake):
    rows = remote_for(fake)
    assert run(rows, b"c")[:1] in ([C], [])  # nothing listed but the grammar's pick
    # Root: the best token consistent with "c" is "c" itself, a covering: nothing can beat it.
    assert rows.client.traffic.round_trips == 2  # with the prefetch that names the slot


def test_a_prompt_goes_back_to_the_slot_the_server_used_for_it(fake):
    rows = remote_for(fake)
    rows.prefill(PROMPT)
    assert fake.bodies[-1]["n_predict"] == 0 and fake.bodies[-1]["id_slot"] == -1
    run(rows, b"ab")
    assert fake.bodies[-1]["id_slot"] == 0  # learnt from the prefetch's answer


def test_a_cancelled_keystroke_answers_cancelled_and_the_next_one_works(fake):
    import threading

    rows = remote_for(fake)
    cancel = threading.Event()
    cancel.set()
    seq = Sequence(rows, VOCAB, SamplingConfig(), cancel)
    assert not seq.decode_prompt(PROMPT, b"ab", True, 8)
    rows.end()
    assert run(rows, b"ab") == [AB, C]


def test_per_step_masking_is_the_servers_grammar(fake):
    rows = remote_for(fake)
    seq = Sequence(rows, VOCAB, SamplingConfig())
    assert seq.decode_prompt(PROMPT, b"ab", exact=False)
    tokens = [seq.sample_next().token for _ in range(3)]
    assert tokens == [A, B, X]  # seed 001's bias, on purpose
    assert rows.client.traffic.round_trips == 2  # the prefetch naming the slot, then the grammar's


# "abc": the grammar takes "a" (0.4) then "bc" (0.5): 0.2, all exact. "ab" is known only by the
# grammar's cap (0.4) until its node is expanded, which makes it exact (0.05): "ab" "c" is then
# 0.045, though the search that expanded it ranked it at 0.4 * 0.9 = 0.36.
STALE_PIECES = ["a", "ab", "abc", "bc", "c", "b", EOG, "<bos>"]
SA, SAB, SABC, SBC, SC, SB, SEND, SBOS = range(8)
STALE_VOCAB = toy_vocab(STALE_PIECES, control=("<bos>",))
STALE_TABLE = {
    (): {SEND: 0.54, SA: 0.4, SAB: 0.05, SABC: 0.01},
    (SA,): {SBC: 0.5, SB: 0.3, SEND: 0.2},
    (SAB,): {SC: 0.9, SEND: 0.1},
    (SA, SBC): {SEND: 0.99},
    (SAB, SC): {SEND: 0.99},
}


def test_a_path_ranked_on_a_bound_that_became_exact_meanwhile_is_not_taken_as_proven():
    server = FakeLlamaServer(STALE_VOCAB, STALE_TABLE)
    try:
        rows = RemoteRows(ModelServerClient(server.url, None, 5.0), STALE_VOCAB, 2048, 1, None, n_probs=1)
        rows.begin(None, max_tokens=4)
        seq = Sequence(rows, STALE_VOCAB, SamplingConfig())
        assert seq.decode_prompt((SBOS,), b"abc", True, 8)
        assert seq.covering.path == (SA, SBC)  # 0.2 beats "ab" "c" at 0.045
        assert abs(seq.covering.log_prob - math.log(0.2)) < 0.01  # its exact value, not a bound (0.36)
        assert rows.fallbacks == []
    finally:
        server.close()


def test_a_prefill_left_for_another_document_still_names_its_slot(fake):
    """A document's prefetch is superseded by another document's: its request is left running
    (the server decodes it anyway), and its answer, read at a later call, names the slot holding
    it, so the first document's next call sends nothing to decode it again."""
    fake.prefill_delay_s = 1.0  # the cancel below comes well before the answer
    fake.assign_slots = True
    rows = RemoteRows(ModelServerClient(fake.url, None, 5.0), VOCAB, 2048, 4, None)
    first, second = PROMPT + (1, 2, 3) * 30, PROMPT + (3, 2, 1) * 30  # long enough to move between slots (kv.placement)
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    rows.begin(None, max_tokens=0)  # the first document's prefetch, preempted (the newest call wins)
    with pytest.raises(Cancelled):
        rows.prefill(first, cancel)
    rows.end()
    rows.begin(None, max_tokens=0)  # the second document's prefetch: the first one's is left running
    rows.prefill(second)
    rows.end()
    assert not rows.filling
    until = time.monotonic() + 10
    while not rows.prefills.detached[0].pending.ready() and time.monotonic() < until:  # its answer comes (sent first)
        time.sleep(0.01)
    rows.begin(None, max_tokens=0)  # the first document again: its answer has come meanwhile
    rows.prefill(first)
    rows.end()
    prefills = [(b["prompt"], b["id_slot"]) for b in fake.bodies if not b.get("stream")]
    assert prefills == [(list(first[:-1]), -1), (list(second[:-1]), -1)], prefills  # nothing sent again
    assert (
        rows.slots.cached_in(*rows.slots.slot_for(first), first) == len(first) - 1
    )  # slot 0, named by the late answer
    assert rows.slots.slot_for(first)[0] == 0 and rows.slots.slot_for(second)[0] == 1


def test_a_prefill_left_running_in_a_slot_we_used_before_still_names_it(fake):
    """The server puts a prefill sent to its pick in any idle slot, one that held another of our
    documents too: its late answer names that slot for it. Taken for out of date (the slot had
    held something else), the answer was given up and the document sent again from 0 at its next
    call (every keystroke, with the whole prompt behind a first answer: 3.5 s a warm call)."""
    fake.prefill_delay_s = 1.0
    fake.assign_slots = True
    rows = RemoteRows(ModelServerClient(fake.url, None, 5.0), VOCAB, 2048, 4, None)
    zero, first, second = (PROMPT + (t, t, 1) * 60 for t in (1, 2, 3))  # each to a fresh slot (kv.placement)
    rows.begin(None, max_tokens=0)
    rows.prefill(zero)  # slot 0
    rows.end()
    fake._next_slot = 0  # the server's pick for the next one: slot 0 again (idle, least recently used)
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    rows.begin(None, max_tokens=0)
    with pytest.raises(Cancelled):
        rows.prefill(first, cancel)
    rows.end()
    rows.begin(None, max_tokens=0)  # another document: the first one's prefill is left running
    rows.prefill(second)
    rows.end()
    until = time.monotonic() + 10
    while not rows.prefills.detached[0].pending.ready() and time.monotonic() < until:
        time.sleep(0.01)
    rows.begin(None, max_tokens=0)
    rows.prefill(first)
    rows.end()
    prefills = [(b["prompt"], b["id_slot"]) for b in fake.bodies if not b.get("stream")]
    assert [p for p, _ in prefills] == [list(zero[:-1]), list(first[:-1]), list(second[:-1])], prefills
    assert rows.slots.slot_for(first)[0] == 0 and rows.cached_prefix(first) == len(first) - 1


def test_a_prefill_that_misses_the_budget_is_waited_on_again_not_sent_again(fake):
    """The keystroke's budget runs out; the prefetch that follows (longer budget) waits on the same
    request; a prefill for another document gives a running one up (the connection is closed)."""
    from engine.types import ModelServerError

    fake.prefill_delay_s = 0.8
    rows = RemoteRows(ModelServerClient(fake.url, None, 0.3), VOCAB, 2048, 1, None)
    doc = PROMPT + (1, 2, 3)
    rows.begin(None, max_tokens=4)
    with pytest.raises(ModelServerError) as slow:
        rows.prefill(doc)
    assert slow.value.kind == "timeout" and rows.filling
    rows.end()
    assert rows.filling  # an ended call leaves it running
    rows.begin(None, max_tokens=0)  # the prefetch
    rows.prefill(doc)
    rows.end()
    assert not rows.filling
    prefills = [b for b in fake.bodies if not b.get("stream")]
    assert len(prefills) == 1, prefills  # sent once, waited on twice
    rows.begin(None, max_tokens=4)
    other = PROMPT + (3, 2, 1, 1)
    with pytest.raises(ModelServerError):
        rows.prefill(other)
    rows.end()
    third = PROMPT + (2, 2, 2, 2)
    rows.begin(None, max_tokens=4)  # the next keystroke, in another document
    with pytest.raises(ModelServerError):
        rows.prefill(third)  # another document: the first one is given up, this one is sent
    assert [b["prompt"] for b in fake.bodies if not b.get("stream")][1:] == [list(other[:-1]), list(third[:-1])]


def test_a_slot_sharing_less_than_a_ubatch_is_decoded_from_0():
    """Another document that shares only the BOS with our slot goes with `cache_prompt` off: the
    server then decodes it from position 0, as the in-process engine does (engine.core.placement
    `kept`); a prompt that shares more than a ubatch keeps it."""
    book = SlotBook(total_slots=1, fixed_slot=0)
    book.hold(0, (BOS,) + (A,) * 200, live=True)
    assert book.slot_for((BOS,) + (B,) * 200) == (0, False)
    assert book.slot_for((BOS,) + (A,) * 100 + (B,) * 100) == (0, True)
