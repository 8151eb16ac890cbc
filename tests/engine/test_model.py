"""The engine on the real default model: the seeds' examples, KV reuse and cancellation."""

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from engine import CompletionRequest, SamplingConfig
from engine.backend import Cancelled
from engine.core.covering import CoveringSearch
from engine.core.placement import UBATCH_TOKENS
from engine.core.prefix import RequiredPrefix
from engine.core.sampler import log_sum_exp
from engine.core.sequence import PathRows


@pytest.fixture
def engine(model_engine):
    """The session's engine on the real model (tests/fixtures.py)."""
    return model_engine


def complete(engine, prompt, required, **kwargs):
    return engine.complete(CompletionRequest(prompt=prompt, required=required, **kwargs))


@pytest.mark.parametrize(
    ("prompt", "required", "expected"),
    [
        ("Thanks for sending over the draft", " yest", " yesterday"),  # seed 000
        ("import", " num", " numpy"),  # seed 001
        ("The model's", " behavi", " behavior"),  # seed 001
        ("", "Once upon a ti", "Once upon a time"),  # seed 001: empty prompt, several tokens
    ],
)
def test_the_seeds_examples_hold(engine, prompt, required, expected):
    result = complete(engine, prompt, required)
    assert result.required_satisfied
    assert result.text.startswith(expected), result.text


@pytest.mark.parametrize("exact", [True, False])
def test_every_completion_begins_with_the_required_prefix(engine, exact):
    for prompt, required in [("def parse(", "sel"), ("x = ", " zzq"), ("Hello", " wörl"), ("a", "\t  ")]:
        result = complete(engine, prompt, required, exact=exact)
        assert result.text.startswith(required), (prompt, required, result.text)


def per_step_path(engine, rows, required: bytes):
    """Seed 001's masking: the best consistent token at each step, with its path log-probability."""
    prefix = RequiredPrefix(engine.vocab, required)
    path, logp = (), 0.0
    while prefix.active:
        row = rows.row(path)
        token = int(prefix.allowed()[int(np.argmax(row[prefix.allowed()]))])
        logp += float(row[token]) - log_sum_exp(row)
        prefix.consume(token)
        path += (token,)
    return path, logp


@pytest.mark.parametrize(
    ("prompt", "required"),
    [
        ("Thanks for sending over the draft", " yest"),
        ("The model's", " behavi"),
        ("import", " num"),
        ("def parse_arguments(", "sel"),
        ("We walked along the", " riverb"),
    ],
)
def test_the_covering_search_finds_a_path_at_least_as_probable_as_per_step_masking(engine, prompt, required):
    tokens = engine.tokenize(prompt)
    rows = PathRows(engine.kv, tokens, threading.Event())
    root_norm = log_sum_exp(rows.row(()))
    search = CoveringSearch(engine.vocab, rows, max_decodes=64)
    best = search.run(required.encode())
    assert not search.exhausted
    masked_path, masked_logp = per_step_path(engine, rows, required.encode())
    assert b"".join(engine.vocab.pieces[t] for t in best.path).startswith(required.encode())
    # The search's scores are relative to the prompt row; add its normaliser back to compare.
    assert best.log_prob - root_norm >= masked_logp - 1e-4, (best.path, masked_path)


def greedy_tokens(engine, prompt_text, n=12):
    seq = engine.sequence(SamplingConfig(single_line=False))
    assert seq.decode_prompt(engine.tokenize(prompt_text))
    return [seq.sample_next().token for _ in range(n)]


