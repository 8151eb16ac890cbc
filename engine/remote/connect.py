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

import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.backend import affinity_key
from engine.core.vocab import VocabIndex
from engine.local.llama import RUNTIME, LlamaModel
from engine.model_files import model_id, resolve_model
from engine.remote.http import ModelServerClient
from engine.remote.rows import N_PROBS, PROBE_TEXT, RemoteRows
from engine.remote.servers import BalancedSet, ServerSet
from engine.types import EngineConfig, ModelServerError, server_urls
from engine.vocab_cache import load_vocab

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerCheck:
    """What a server must show before its numbers are used: the local vocabulary's size and its
    tokens of the probe text (computed once, so a check needs no model: it runs again on a server
    that comes back, or that a balancer moved a document to), and slots big enough for `n_ctx`."""

    n_vocab: int
    probe: dict[bool, tuple[int, ...]]  # add_special -> the local vocabulary's tokens of PROBE_TEXT
    min_ctx: int  # the smallest slot a prompt and a completion fit in
    # The model's shape as /v1/models reports it (parameters, size, width, vocabulary): every
    # server behind one `modelServer` must run the same model, not only the same tokenizer
    # (None: whatever the first server runs, see `identity_of`).
    identity: tuple | None = None

    @classmethod
    def of(cls, model: LlamaModel, min_ctx: int) -> ServerCheck:
        return cls(
            model.n_vocab, {b: tuple(model.tokenize(PROBE_TEXT.encode(), add_bos=b)) for b in (False, True)}, min_ctx
        )

    def props(self, client: ModelServerClient, budget: float) -> tuple[int, int, dict]:
        """(tokens per slot, slots, /props) of a healthy server; raises ModelServerError."""
        health = client.get_json("/health", time.monotonic() + budget)
        if not isinstance(health, dict) or health.get("status") != "ok":
            raise client.protocol("/health did not say ok")
        props = client.get_json("/props", time.monotonic() + budget)  # not public: a wrong key fails here
        try:
            settings = props["default_generation_settings"]
            slot_ctx = int(settings["n_ctx"])
            total_slots = int(props.get("total_slots", 1))
        except (KeyError, TypeError, ValueError):
            raise client.protocol("/props lacks default_generation_settings.n_ctx") from None
        if slot_ctx < self.min_ctx:
            raise client.error(
                "model",
                f"the server's slots hold {slot_ctx} tokens each, too few for a prompt and a completion",
                f"Start llama-server with --ctx-size of at least {self.min_ctx} times --parallel",
            )
        return slot_ctx, total_slots, props

    def vocabulary(self, client: ModelServerClient, budget: float) -> tuple | None:
        """The server's model tokenizes as the local vocabulary does, and is the model `identity`
        names; ModelServerError("model") if not. Returns the server's identity."""
        remedy = "Set `model` to a local copy of the GGUF the server runs (its vocabulary is read, not its weights), or point `modelServer` at a server running this model"
        models = client.get_json("/v1/models", time.monotonic() + budget)
        theirs_id = identity_of(models)
        if self.identity is not None and theirs_id is not None and theirs_id != self.identity:
            raise ModelServerError(
                "model",
                client.url,
                "the server runs another model than the other servers of `modelServer` "
                f"(parameters, size, width, vocabulary: {theirs_id} against {self.identity})",
                "Run the same GGUF on every llama-server behind `modelServer` (or behind its load balancer)",
            )
        try:
            n_vocab = int(models["data"][0]["meta"]["n_vocab"])
        except (KeyError, TypeError, ValueError, IndexError):
            n_vocab = None  # older servers: the tokenization probe below still decides
        if n_vocab is not None and n_vocab != self.n_vocab:
            raise ModelServerError(
                "model",
                client.url,
                f"the server's model has {n_vocab} tokens, the local vocabulary {self.n_vocab}",
                remedy,
            )
        for add_special in (False, True):
            answer = client.post_json(
                "/tokenize", {"content": PROBE_TEXT, "add_special": add_special}, time.monotonic() + budget
            )
            try:
                theirs = tuple(int(t) for t in answer["tokens"])
            except (KeyError, TypeError, ValueError):
                raise client.protocol("/tokenize did not return token ids") from None
            if theirs != self.probe[add_special]:
                raise ModelServerError(
                    "model",
                    client.url,
                    "the server's model tokenizes text differently from the local vocabulary",
                    remedy,
                )
        return theirs_id

    def __call__(
        self, client: ModelServerClient, rows: RemoteRows | None = None, budget: float = 1.0
    ) -> tuple[int, int, dict]:
        """The whole check of one server (its slots, then its vocabulary); with `rows`, their
        slot count is updated to this server's."""
        slot_ctx, total_slots, props = self.props(client, budget)
        self.vocabulary(client, budget)
        if rows is not None:
            if slot_ctx < rows.n_ctx:
                raise client.error(
                    "model",
                    f"the server's slots hold {slot_ctx} tokens each, fewer than the {rows.n_ctx} the other servers hold",
                    "Start every llama-server behind `modelServer` with the same --ctx-size and --parallel",
                )
            rows.total_slots = total_slots
        return slot_ctx, total_slots, props


