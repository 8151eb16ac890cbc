"""Two users on one llama-server slot (a real server): the second user's document takes the slot,
and the first user's next keystroke on its own document must find its prompt again, not decode it
anew. That is the theft a team meets when users outnumber slots (bench.team measures it at 4 and
8 users); what repairs it is the server's RAM prompt cache, consulted when a request names a slot
holding another prompt, which llama-server does only with a non-zero --slot-prompt-similarity.
The test claims no speed: it counts the prompt tokens the server evaluated (its own counters)."""

from __future__ import annotations

import threading
import time

import pytest

from engine import CompletionRequest, Engine, EngineConfig
from engine.remote.http import ModelServerClient
from tests.fixtures import start_llama_server

pytestmark = pytest.mark.model

HEADER = "# Copyright 2025-26 Example Team. SPDX-License-Identifier: Apache-2.0\nfrom __future__ import annotations\n\nimport os\nimport re\n\n"
MINE = HEADER + (
    'def parse_arguments(argv):\n    """Read the command line and return the options the tool was started with:\n'
    "    the input files, the output directory, how verbose to be, and whether to overwrite files\n"
    '    that are already there. Unknown options stop the tool with a message."""\n'
    "    parser = make_parser()\n    return parser."
)
THEIRS = HEADER + (
    'class Inventory:\n    """Items in the warehouse, counted by shelf and by the day they arrived;\n'
    "    an item leaves when it is sold, and the count of each shelf is checked every evening against\n"
    '    the orders of the day."""\n\n    def __init__(self, shelves):\n        self.'
)
# llama-server saves the slot's prompt to RAM only when less than half of it is kept, so the two
# documents are each more than twice as long as the header they share.


def engine_for(url: str) -> Engine:
    return Engine.load(EngineConfig(model_server=url, model_server_timeout_s=120.0, threads=1))


@pytest.mark.parametrize("similarity,restored", [("0.1", True), ("0", False)])
def test_a_prompt_displaced_by_another_user_comes_back_from_the_ram_cache(similarity, restored):
    server = start_llama_server(slots=1, extra_args=("--slot-prompt-similarity", similarity))
    me, other = engine_for(server.url), engine_for(server.url)
    try:
        mine = CompletionRequest(MINE, "pars", max_tokens=3)
        first = me.complete(mine)
        assert me.complete(CompletionRequest(MINE, "parse", max_tokens=3)).stats.decoded_tokens <= 1
        other.complete(CompletionRequest(THEIRS, "ite", max_tokens=3))  # takes the one slot
        # Another word than the one suggested, so the distributions remembered do not answer it.
        back = me.complete(CompletionRequest(MINE, "opt", max_tokens=3))
        assert back.stats.round_trips >= 1
        if restored:
            # Restored from RAM: at most the prompt's last token and the covering's few tokens.
            assert back.stats.decoded_tokens <= 3, back.stats
        else:
            # Only the shared header was kept: the rest of the prompt is decoded again.
            assert back.stats.decoded_tokens >= first.stats.prompt_tokens // 2, back.stats
        assert back.text.startswith("opt")
    finally:
        me.close()
        other.close()
        server.stop()


# What llama-server does with a team's prompts, asked of it directly (token prompts, `n_predict`
# 0, the answer's `id_slot` and `timings.cache_n`): the causes docs/shared-server.md names for
# reuse lost on 4 slots ("A team on one server").


def _tokens(server, text: str) -> list[int]:
    status, body = server.post("/tokenize", {"content": text, "add_special": True})
    assert status == 200, body
    return body["tokens"]


def _prefill(server, tokens: list[int], slot: int = -1, cache: bool = True) -> tuple[int, int]:
    """Decode `tokens` into a slot: (the slot used, prompt tokens taken from cache or RAM)."""
    status, body = server.post(
        "/completion",
        {
            "prompt": tokens,
            "n_predict": 0,
            "id_slot": slot,
            "cache_prompt": cache,
            "response_fields": ["id_slot", "timings"],
        },
        timeout=120,
    )
    assert status == 200, body
    return body["id_slot"], body["timings"]["cache_n"]


@pytest.mark.parametrize("similarity,same_slot", [("0.1", True), ("0.5", False)])
def test_a_new_document_with_the_same_header_takes_another_users_idle_slot_only_below_its_share(similarity, same_slot):
    """A request that names no slot (a document's first) goes to the idle slot most like it when
    that one shares more than `--slot-prompt-similarity` of it: at 0.1 the slot another user's
    document holds (the header is about a third of each), though an empty slot is there; at 0.5,
    the least recently used, which is the empty one."""
    server = start_llama_server(slots=2, extra_args=("--slot-prompt-similarity", similarity))
    try:
        mine, theirs = _tokens(server, MINE), _tokens(server, THEIRS)
        slot, _ = _prefill(server, mine)
        other, _ = _prefill(server, theirs)
        assert (other == slot) is same_slot
        # Either way my document comes back whole when I name my slot: kept in it (0.5), or
        # saved to RAM when it was displaced and restored (0.1).
        assert _prefill(server, mine, slot)[1] == len(mine) - 1
    finally:
        server.stop()


