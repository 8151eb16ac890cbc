"""First contact with a llama-server: is it there, may we use it, does it run our vocabulary?

The covering search needs every token's exact bytes, and the engine tokenizes prompts itself (a
round trip per changed prompt would cost as much as the completion). Both come from the local
GGUF (`model`, or the default model), read vocabulary-only: no weights are loaded. The server's
model must tokenize exactly as that vocabulary does; a probe text with words, code, accents, CJK
and an emoji is tokenized by both, and any difference refuses the server ("model"), as does a
different vocabulary size. A bigger model with the same tokenizer (the Gemma 3 family shares
one) is what this is for.

What the server could give instead (checked in its source): `/detokenize` returns text, in which
a token that is not valid UTF-8 by itself (byte-fallback and byte-level tokens) comes back
replaced, so not that; but `/tokenize` takes an array of token ids as `content`, and with
`with_pieces` returns each one's exact bytes (a byte list where a piece is not valid UTF-8). What
it does not give is which tokens are control tokens (pieces come with their names, as
"<start_of_turn>"), and every changed prompt would need a `/tokenize` round trip of its own, so a
local vocabulary stays the way here.
"""

from __future__ import annotations

import time
from pathlib import Path

from engine.http_client import ModelServerClient
from engine.llama_backend import LlamaModel
from engine.model_files import model_id, resolve_model
from engine.remote import PROBE_TEXT, RemoteRows
from engine.types import EngineConfig, ModelServerError
from engine.vocab import VocabIndex


def connect(config: EngineConfig, min_prompt_tokens: int) -> tuple[LlamaModel, RemoteRows, VocabIndex, str]:
    """(vocabulary-only model, remote rows, vocabulary index, the server's model id) for
    `config.model_server`."""
    client = ModelServerClient(config.model_server or "", config.model_server_api_key, config.model_server_timeout_s, config.model_server_ca_file)
    try:
        return _connect(client, config, min_prompt_tokens)
    except BaseException:
        client.close()
        raise


def _connect(
    client: ModelServerClient, config: EngineConfig, min_prompt_tokens: int
) -> tuple[LlamaModel, RemoteRows, VocabIndex, str]:
    # Each request has its own budget (at least 1 s): reading the local vocabulary between them
    # can take longer than a small budget on a loaded machine, and is not the server's time.
    budget = max(config.model_server_timeout_s, 1.0)

    def deadline() -> float:
        return time.monotonic() + budget

    health = client.get_json("/health", deadline())
    if not isinstance(health, dict) or health.get("status") != "ok":
        raise client.protocol("/health did not say ok")
    props = client.get_json("/props", deadline())  # not public: a wrong key fails here
    try:
        settings = props["default_generation_settings"]
        slot_ctx = int(settings["n_ctx"])
        total_slots = int(props.get("total_slots", 1))
    except (KeyError, TypeError, ValueError):
        raise client.protocol("/props lacks default_generation_settings.n_ctx") from None
    path = resolve_model(config.model_path)
    model = LlamaModel(path, vocab_only=True)
    try:
        pieces = model.pieces()
        vocab = VocabIndex(pieces, *model.special_flags(pieces))
        _check_vocabulary(client, model, deadline)
    except BaseException:
        model.close()
        raise
    n_ctx = min(config.context_tokens, slot_ctx)
    if n_ctx < 2 * min_prompt_tokens:
        model.close()
        raise client.error(
            "model", f"the server's slots hold {slot_ctx} tokens each, too few for a prompt and a completion",
            f"Start llama-server with --ctx-size of at least {2 * min_prompt_tokens} times --parallel",
        )
    remote = RemoteRows(client, vocab, n_ctx, total_slots, config.model_server_slot, n_probs=_n_probs())
    return model, remote, vocab, server_model_id(props)


def _n_probs() -> int:
    """Tokens listed per generated token: engine.remote's N_PROBS, or the CPC_LSP_N_PROBS
    variable (for bench.tail, which compares several side by side; not a setting: every value is
    exact, only the round trips and bytes change)."""
    import os

    from engine.remote import N_PROBS

    try:
        return max(1, int(os.environ.get("CPC_LSP_N_PROBS") or N_PROBS))
    except ValueError:
        return N_PROBS


def server_model_id(props: object) -> str:
    """The identity of the model the server runs (its distributions are what a calibration is
    for, not the local vocabulary's file): when its `model_path` is a file on this machine, that
    file's (engine.model_files.model_id, hashed once); else "server:<file name>", which names
    no calibration."""
    where = props.get("model_path") if isinstance(props, dict) else None
    if not isinstance(where, str) or not where:
        return "server:unknown"
    path = Path(where)
    try:
        if path.is_file():
            return model_id(path)
    except OSError:
        pass
    return f"server:{path.name}"


def _check_vocabulary(client: ModelServerClient, model: LlamaModel, deadline) -> None:
    remedy = "Set `model` to a local copy of the GGUF the server runs (its vocabulary is read, not its weights), or point `modelServer` at a server running this model"
    models = client.get_json("/v1/models", deadline())
    try:
        n_vocab = int(models["data"][0]["meta"]["n_vocab"])
    except (KeyError, TypeError, ValueError, IndexError):
        n_vocab = None  # older servers: the tokenization probe below still decides
    if n_vocab is not None and n_vocab != model.n_vocab:
        raise ModelServerError("model", client.url, f"the server's model has {n_vocab} tokens, the local vocabulary {model.n_vocab}", remedy)
    for add_special in (False, True):
        answer = client.post_json("/tokenize", {"content": PROBE_TEXT, "add_special": add_special}, deadline())
        try:
            theirs = [int(t) for t in answer["tokens"]]
        except (KeyError, TypeError, ValueError):
            raise client.protocol("/tokenize did not return token ids") from None
        ours = list(model.tokenize(PROBE_TEXT.encode(), add_bos=add_special))
        if theirs != ours:
            raise ModelServerError("model", client.url, "the server's model tokenizes text differently from the local vocabulary", remedy)
