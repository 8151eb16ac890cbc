"""The numbers a llama-server computes are the in-process engine's at the same thread count
(docs/shared-server.md, "Why 15 of 100 unseen cursors differed"): the row after a prompt, from
the server (`-t 1`, tests/fixtures.py) and from an in-process engine with 1 thread, agree within
the float32 normalisation; the thread count, not the backend, is what moves them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import Engine, EngineConfig

pytestmark = pytest.mark.model

TEXT = (
    "def parse(lines):\n    result = []\n    for line in lines:\n        if not line.strip():\n            continue\n"
    * 6
)
NOISE = 2e-3  # nats: llama-server's float32 softmax against the engine's float64


def _row(engine: Engine, prompt: tuple[int, ...]) -> np.ndarray:
    engine.kv.forget()
    row = np.asarray(engine.kv.logits_after(prompt), dtype=np.float64)
    return row - (row.max() + math.log(np.exp(row - row.max()).sum()))


def test_the_servers_row_is_the_in_process_one_at_its_thread_count(llama_server):
    engine = Engine.load(EngineConfig(model_path="gemma-3-270m", threads=llama_server.threads))
    try:
        prompt = engine.tokenize(TEXT)
        ours = _row(engine, prompt)
    finally:
        engine.close()
    llama_server.post("/completion", {"prompt": list(prompt[:-1]), "n_predict": 0, "cache_prompt": False, "id_slot": 0})
    status, body = llama_server.post("/completion", {
        "prompt": list(prompt), "n_predict": 1, "cache_prompt": True, "id_slot": 0, "n_probs": 40,
        "temperature": 0.0, "samplers": ["temperature"],
    })  # fmt: skip
    assert status == 200, body
    listed = body["completion_probabilities"][0]["top_logprobs"]
    assert max(abs(ours[e["id"]] - e["logprob"]) for e in listed) <= NOISE