def test_a_new_document_restored_for_its_header_takes_a_saved_prompt_out_of_ram():
    """The RAM cache moves a prompt into the slot, it does not copy it (`server_prompt_cache::load`),
    and it restores any saved prompt that keeps a quarter of itself and more of itself than the
    slot would, and shares more with the request than the slot does. So a new document that shares the header and its first word with
    a saved document restores that one, decodes over it, and it is gone: its owner's next request
    decodes all but what it shares again, whatever the similarity setting."""
    server = start_llama_server(slots=1, extra_args=("--slot-prompt-similarity", "0.5"))
    try:
        # Theirs is long, so the slot holding it keeps a smaller part of itself for the new
        # document than the saved mine would (the other condition of a restore).
        mine, theirs = (
            _tokens(server, MINE),
            _tokens(server, THEIRS + "items = {}\n" + THEIRS[len(HEADER) :].replace("self.", "pass\n")),
        )
        # A third document: the header and MINE's first words ("def parse_"), then its own text.
        new = _tokens(
            server,
            HEADER
            + 'def parse_config(path):\n    """Read the settings file at `path`."""\n    with open(path) as f:\n        return json.load(f)\n',
        )
        shared = max(i for i in range(min(len(new), len(mine))) if new[:i] == mine[:i])
        assert _prefill(server, mine)[1] == 0
        _prefill(server, theirs, 0)  # displaces mine: saved to RAM
        assert _prefill(server, mine, 0)[1] == len(mine) - 1  # restored whole (theirs saved)
        _prefill(server, theirs, 0)  # and theirs back; mine saved again
        _prefill(server, new, 0)  # restores mine for the shared start, then decodes over it
        assert _prefill(server, mine, 0)[1] == shared  # only the shared start is left
    finally:
        server.stop()


def test_at_similarity_0_a_client_that_lost_its_slot_once_gets_its_document_back_from_ram():
    """At `--slot-prompt-similarity 0` (the safe setting: see the next test) llama-server consults
    its RAM prompt cache only for a request that names no slot. The first time another user takes
    my slot, my named request decodes my document again and the client learns it is in a team;
    from then on its calls let the server place the document, which the cache gives back."""
    server = start_llama_server(slots=1, extra_args=("--slot-prompt-similarity", "0"))
    me, other = engine_for(server.url), engine_for(server.url)
    try:
        first = me.complete(CompletionRequest(MINE, "pars", max_tokens=3))
        other.complete(CompletionRequest(THEIRS, "ite", max_tokens=3))
        lost = me.complete(CompletionRequest(MINE, "opt", max_tokens=3))
        assert lost.stats.decoded_tokens >= first.stats.prompt_tokens // 2, lost.stats  # decoded again
        other.complete(CompletionRequest(THEIRS, "cou", max_tokens=3))  # takes the slot again
        back = me.complete(CompletionRequest(MINE, "arg", max_tokens=3))
        assert back.stats.decoded_tokens <= 3, back.stats  # restored from RAM
        assert back.text.startswith("arg")
    finally:
        me.close()
        other.close()
        server.stop()


@pytest.mark.parametrize("similarity,intact", [("0.1", False), ("0", True)])
def test_a_request_naming_a_busy_slot_changes_its_running_generation_only_at_a_non_zero_similarity(similarity, intact):
    """Why docs/shared-server.md runs llama-server at `--slot-prompt-similarity 0`. At a non-zero
    similarity, a request that names a slot busy with another request runs the RAM-cache step
    before it is deferred (`get_available_slot`): it saves the slot and loads its own saved prompt
    into it, under the generation running there, which goes on over the other document's KV. At 0
    the request just waits for the slot. Two users whose documents were in one slot do this."""
    server = start_llama_server(slots=1, threads=2, extra_args=("--slot-prompt-similarity", similarity))
    try:
        mine, theirs = _tokens(server, MINE), _tokens(server, THEIRS)
        generate = {
            "prompt": mine,
            "n_predict": 96,
            "id_slot": 0,
            "cache_prompt": True,
            "temperature": 0.0,
            "samplers": ["temperature"],
            "return_tokens": True,
            "ignore_eos": True,
        }
        _prefill(server, theirs, 0)
        _prefill(server, mine, 0)  # theirs saved to RAM (at 0.1; at 0 nothing is saved or loaded)
        status, alone = server.post("/completion", generate, timeout=120)
        assert status == 200, alone
        _prefill(server, theirs, 0)
        _prefill(server, mine, 0)
        stream = ModelServerClient(server.url, None, 120.0).stream(
            "/completion", generate | {"stream": True}, time.monotonic() + 120
        )
        tokens = []
        while (event := stream.next_event()) is not None:
            if event.get("tokens") and not tokens:
                other = threading.Thread(target=_prefill, args=(server, theirs, 0))  # names the busy slot
                other.start()
            tokens += event.get("tokens") or []
        other.join()
        assert (tokens == alone["tokens"]) is intact, (tokens, alone["tokens"])
    finally:
        server.stop()
