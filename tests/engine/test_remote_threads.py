"""The numbers a llama-server computes are the in-process engine's whatever either side's thread
count (docs/shared-server.md, "Exactness over the network").

With llama.cpp's flash attention on (its "auto" default on the CPU) a row depended on the thread
count once the prompt passed 256 tokens: on this prompt (399 tokens) the server at `-t 1` and the
engine at 2 threads parted by 0.61 nats on the top 40. Both sides now run with flash attention off
(engine.local.llama.FLASH_ATTN, `--flash-attn off` in tests.support.llama_server), so the row after
the prompt agrees at any thread count within llama-server's float32 normalisation (measured
1.4e-4 to 3e-4 nats on 175 to 855-token prompts; the bound here is 2e-3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import Engine, EngineConfig

pytestmark = pytest.mark.model

_NAMES = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
TEXT = "".join(  # 399 tokens: past 256, where flash attention's CPU kernel split by thread count
    f"def step_{i}(state, {_NAMES[i % 11]}):\n    state.{_NAMES[i * 3 % 11]} += {_NAMES[i % 11]} * {i}\n"
    "    return state\n\n"
    for i in range(16)
)
NOISE = 2e-3  # nats: llama-server's float32 softmax against the engine's float64
TOP = 40  # the server lists the top 40 (the remote backend's n_probs)


def _row(engine: Engine, prompt: tuple[int, ...]) -> np.ndarray:
    engine.kv.forget()
    row = np.asarray(engine.kv.logits_after(prompt), dtype=np.float64)
    return row - (row.max() + math.log(np.exp(row - row.max()).sum()))


def test_the_servers_row_is_the_in_process_one_at_another_thread_count(llama_server):
    threads = 2 if llama_server.threads == 1 else 1  # not the server's `-t`
    engine = Engine.load(EngineConfig(model_path="gemma-3-270m", threads=threads))
    try:
        prompt = engine.tokenize(TEXT)
        ours = _row(engine, prompt)
    finally:
        engine.close()
    assert len(prompt) > 256
    # The prompt but its last token, then the last token alone: the engine's own decode (engine.local.llama).
    llama_server.post("/completion", {"prompt": list(prompt[:-1]), "n_predict": 0, "cache_prompt": False, "id_slot": 0})
    status, body = llama_server.post("/completion", {
        "prompt": list(prompt), "n_predict": 1, "cache_prompt": True, "id_slot": 0, "n_probs": TOP,
        "temperature": 0.0, "samplers": ["temperature"],
    })  # fmt: skip
    assert status == 200, body
    listed = body["completion_probabilities"][0]["top_logprobs"]
    assert len(listed) == TOP
    moved = max(abs(ours[e["id"]] - e["logprob"]) for e in listed)
    assert moved <= NOISE, f"server -t {llama_server.threads} vs in-process {threads} threads: {moved:.4f} nats"
