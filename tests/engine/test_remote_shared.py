"""A team on one llama-server, seen from one client (a fake server, no model): once a slot it held
gives back less of its document than it left there (another user took it), the client stops
naming slots for a call's first request and lets the server place the document (an idle slot,
into which the server's RAM prompt cache restores it). Alone, it keeps naming its slots."""

from __future__ import annotations

import pytest

from engine.remote.http import ModelServerClient
from engine.remote.rows import RemoteRows
from engine.remote.slots import TAKEN_MIN_TOKENS
from tests.engine.fake_llama_server import FakeLlamaServer
from tests.engine.toy import EOG, toy_vocab

PIECES = ["a", "b", EOG, "<bos>"]
A, B, END, BOS = range(4)
VOCAB = toy_vocab(PIECES, control=("<bos>",))
DOCUMENT = (BOS,) + (A,) * 70  # more than one ubatch: a shorter shared prefix is decoded again (placement `kept`)
LONGER = DOCUMENT + (B,) * 5  # the same document, typed on: its slot should give back DOCUMENT


@pytest.fixture
def fake():
    server = FakeLlamaServer(VOCAB, {(): {A: 0.6, END: 0.4}})
    server.assign_slots = True
    yield server
    server.close()


def client(fake: FakeLlamaServer) -> RemoteRows:
    return RemoteRows(ModelServerClient(fake.url, None, 5.0), VOCAB, 2048, 4, None)


def prefill(rows: RemoteRows, tokens: tuple[int, ...]) -> None:
    """One engine call (a prefetch) that decodes `tokens` into a slot."""
    rows.begin(None, max_tokens=0)
    rows.prefill(tokens)


def test_alone_every_request_after_the_first_names_the_slot(fake):
    rows = client(fake)
    prefill(rows, DOCUMENT)
    fake.cache_n = len(DOCUMENT) - 1  # the slot gave back all it held
    prefill(rows, LONGER)
    prefill(rows, LONGER + (A,) * 5)
    assert [b["id_slot"] for b in fake.bodies] == [-1, 0, 0]
    assert not rows.slots.sharing.shared and rows.slots.sharing.taken == 0


def test_a_slot_taken_by_another_user_makes_the_next_call_ask_the_server_to_place_it(fake):
    rows = client(fake)
    prefill(rows, DOCUMENT)
    fake.cache_n = 3  # another user's document, sharing 3 tokens, took the slot meanwhile
    prefill(rows, LONGER)
    assert rows.slots.sharing.shared and rows.slots.sharing.taken == 1
    fake.cache_n = len(LONGER) - 1
    prefill(rows, LONGER + (A,) * 5)  # the next call: the server's pick, with its cache
    prefill(rows, LONGER + (A,) * 9)  # and every call's first request after it
    assert [(b["id_slot"], b["cache_prompt"]) for b in fake.bodies] == [(-1, False), (0, True), (-1, True), (-1, True)]
    assert rows.slots.sharing.taken == 1  # the server placed the last two: nothing was expected of a slot


def test_a_few_tokens_short_is_not_a_theft(fake):
    rows = client(fake)
    prefill(rows, DOCUMENT)
    fake.cache_n = len(DOCUMENT) - TAKEN_MIN_TOKENS  # e.g. a stream closed before its last token was decoded
    prefill(rows, LONGER)
    assert not rows.slots.sharing.shared


def test_alone_each_slot_is_a_kept_prompt_and_on_a_shared_server_one(fake):
    """Alone, the slots stand for the in-process sequences (a first answer from the near window,
    the whole prompt in another slot: engine.Engine.first_prompt); what any of them holds counts as
    decoded. With others on the server, or one fixed slot, a document keeps to one."""
    rows = client(fake)
    first, second = (BOS,) + (A,) * 200, (BOS,) + (B,) * 200  # long enough to go to another slot (placement)
    prefill(rows, first)
    prefill(rows, second)
    assert [b["id_slot"] for b in fake.bodies] == [-1, -1]
    assert rows.kept_prompts == 4
    assert rows.cached_prefix(first + (B,)) == len(first) - 1 and rows.cached_prefix(second) == len(second) - 1
    rows.slots.sharing.slot_taken()
    assert rows.kept_prompts == 1
    assert RemoteRows(ModelServerClient(fake.url, None, 5.0), VOCAB, 2048, 4, 2).kept_prompts == 1


def test_a_prefill_beside_the_live_slot_never_cuts_it_back(fake):
    """The whole prompt prefetched after a first answer goes to another slot, as in-process to
    another sequence (engine.core.placement `beside`), even where a prompt alone would stay."""
    rows = client(fake)
    prefill(rows, DOCUMENT)  # 71 tokens: another short prompt alone would stay in its slot
    rows.begin(None, max_tokens=0)
    rows.prefill((BOS,) + (B,) * 70, beside=True)
    prefill(rows, (BOS,) + (A,) * 3 + (B,) * 70)  # without `beside`: the live slot, cut back
    assert [b["id_slot"] for b in fake.bodies] == [-1, -1, 1]
