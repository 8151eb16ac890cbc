"""The text after the cursor through the server (its real stdio loop, in this process, with the real
engine) on the tiny generated GGUF models: a FIM model gets it in its prompt, bounded by the
settings; a model without FIM tokens does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.routing import load_engine
from lsp_server.settings import Settings
from lsp_server.split import text_after
from tests.fixtures import InProcessServer
from tests.support.lsp_client import Editor, insert_text
from tests.support.tiny_gguf import load

BEFORE = "def value(self):\n    return the"
TYPED = " yest"
AFTER = "\n    print(x)\nif x\nreturn the\n"


def tokens(path: Path, text: str, after_cursor: bool = False) -> int:
    engine = load(path)
    try:
        return len(engine.suffix_tokens(text) if after_cursor else engine._model.tokenize(text.encode(), add_bos=False))
    finally:
        engine.close()


def ask(path: Path, settings: dict, text: str = BEFORE + TYPED + AFTER, cursor: int = len(BEFORE + TYPED)):
    """(suggestion, stats) at `cursor` in `text`, on a server with the model at `path`."""
    server = InProcessServer(Settings(model=str(path), context_tokens=512, threads=1), load=load_engine)
    try:
        client = server.client
        # the tiny model's guesses are noise the confidence gate would hide: these tests are about the plumbing
        client.initialize({"cpcLsp": {"maxTokens": 4, "minConfidence": 0, **settings}}, wait_loaded=True)
        editor = Editor(client)
        uri = "file:///tmp/fim-test.py"
        editor.open(uri, text, "python")
        line = text.count("\n", 0, cursor)
        column = cursor - (text.rfind("\n", 0, cursor) + 1)
        params = {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": column},
            "context": {"triggerKind": 2},
        }
        reply = client.request("textDocument/inlineCompletion", params)
        return insert_text(reply), editor.stats() or {}
    finally:
        server.close()


@pytest.mark.parametrize(("lines", "after"), [(1, ""), (2, "\n    print(x)"), (3, "\n    print(x)\nif x"), (8, AFTER)])
def test_a_fim_model_gets_the_text_after_the_cursor_bounded_in_lines(tiny_models, lines, after):
    assert text_after(BEFORE + TYPED + AFTER, len(BEFORE + TYPED), lines) == after
    shown, stats = ask(tiny_models["fim"], {"fimSuffixLines": lines})
    expected = 1 + 1 + tokens(tiny_models["fim"], BEFORE) + 1 + tokens(tiny_models["fim"], after, after_cursor=True) + 1
    assert stats["promptTokens"] == expected
    assert shown is not None and shown.startswith("yest")  # the gate is off: the suggestion is shown
    assert stats["requiredSatisfied"]


def test_the_suffix_token_bound_and_zero_lines(tiny_models):
    _, bounded = ask(tiny_models["fim"], {"fimSuffixLines": 8, "fimSuffixTokens": 2})
    assert bounded["promptTokens"] == 1 + 1 + tokens(tiny_models["fim"], BEFORE) + 1 + 2 + 1
    _, none = ask(tiny_models["fim"], {"fimSuffixLines": 0})
    assert none["promptTokens"] == 1 + tokens(tiny_models["fim"], BEFORE)  # the plain prompt


def test_a_model_without_fim_tokens_never_sees_the_text_after_the_cursor(tiny_models):
    _, stats = ask(tiny_models["plain"], {"fimSuffixLines": 8})
    assert stats["promptTokens"] == 1 + tokens(tiny_models["plain"], BEFORE)


def test_document_words_reach_the_engine_when_the_lexicon_is_on(tiny_models):
    """A word from the open document (after the cursor too) wins with a large prior; off, nothing is sent."""
    text = "the yest\nwe met yesterdays"
    shown, stats = ask(tiny_models["plain"], {"lexicon": True, "lexiconPrior": 20.0}, text, 8)
    assert shown is not None and shown.startswith("yesterdays")
    assert stats["lexiconChanged"] and 0 < stats["lexiconDecodes"] <= 8
    shown, stats = ask(tiny_models["plain"], {"lexicon": False}, text, 8)
    assert stats["lexiconDecodes"] == 0 and not stats["lexiconChanged"]


def test_a_prefetch_decodes_the_fim_prompt_the_next_request_uses(tiny_models):
    """After an open, the idle engine decodes the FIM layout, so the request there decodes nothing."""
    import time

    server = InProcessServer(Settings(model=str(tiny_models["fim"]), context_tokens=512, threads=1), load=load_engine)
    try:
        client = server.client
        client.initialize({"cpcLsp": {"maxTokens": 4, "minConfidence": 0}}, wait_loaded=True)
        editor = Editor(client)
        uri = "file:///tmp/fim-prefetch.py"
        editor.open(uri, BEFORE + TYPED)
        deadline = time.monotonic() + 30
        while server.server.scheduler.last_prefetch is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.server.scheduler.last_prefetch is not None
        shown = insert_text(editor.inline(uri))
        stats = editor.stats() or {}
        assert stats["decodedTokens"] == 0 and stats["promptTokens"] == 1 + 1 + tokens(tiny_models["fim"], BEFORE) + 2
        assert shown is not None and shown.startswith("yest")
    finally:
        server.close()
