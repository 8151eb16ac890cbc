"""The seam between the engine and where its next-token distributions come from.

`Engine` (engine.engine) asks a `Backend` for everything it needs: rows of log-probabilities (or
logits) after a token path, the prompt's first step, the rows the covering search reads, a
prefill, and keep/forget; for a server also which document a call is for (routing), whether a
failed call may be made again (recovery), and what went over the wire (traffic). Two families
implement it: the in-process model (engine.local: `KvCache` over llama-cpp-python) and one or
several llama-servers (engine.remote.rows: `RemoteRows`, `ServerSet`, `BalancedSet`). The in-process
one answers the server-only questions with nothing (no route, no retry, no traffic).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from engine.core.covering import Covering, CoveringSearch


_SALT = os.urandom(16)  # per process: the key says nothing about the document to anyone else


def affinity_key(material: str) -> str:
    """An opaque key for a document (its URI, or the start of its prompt when it has none): a
    keyed hash with a per-process salt, so the same document always gets the same key here and
    the key tells the servers (and anyone between) nothing about it."""
    return hashlib.blake2b(material.encode("utf-8", "replace"), key=_SALT, digest_size=12).hexdigest()


class Cancelled(Exception):
    """The request was cancelled between decode chunks, steps or reads of an answer."""


@dataclass
class Traffic:
    """Requests, connections and bytes since a client was made (per-request figures are
    differences); all zero for the in-process backend."""

    round_trips: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    connections: int = 0  # TCP connections opened (keep-alive reuses them)


class PromptSpeed:
    """How fast a backend evaluates a prompt: the fastest batch of TIMED_TOKENS or more it has
    timed, in ms a token (None before one). What a cold request's extra tokens cost on this
    machine and model when it is quiet (engine.prompt_window.cold_extra); the fastest, so the
    bound it sets only grows and a context laid out under it is never laid out again for it."""

    TIMED_TOKENS = 32  # a smaller batch times the call more than its tokens

    def __init__(self) -> None:
        self.ms_per_token: float | None = None

    def note(self, tokens: int, ms: float) -> None:
        if tokens >= self.TIMED_TOKENS and ms > 0:
            rate = ms / tokens
            if self.ms_per_token is None or rate < self.ms_per_token:
                self.ms_per_token = rate


class CoveringRows(Protocol):
    """The covering search's rows for one prompt and required prefix (engine.core.covering): read
    by path; `refine` and `settle` are how a server backend proves its choice (in-process every
    row is exact, so they do nothing)."""

    decodes: int  # rows that cost a model step (or a request), against the search's budget
    normalised: bool  # rows are log-probabilities (a server's), not logits
    fallback: str | None  # why the proof could not be finished, if it could not

    def row(self, path: tuple[int, ...]) -> np.ndarray: ...

    def cached(self, path: tuple[int, ...]) -> bool: ...

    def refine(self, covering: Covering) -> bool: ...

    def settle(self, covering: Covering | None) -> Covering | None: ...

    def known_search(self, search: CoveringSearch, required: bytes) -> CoveringSearch: ...


class Backend(Protocol):
    """What the engine asks of a backend (see the module docstring). One engine call is
    `begin` ... `end`; the rows it reads in between are remembered by token path."""

    # Every row not yet known costs a round trip, and the server reports the prompt work it did
    # (True for a server): alternatives then read known rows only, and a call's prompt work is
    # the server's count.
    networked: bool
    speed: PromptSpeed  # the prompt evaluation it has timed (in-process) or been told of (a server's timings)

    @property
    def decoded(self) -> int:
        """Prompt tokens decoded so far (a call's work is a difference)."""
        ...

    @property
    def held(self) -> int:
        """Tokens the live sequence (or slot) holds."""
        ...

    @property
    def kept_prompts(self) -> int:
        """How many prompts stay decoded at once (sequences in-process, our slots on a server)."""
        ...

    def cached_prefix(self, tokens: tuple[int, ...]) -> int:
        """How many of `tokens`' first tokens a kept prompt already holds (no decode needed)."""
        ...

    @property
    def fallbacks(self) -> Sequence[str]:
        """One entry per covering that could not be proven, in order ("unproven", "mask", ...)."""
        ...

    @property
    def answered(self) -> str | None:
        """Which server answered last (None in-process)."""
        ...

    def begin(self, cancel: threading.Event | None, max_tokens: int = 16, single_line: bool = True) -> None: ...

    def end(self) -> None: ...

    def prepare(
        self, tokens: tuple[int, ...], required: bytes, cancel: threading.Event | None = None, exact: bool = True
    ) -> None: ...

    def covering_rows(
        self, prompt: tuple[int, ...], required: bytes, cancel: threading.Event | None, budget: int
    ) -> CoveringRows: ...

    def logits_after(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> np.ndarray: ...

    def remembers(self, tokens: tuple[int, ...]) -> bool: ...

    def rows_along(
        self, tokens: tuple[int, ...], draft: tuple[int, ...], cancel: threading.Event | None = None
    ) -> None: ...

    def prefill(self, tokens: tuple[int, ...], cancel: threading.Event | None = None, beside: bool = False) -> None:
        """Decode `tokens` and nothing else; `beside`: never cut back the prompt held live (a first
        answer's, which the keystrokes reuse until this one is decoded: engine.Engine.first_prompt)."""
        ...

    def forget(self) -> None: ...

    def route(self, key: str) -> None:
        """The document the next calls are for (an opaque key: `affinity_key`)."""
        ...

    def recover(self, error: BaseException) -> bool:
        """After a failed call: may it be made again at once?"""
        ...

    def traffic(self) -> Traffic: ...


class Window(Protocol):
    """What sets the engine's context window and is closed with it (the llama context, or the
    server backend itself)."""

    n_ctx: int

    def close(self) -> None: ...