def identity_of(models: Any) -> tuple | None:
    """(n_params, size, n_embd, n_vocab) from a /v1/models answer; None when it has no meta."""
    try:
        meta = models["data"][0]["meta"]
        return tuple(int(meta[k]) for k in ("n_params", "size", "n_embd", "n_vocab"))
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def client_for(config: EngineConfig, url: str) -> ModelServerClient:
    return ModelServerClient(
        url, config.model_server_api_key, config.model_server_timeout_s, config.model_server_ca_file
    )


def connect(config: EngineConfig, min_prompt_tokens: int):
    """(vocabulary-only model, remote rows, vocabulary index, the server's model id) for
    `config.model_server`: one URL gives a `RemoteRows`, several a `ServerSet` (engine.remote.servers)."""
    urls = server_urls(config.model_server)
    if not urls:
        raise ModelServerError(
            "url",
            config.model_server,
            "no model server URL given",
            "Set `modelServer` to a URL like http://127.0.0.1:8080",
        )
    if len(urls) > 1:
        return connect_all(config, urls, min_prompt_tokens)
    client = client_for(config, urls[0])
    # First contact names a document too: a balancer sends requests without a key round robin
    # (nginx's hash does), so its checks would land on both servers in turn.
    client.affinity = affinity_key("")
    try:
        model, remote, vocab, model_id = _connect(client, config, min_prompt_tokens)
    except BaseException:
        client.close()
        raise
    if client.upstream is None:
        return model, remote, vocab, model_id

    # A load balancer that names the server behind it (X-Cpc-Upstream): one RemoteRows per server.
    def make_rows() -> RemoteRows:
        rows = RemoteRows(
            client_for(config, urls[0]), vocab, remote.n_ctx, remote.total_slots, config.model_server_slot
        )
        rows.check = remote.check
        return rows

    return model, BalancedSet(remote, make_rows, remote.check), vocab, model_id


def load_vocabulary(config: EngineConfig) -> tuple[LlamaModel, VocabIndex]:
    """The local GGUF's vocabulary (no weights)."""
    path = resolve_model(config.model_path)
    model = LlamaModel(path, vocab_only=True)
    try:
        return model, load_vocab(model, model_id(path), RUNTIME)
    except BaseException:
        model.close()
        raise