def test_cold_and_restored_runs_give_identical_tokens(engine):
    prompt = "The quick brown fox jumps over the lazy dog. The quick brown"
    engine.kv.forget()
    cold = greedy_tokens(engine, prompt)
    greedy_tokens(engine, "Something else entirely, to move the cache away.")
    greedy_tokens(engine, prompt[: len(prompt) // 2])  # a shared prefix, then a removed tail
    restored = greedy_tokens(engine, prompt)
    assert restored == cold


class _StopAfterFirstChunk(threading.Event):
    """A cancel flag that reads unset at the decode's start and set at its first check between
    chunks: the request that stops a prefetch comes while its first chunk decodes."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def is_set(self) -> bool:
        self.checks += 1
        return self.checks > 1


def test_a_prompt_decodes_in_the_same_ubatches_whether_the_prefetch_before_it_finished_or_was_stopped(engine):
    """The prefetch of a document's end (its opening), then a request at a cursor before it: the
    request's row is the same whether the prefetch had finished or a request stopped it after one
    chunk, as on llama-server, which finishes a prefill whatever its client does. Cut back where
    the request came, the prompt's last chunk was decoded in other ubatches and the row moved."""
    text = " ".join(f"Line {i}: the parcel left the depot at {i} o'clock and reached the harbour." for i in range(20))
    whole = engine.tokenize(text)
    cut = len(whole) * 3 // 4 + 60
    request = whole[:cut] + engine.tokenize(" The parcel")[1:]
    assert len(request) > 4 * UBATCH_TOKENS and cut % UBATCH_TOKENS  # the cut inside a chunk of the prefetch
    rows = []
    for stop in (False, True):
        engine.kv.forget()
        engine.kv.begin(None)  # a call of its own: no state of an earlier test's call
        if stop:
            with pytest.raises(Cancelled):
                engine.kv.prefill(whole, _StopAfterFirstChunk())
            assert 0 < engine.kv.held < len(whole)
        else:
            engine.kv.prefill(whole)
        rows.append(np.array(engine.kv.logits_after(request)))
        engine.kv.end()
    assert np.array_equal(rows[0], rows[1]), float(np.max(np.abs(rows[0] - rows[1])))


def test_an_unchanged_prompt_decodes_nothing_and_one_more_word_decodes_only_its_tokens(engine):
    prompt = "Dear team, thanks for sending over the draft"
    complete(engine, prompt, " yest")
    again = complete(engine, prompt, " yeste")
    assert again.stats.decoded_tokens == 0
    assert again.stats.reused_tokens == again.stats.prompt_tokens
    edited = prompt + " on Thursday."
    longer = complete(engine, edited, " I")
    added = engine.count_tokens(edited) - engine.count_tokens(prompt)
    assert longer.stats.decoded_tokens == added
    assert longer.stats.reused_tokens == engine.count_tokens(prompt)
    assert longer.text.startswith(" I")


def test_accepting_a_suggestion_costs_no_prompt_work(engine):
    """The tokens of a suggestion are already in KV (and their rows remembered) when the user
    accepts it, so the next request's prompt needs no decode."""
    prompt = "Please review the attached contract before"
    first = complete(engine, prompt, " tom")
    accepted = prompt + first.text.split(",")[0].split(".")[0]
    assert accepted != prompt
    after = complete(engine, accepted, " ")
    assert after.stats.decoded_tokens == 0


def test_a_cancel_from_another_thread_stops_within_one_step_and_the_sequence_stays_usable(engine):
    cancel = threading.Event()
    seq = engine.sequence(SamplingConfig(single_line=False), cancel)
    assert seq.decode_prompt(engine.tokenize("Once upon a time, in a land far away,"))
    for _ in range(3):
        assert not seq.sample_next().was_cancelled
    canceller = threading.Thread(target=seq.cancel)
    canceller.start()
    canceller.join()
    assert seq.sample_next().was_cancelled
    # A request cancelled while running answers promptly with no text.
    cancel2 = threading.Event()
    request = CompletionRequest(
        prompt="Once upon a time", required=",", max_tokens=500, sampling=SamplingConfig(single_line=False)
    )
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("r", engine.complete(request, cancel2)))
    worker.start()
    threading.Timer(0.2, cancel2.set).start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert box["r"].cancelled and box["r"].text == ""
    assert box["r"].stats.generated_tokens < 500
    # The engine is still usable and right afterwards.
    assert complete(engine, "Thanks for sending over the draft", " yest").text.startswith(" yesterday")


def test_a_prompt_longer_than_the_context_keeps_its_tail_and_still_reuses_the_cache(small_context_engine):
    engine = small_context_engine
    long_text = " ".join(f"Line {i} of a long report about the weather." for i in range(400))
    first = complete(engine, long_text, " tod", max_tokens=4)
    assert first.stats.prompt_tokens <= engine.n_ctx - 4
    assert first.text.startswith(" tod")
    second = complete(engine, long_text + " Sunny", " tod", max_tokens=4)
    assert second.stats.reused_tokens >= second.stats.prompt_tokens - 8


def test_stop_sequences_and_single_line(engine):
    multi = complete(
        engine, "1. apples\n2. pears\n3.", " ban", max_tokens=24, sampling=SamplingConfig(single_line=False)
    )
    single = complete(engine, "1. apples\n2. pears\n3.", " ban", max_tokens=24)
    assert "\n" not in single.text and single.text.startswith(" ban")
    if "\n" in multi.text:
        assert single.stop_reason == "line"
    stopped = complete(
        engine,
        "1. apples\n2. pears\n3.",
        " ban",
        max_tokens=24,
        stop=("a",),
        sampling=SamplingConfig(single_line=False),
    )
    assert stopped.text == " ban" and stopped.stop_reason == "stop"


def test_sampling_with_a_temperature_still_spells_the_prefix_and_is_reproducible(engine):
    cfg = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1, seed=42)
    runs = [complete(engine, "Thanks for sending over the draft", " yest", sampling=cfg).text for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0].startswith(" yest")


@pytest.mark.model
def test_the_cli_prints_json():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "--prompt",
            "Thanks for sending over the draft",
            "--require",
            " yest",
            "--json",
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["text"].startswith(" yesterday")
    assert data["tokens"] >= 1 and data["ms"] > 0


def test_a_huge_prompt_is_clipped_before_tokenizing_and_typing_at_its_end_reuses_the_cache(small_context_engine):
    engine = small_context_engine
    huge = "".join(f"def function_{i}(value):\n    return value * {i}\n\n" for i in range(120_000))
    assert len(huge) > 5_000_000
    clipped = engine.clip(huge)
    assert len(clipped) <= engine.n_ctx * 8 and huge.endswith(clipped)
    assert engine.clip(huge + "def next_fun") == clipped + "def next_fun"  # the cut stays put
    first = complete(engine, huge + "def", " comp", max_tokens=4)
    second = complete(engine, huge + "def", " compu", max_tokens=4)
    assert first.text.startswith(" comp") and second.text.startswith(" compu")
    assert second.stats.decoded_tokens == 0
