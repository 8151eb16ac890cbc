"""The remote backend on a real llama-server (tests/fixtures.py `llama_server`: built from the
pinned sdist's llama.cpp, default model, 4 slots on 127.0.0.1): the same suggestions as the
in-process engine, KV reuse, prefetch, round trips, cancellation, and the first-contact checks."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import replace

import pytest

from engine import CompletionRequest, Engine, EngineConfig, ModelServerError, SamplingConfig

pytestmark = pytest.mark.model

SEEDS = [
    ("Thanks for sending over the draft", " yest", " yesterday"),  # seed 000
    ("import", " num", " numpy"),  # seed 001
    ("The model's", " behavi", " behavior"),  # seed 001
    ("", "Once upon a ti", "Once upon a time"),  # seed 001: empty prompt, several tokens
]
KEY = "test-key-7f3a"
SLOW = 120.0  # the request budget on a loaded 2-core machine (tests claim no speed)


@pytest.fixture(scope="module")
def remote(llama_server):
    engine = Engine.load(EngineConfig(model_server=llama_server.url, model_server_timeout_s=SLOW))
    yield engine
    engine.close()


def slots(url: str, key: str | None = None) -> list[dict]:
    request = urllib.request.Request(url + "/slots", headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


@pytest.mark.parametrize("prompt,required,expected", SEEDS)
def test_the_seeds_examples_are_the_in_process_engines(remote, model_engine, prompt, required, expected):
    """The whole suggestion, not only its first word: both decode the prompt in the same ubatches
    (engine.local.llama CHUNK_TOKENS), so greedy generation after the covering agrees too."""
    request = CompletionRequest(prompt, required, max_tokens=8)
    # Both from a cold start: a prompt decoded after a shared prefix starts its ubatches there, and
    # the two caches hold what other tests left (bench.remote_engine compares them back to back).
    remote.kv.forget()
    model_engine.kv.forget()
    theirs, ours = remote.complete(request), model_engine.complete(request)
    assert ours.text.startswith(expected)
    assert theirs.text == ours.text
    assert theirs.stats.round_trips >= 1 and theirs.stats.bytes_received > 0
    assert theirs.stats.fallback is None  # proven exact, not the server's per-step mask


def test_typing_inside_a_word_costs_no_prompt_work_and_typing_along_no_request(remote, model_engine):
    prompt = "Please review the attached proposal before the meeting on"
    first = remote.complete(CompletionRequest(prompt, " Mon", max_tokens=6))
    assert first.text == model_engine.complete(CompletionRequest(prompt, " Mon", max_tokens=6)).text
    assert first.text.startswith(" Monday")
    again = remote.complete(CompletionRequest(prompt, " Mond", max_tokens=6))
    assert again.stats.decoded_tokens <= 1  # the server re-reads the last prompt token's row at most
    # " Mond", " Monda": the same covering and the same tokens after it (" Monday" typed whole
    # would count one token less against max_tokens, and so ask for one more).
    along = [remote.complete(CompletionRequest(prompt, first.text[:k], max_tokens=6)) for k in (5, 6)]
    for completion in along:
        assert completion.text == first.text
        assert completion.stats.round_trips == 0  # every distribution needed is remembered


def test_prefetch_leaves_only_the_last_token_to_decode(remote, llama_server):
    request = CompletionRequest("A fresh document about gardening: tomatoes need sun, water and", " so", max_tokens=4)
    done = remote.prefetch(request)
    assert done.finished and done.decoded_tokens > 10
    completion = remote.complete(request)
    assert completion.stats.decoded_tokens <= 1
    assert completion.text.startswith(" so")


def test_a_cancel_closes_the_stream_and_the_server_stops_decoding(remote, llama_server):
    request = CompletionRequest(
        "Chapter 1. It was a dark and stormy night; the rain fell",
        "",
        max_tokens=400,
        sampling=SamplingConfig(single_line=False),
    )
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    completion = remote.complete(request, cancel)
    timer.join()
    assert completion.cancelled and completion.text == ""
    deadline = time.monotonic() + 5
    while any(slot["is_processing"] for slot in slots(llama_server.url)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(slot["is_processing"] for slot in slots(llama_server.url))  # long before 400 tokens
    after = remote.complete(CompletionRequest("import", " num", max_tokens=4))
    assert after.text.startswith(" numpy")  # the engine stays usable


def test_equal_to_in_process_on_mid_word_cases(remote, model_engine):
    """A slice of the 200-case set of bench.remote_engine (the whole set is the benchmark's: 200 of
    200 equal), back to back from a cold start: the whole suggestions are the same."""
    from tests.support.equality import case_requests, compare

    remote.kv.forget()
    model_engine.kv.forget()
    report = compare(model_engine, remote, case_requests(12, 8))
    assert report["equal"] == report["cases"], report["differ"]


def test_a_word_after_a_deep_indent_takes_two_round_trips_and_is_the_in_process_one(remote, model_engine):
    """bench.tail's keystrokes that need the server (Gemma 3 270M): a word after 17 spaces of
    indentation, whose many spellings (16 + 1 spaces, 13 + 4, ...) the covering search must bound.
    Each one is the batch of rows (with the rows of the descent it would make when the budget runs
    out: engine.remote.batch `continuation`) and the suggestion's stream, and its suggestion is the
    in-process one. Asked one after another, as typed (the rows of one keystroke serve the next)."""
    from tests.support.prompts import SIZES, documents

    doc = documents(model_engine.count_tokens, SIZES[1], 1, min_word=7, first_line=60 + SIZES[1] // 3)[0]
    indent = doc.base[len(doc.base.rstrip(" ")) :]
    assert len(indent) == 17 and doc.word.startswith("max_help_p")
    remote.kv.forget()
    model_engine.kv.forget()
    for typed in ("m", "max_h", "max_help_p", "max_help_po"):
        request = CompletionRequest(
            doc.base.rstrip(" "), indent + typed, max_tokens=16, suffix="", document="file:///t/deep.py"
        )
        remote.prefetch(request)
        model_engine.prefetch(request)
        theirs, ours = remote.complete(request), model_engine.complete(request)
        assert theirs.text == ours.text, typed
        assert theirs.stats.fallback is None, typed
        assert theirs.stats.round_trips <= 2, (typed, theirs.stats.round_trips)


def test_the_next_line_at_a_line_end_is_the_in_process_engines(remote, model_engine):
    """A `next_line` request whose line the model ends at once: the server stops its stream at
    that line break, and the engine asks for the rest from there (one round trip more)."""
    request = CompletionRequest("def add(a, b):\n    total = a + b", max_tokens=24, next_line=True)
    remote.kv.forget()
    model_engine.kv.forget()
    theirs, ours = remote.complete(request), model_engine.complete(request)
    assert ours.text.startswith("\n") and ours.text.strip() and ours.stop_reason == "line", ours
    assert theirs.text == ours.text and theirs.stop_reason == ours.stop_reason


ROUTER = """export class Router {
    constructor(routes) {
        this.routes = routes;
        this.cache = new Map();
    }

    match(path) {
        for (const route of this.routes) {
            if (route.pattern.test(path)) {
                const found = this.cache.get(path);
"""
SIGNAL_CASES = [
    (ROUTER, "                ex"),  # a word after a run of indentation spaces: many token splits cover it
    (ROUTER, "                re"),
    ("The committee will meet again next week to review the", " prop"),  # a rival word: a finite margin
    (
        "def summarize(records):\n    totals = {}\n    for record in records:\n        totals[record.name] = 0\n    return",
        " tot",
    ),
]


def _same(a: float, b: float) -> bool:
    """Equal but for the float noise of two programs computing the same logits (about 1e-3)."""
    return a == b or abs(a - b) <= 0.01


@pytest.mark.parametrize("prompt,required", SIGNAL_CASES)
def test_the_gates_inputs_are_the_in_process_engines(remote, model_engine, prompt, required):
    """The confidence gate reads the same numbers on both backends (engine.signals: the coverings
    along the chosen one, each row cut to its top tokens). They were not: the mass of what was
    typed summed every covering the search saw, dense rows and cheap branches in-process, listed
    tokens and proven branches remote (16 spaces and `ex`: log p(typed) -7.12 against -8.08, a
    margin of 0.42 against none), so the gate showed one and hid the other."""
    request = CompletionRequest(prompt, required, max_tokens=8)
    remote.kv.forget()
    model_engine.kv.forget()
    theirs, ours = remote.complete(request), model_engine.complete(request)
    assert ours.signals is not None and ours.signals.word_ends and theirs.text == ours.text
    a, b = theirs.signals, ours.signals
    assert _same(a.typed_log_prob, b.typed_log_prob), (a.typed_log_prob, b.typed_log_prob)
    assert _same(a.margin, b.margin), (a.margin, b.margin)
    assert [e.chars for e in a.word_ends] == [e.chars for e in b.word_ends]
    assert all(_same(x.log_prob, y.log_prob) for x, y in zip(a.word_ends, b.word_ends)), (a.word_ends, b.word_ends)


def test_a_wrong_key_is_refused_and_the_right_one_works():
    from tests.fixtures import start_llama_server

    server = start_llama_server(slots=1, api_key=KEY)
    try:
        for key in (None, "wrong"):
            with pytest.raises(ModelServerError) as caught:
                Engine.load(
                    EngineConfig(model_server=server.url, model_server_api_key=key, model_server_timeout_s=SLOW)
                )
            assert caught.value.kind == "auth" and KEY not in str(caught.value)
        engine = Engine.load(
            EngineConfig(model_server=server.url, model_server_api_key=KEY, model_server_timeout_s=SLOW)
        )
        assert engine.complete(CompletionRequest("import", " num", max_tokens=3)).text.startswith(" numpy")
        engine.close()
    finally:
        server.stop()


def test_a_server_with_another_vocabulary_is_refused(tiny_models):
    from tests.fixtures import start_llama_server

    server = start_llama_server(slots=1, model=tiny_models["plain"])
    try:
        with pytest.raises(ModelServerError) as caught:
            Engine.load(EngineConfig(model_server=server.url, model_server_timeout_s=SLOW))
        assert caught.value.kind == "model" and "`model`" in str(caught.value)
    finally:
        server.stop()


def test_a_server_that_goes_away_mid_session_is_unreachable_then_back(remote, llama_server):
    llama_server.kill()
    try:
        with pytest.raises(ModelServerError) as caught:
            remote.complete(CompletionRequest("A prompt the server has not seen: the", " qu", max_tokens=3))
        assert caught.value.kind == "unreachable"
    finally:
        llama_server.restart()
    time.sleep(4.1)  # past the longest back-off window
    assert remote.complete(CompletionRequest("import", " num", max_tokens=3)).text.startswith(" numpy")


def test_stats_count_the_bytes_of_each_request(remote):
    completion = remote.complete(CompletionRequest("The weather today is", " sun", max_tokens=4))
    stats = completion.stats
    assert stats.round_trips >= 1 and stats.bytes_sent > 100 and stats.bytes_received > stats.bytes_sent
    quiet = remote.complete(replace(CompletionRequest("The weather today is", " sun", max_tokens=4)))
    assert quiet.text == completion.text
