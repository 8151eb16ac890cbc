"""A model that adds no BOS token (as Qwen2.5-Coder): an empty text before the cursor has no
prompt token. The engine must answer "nothing" and keep its KV cache intact, not decode an empty
batch (whose rows were uninitialised memory) or cut its bookkeeping back by one token."""

from __future__ import annotations

import pytest

from engine import CompletionRequest
from tests.support.tiny_gguf import load, write_model

PROMPT = "def value(self):\n    return the"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = write_model(tmp_path_factory.mktemp("tiny-gguf") / "no-bos.gguf", False, add_bos=False)
    engine = load(path)
    assert engine.tokenize("") == ()
    yield engine
    engine.close()


def test_an_empty_prompt_gets_no_suggestion_and_the_cache_stays_as_it_was(engine):
    request = CompletionRequest(prompt=PROMPT, required=" dr", max_tokens=4)
    before = engine.complete(request)
    held = engine.kv.held

    empty = engine.complete(CompletionRequest(prompt="", required="de", max_tokens=4))
    assert (empty.text, empty.stop_reason, empty.required_satisfied) == ("", "empty", False)
    assert engine.kv.held == held and engine.prefetch(CompletionRequest(prompt="")).decoded_tokens == 0

    again = engine.complete(request)
    assert again.text == before.text and again.stats.decoded_tokens == 0