def _connect(
    client: ModelServerClient, config: EngineConfig, min_prompt_tokens: int
) -> tuple[LlamaModel, RemoteRows, VocabIndex, str]:
    # Each request has its own budget (at least 1 s): reading the local vocabulary between them
    # can take longer than a small budget on a loaded machine, and is not the server's time.
    budget = max(config.model_server_timeout_s, 1.0)
    check = ServerCheck(0, {}, 2 * min_prompt_tokens)
    slot_ctx, total_slots, props = check.props(client, budget)
    model, vocab = load_vocabulary(config)
    try:
        check = ServerCheck.of(model, 2 * min_prompt_tokens)
        check = replace(check, identity=check.vocabulary(client, budget))
    except BaseException:
        model.close()
        raise
    n_ctx = min(config.context_tokens, slot_ctx)
    if n_ctx < 2 * min_prompt_tokens:
        model.close()
        raise client.error(
            "model",
            f"the server's slots hold {slot_ctx} tokens each, too few for a prompt and a completion",
            f"Start llama-server with --ctx-size of at least {2 * min_prompt_tokens} times --parallel",
        )
    remote = RemoteRows(client, vocab, n_ctx, total_slots, config.model_server_slot, n_probs=_n_probs())
    remote.check = lambda c, rows: check(c, rows, budget)
    return model, remote, vocab, server_model_id(props)


def _n_probs() -> int:
    """Tokens listed per generated token: engine.remote.rows's N_PROBS, or the CPC_LSP_N_PROBS
    variable (for bench.tail, which compares several side by side; not a setting: every value is
    exact, only the round trips and bytes change)."""
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


def connect_all(config, urls: tuple[str, ...], min_prompt_tokens: int):
    """(vocabulary-only model, ServerSet, vocabulary index, the servers' model id): every server
    that answers must pass the checks of first contact, and run the same model; servers that are
    down start as down (probed); all down raises the first one's error."""
    clients = [client_for(config, url) for url in urls]
    budget = max(config.model_server_timeout_s, 1.0)
    first = ServerCheck(0, {}, 2 * min_prompt_tokens)
    try:
        found: list[tuple | None] = []
        errors: list[ModelServerError] = []
        for client in clients:
            try:
                found.append(first.props(client, budget))
            except ModelServerError as error:
                logger.debug("probing a model server that was down: %s", error.problem)
                if error.kind not in ("unreachable", "timeout"):
                    raise
                found.append(None)
                errors.append(error)
        if all(f is None for f in found):
            raise errors[0]
        model, vocab = load_vocabulary(config)
        try:
            check = ServerCheck.of(model, 2 * min_prompt_tokens)
            for client, f in zip(clients, found):
                if f is not None:
                    identity = check.vocabulary(client, budget)
                    if check.identity is None and identity is not None:
                        check = replace(check, identity=identity)
        except BaseException:
            model.close()
            raise
    except BaseException:
        for client in clients:
            client.close()
        raise
    n_ctx = min([config.context_tokens] + [f[0] for f in found if f is not None])
    rows = [
        RemoteRows(c, vocab, n_ctx, f[1] if f is not None else 1, config.model_server_slot)
        for c, f in zip(clients, found)
    ]
    for r in rows:
        r.check = lambda c, target: _check_slots(check(c, target, budget), target)
    servers = ServerSet(
        rows,
        lambda c: _check_slots(check(c, None, budget), n_ctx=n_ctx),
        lambda url: client_for(config, url),
        down=tuple(i for i, f in enumerate(found) if f is None),
    )
    props = next(f[2] for f in found if f is not None)
    return model, servers, vocab, server_model_id(props)


def _check_slots(result: tuple, rows: RemoteRows | None = None, n_ctx: int | None = None) -> tuple:
    """A server that comes back must hold the prompts the others hold."""
    slot_ctx = result[0]
    need = rows.n_ctx if rows is not None else n_ctx
    if need is not None and slot_ctx < need:
        raise ModelServerError(
            "model",
            None,
            f"the server's slots hold {slot_ctx} tokens each, fewer than the {need} the other servers hold",
            "Start every llama-server behind `modelServer` with the same --ctx-size and --parallel",
        )
    return result
