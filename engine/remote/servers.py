"""Several llama-servers behind one `modelServer` (a list of URLs): each document on one server,
failover to the next one when it is down, and back when it returns.

Why here and not only in a balancer: each server has its own slots and computes its own numbers.
So each server gets its own `RemoteRows` (slots, distributions by token path, open stream), and a
call goes to exactly one of them: a slot id is only ever sent to the server that named it, and a
covering is proven on the numbers of the server that answered, never on a mix. (Behind a balancer
that is one URL, the same holds through `RemoteRows.recover`: engine.remote.http UpstreamChanged.)

Which server: rendezvous (highest random weight) hashing of the document's key over the URLs.
Every document has its own order of the servers and goes to the first one that is up; adding or
removing a server moves only the documents it gains or had. The key is `affinity_key`: a salted
hash, so it names the document to no one.

Down and back: a call that finds its server unreachable (connection refused or reset, still
loading) marks it down and is made again at once, within what is left of the same budget, on the
next server in the document's order (a cold prompt there, as for a new document). A down server
is probed in the background (its health, then the same checks as at first contact: slots, the
vocabulary probe, the same model as the others). When it passes, its documents go back to it at
their next call, and what was known of it is forgotten (it restarted: its slots are empty, and
its numbers are the restarted server's). A server that comes back with another model stays out,
and `refused` says why.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import fields

import numpy as np

from engine.backend import CoveringRows, PromptSpeed, Traffic, affinity_key  # noqa: F401  (affinity_key: re-exported)
from engine.remote.http import ModelServerClient, UpstreamChanged
from engine.remote.rows import RemoteRows
from engine.types import ModelServerError, server_urls  # noqa: F401  (server_urls: re-exported)

logger = logging.getLogger(__name__)

PROBE_FIRST_S, PROBE_MAX_S = (
    0.5,
    2.0,
)  # a down server is asked again after this, doubling (a refused connection costs nothing)


def rendezvous(key: str, urls: tuple[str, ...]) -> list[int]:
    """The servers in the order `key` prefers them (highest hash first)."""
    weight = [hashlib.blake2b(f"{url}\n{key}".encode(), digest_size=8).digest() for url in urls]
    return sorted(range(len(urls)), key=lambda i: weight[i], reverse=True)


class _Prober:
    """Asks a down server again in the background until it passes `check` (then `back` is set)."""

    def __init__(
        self, make_client: Callable[[], ModelServerClient], check: Callable[[ModelServerClient], tuple]
    ) -> None:
        self.back = threading.Event()
        self.result: tuple | None = None  # what `check` returned when it passed
        self.refused: str | None = None  # why it answers but may not be used (another model)
        self._stop = threading.Event()
        self._make_client, self._check = make_client, check
        threading.Thread(target=self._run, daemon=True, name="cpc-probe").start()

    def _run(self) -> None:
        wait = PROBE_FIRST_S
        while not self._stop.wait(wait):
            client = self._make_client()
            try:
                self.result = self._check(client)
            except ModelServerError as error:
                logger.debug("probing a model server that was down: %s", error.problem)
                if error.kind not in ("unreachable", "timeout"):
                    if self.refused != str(error):
                        logger.warning("model server back but refused: %s", error)
                    self.refused = str(error)
                wait = min(PROBE_MAX_S, wait * 2)
                continue
            except Exception as error:  # a bug must not end the process; keep trying, slowly
                logger.error("probing a model server failed: %r", error)
                wait = PROBE_MAX_S
                continue
            finally:
                client.close()
            self.refused = None
            self.back.set()
            return

    def stop(self) -> None:
        self._stop.set()


class ServerSet:
    """The engine's distributions from several servers (see the module docstring): an
    engine.backend `Backend` whose rows are the current document's server's."""

    networked = True

    def __init__(
        self,
        servers: list[RemoteRows],
        check: Callable[[ModelServerClient], tuple],
        make_client: Callable[[str], ModelServerClient],
        down: tuple[int, ...] = (),
    ) -> None:
        self.servers = servers
        self.urls = tuple(rows.client.url for rows in servers)
        self._check, self._make_client = check, make_client
        self.fallbacks: list[str] = []
        for rows in servers:
            rows.fallbacks = self.fallbacks  # one list: the engine counts it across a failover
        self.n_ctx = min(rows.n_ctx for rows in servers)
        self.sequences = 1
        self._down: dict[int, _Prober] = {}
        self._current = 0
        self._key: str | None = None
        self._deadline: float | None = None
        self._retrying = False
        self.failovers = 0  # calls made again on another server
        self.returns = 0  # servers taken back after they were down
        self.calls = [0] * len(servers)  # calls routed to each server
        for i in down:
            self._mark_down(i)

    # --- which server ----------------------------------------------------------------------

    @property
    def current(self) -> int:
        return self._current

    def server_for(self, key: str | None) -> int:
        """The server a document goes to now: the first up in its order (all down: its first)."""
        self._revive()
        order = rendezvous(key or "", self.urls)
        return next((i for i in order if i not in self._down), order[0])

    def route(self, key: str | None) -> None:
        self._key = key
        self._current = self.server_for(key)
        self.calls[self._current] += 1
        self.servers[self._current].route(key)

    def down(self) -> tuple[int, ...]:
        self._revive()
        return tuple(sorted(self._down))

    def refused(self) -> dict[str, str]:
        """URL -> why a server that answers again is not used (another model)."""
        return {self.urls[i]: p.refused for i, p in self._down.items() if p.refused}

    def recover(self, error: BaseException) -> bool:
        """After a failed call: True when it is to be made again at once. A balancer behind one
        URL moved the document: that server's own recover. A server that is down: mark it so and
        go on with the next one up in the document's order (False when there is none)."""
        if isinstance(error, UpstreamChanged):
            return self.servers[self._current].recover(error)
        if not isinstance(error, ModelServerError) or error.kind not in ("unreachable", "protocol"):
            return False
        if error.kind == "protocol" and not self._gone(self._current):
            return False  # it answers, wrongly: not a failover's business (the error is shown)
        self._mark_down(self._current)
        nxt = self.server_for(self._key)
        if nxt in self._down:
            return False
        logger.info(
            "model server %s is down (%s); its documents go to %s",
            self.urls[self._current],
            error.problem,
            self.urls[nxt],
        )
        self.failovers += 1
        self._current, self._retrying = nxt, True
        self.calls[nxt] += 1
        self.servers[nxt].route(self._key)
        return True

    def _gone(self, i: int) -> bool:
        """After an answer that was cut short: is the server down (a killed server's stream ends
        so), rather than answering wrongly? One quick /health on a fresh connection says."""
        client = self._make_client(self.urls[i])
        try:
            client.get_json("/health", time.monotonic() + min(0.5, client.timeout_s))
        except ModelServerError as error:
            return error.kind == "unreachable"
        finally:
            client.close()
        return False

    def _mark_down(self, i: int) -> None:
        if i in self._down:
            return
        url = self.urls[i]
        self._down[i] = _Prober(lambda: self._make_client(url), self._check)

    def _revive(self) -> None:
        """Take back the servers whose probe passed: with nothing remembered of them."""
        for i, prober in list(self._down.items()):
            if not prober.back.is_set():
                continue
            del self._down[i]
            rows = self.servers[i]
            rows.forget()
            rows.client.close()  # connections kept from before it went down are dead
            rows.client.succeeded()  # its back-off is over: it answered the probe
            if prober.result is not None:
                slot_ctx, total_slots = prober.result[:2]
                rows.total_slots = total_slots
            self.returns += 1
            logger.info("model server %s is back", self.urls[i])

    # --- the backend: the current server's rows -------------------------------------------

    def begin(self, cancel: threading.Event | None, max_tokens: int = 16, single_line: bool = True) -> None:
        rows = self.servers[self._current]
        # a retry has what was left of the call's budget
        rows.begin(cancel, max_tokens, single_line, self._deadline if self._retrying else None)
        self._retrying = False
        self._deadline = rows.call.deadline

    def end(self) -> None:
        self.servers[self._current].end()

    @property
    def answered(self) -> str:
        return self.servers[self._current].answered

    @property
    def held(self) -> int:
        return self.servers[self._current].held

    @property
    def kept_prompts(self) -> int:
        return self.servers[self._current].kept_prompts

    def cached_prefix(self, tokens: tuple[int, ...]) -> int:
        return self.servers[self._current].cached_prefix(tokens)

    @property
    def decoded(self) -> int:
        return sum(rows.decoded for rows in self.servers)

    @property
    def speed(self) -> PromptSpeed:
        return self.servers[self._current].speed

    def prepare(
        self, tokens: tuple[int, ...], required: bytes, cancel: threading.Event | None = None, exact: bool = True
    ) -> None:
        self.servers[self._current].prepare(tokens, required, cancel, exact)

    def covering_rows(
        self, prompt: tuple[int, ...], required: bytes, cancel: threading.Event | None, budget: int
    ) -> CoveringRows:
        return self.servers[self._current].covering_rows(prompt, required, cancel, budget)

    def logits_after(self, tokens: tuple[int, ...], cancel: threading.Event | None = None) -> np.ndarray:
        return self.servers[self._current].logits_after(tokens, cancel)

    def remembers(self, tokens: tuple[int, ...]) -> bool:
        return self.servers[self._current].remembers(tokens)

    def rows_along(
        self, tokens: tuple[int, ...], draft: tuple[int, ...], cancel: threading.Event | None = None
    ) -> None:
        self.servers[self._current].rows_along(tokens, draft, cancel)

    def prefill(self, tokens: tuple[int, ...], cancel: threading.Event | None = None, beside: bool = False) -> None:
        self.servers[self._current].prefill(tokens, cancel, beside)

    def node(self, key: tuple[int, ...]):
        """What the current server's rows know after `key` (None: nothing)."""
        return self.servers[self._current].node(key)

    def traffic(self) -> Traffic:
        """The sum of the servers' (the engine counts differences)."""
        total = Traffic()
        for rows in self.servers:
            theirs = rows.traffic()
            for f in fields(Traffic):
                setattr(total, f.name, getattr(total, f.name) + getattr(theirs, f.name))
        return total

    @property
    def upstream_changes(self) -> int:
        return sum(rows.upstream_changes for rows in self.servers)

    def forget(self) -> None:
        for rows in self.servers:
            rows.forget()

    def close(self) -> None:
        for prober in self._down.values():
            prober.stop()
        for rows in self.servers:
            rows.close()


class BalancedSet(ServerSet):
    """One URL that is a load balancer naming the server that answered (X-Cpc-Upstream): one
    `RemoteRows` per server behind it, as for a list, so slots and numbers are never mixed.

    Which server a document is on: the balancer decides (a consistent hash on X-Cpc-Document);
    a new document asks once (GET /health with its key: the answer names the server), and a
    moved one shows itself (UpstreamChanged: the call is made again with that server's rows).
    A server seen for the first time, and one a document moves to, is checked first (slots,
    vocabulary probe, the same model), through the balancer with the document's key, so on it."""

    MAX_DOCUMENTS = 4096

    def __init__(
        self,
        first: RemoteRows,
        make_rows: Callable[[], RemoteRows],
        check: Callable[[ModelServerClient, RemoteRows], object],
    ) -> None:
        super().__init__([first], lambda client: (), lambda url: ModelServerClient(url))
        self.upstreams = [first.client.upstream or ""]
        self._make_rows, self._check_rows = make_rows, check
        self._where: OrderedDict[str | None, int] = OrderedDict()  # document key -> index of its server
        self._cut_retried = False
        self._probe = make_rows().client  # asks where a new document goes

    def server_for(self, key: str | None) -> int:
        if key in self._where:
            self._where.move_to_end(key)
            return self._where[key]
        self._probe.affinity, self._probe.upstream = key, None
        self._probe.get_json("/health", time.monotonic() + self._probe.timeout_s)
        return self._learn(key, self._probe.upstream or self.upstreams[0], fresh_only=True)

    def _learn(self, key: str | None, upstream: str, fresh_only: bool = False) -> int:
        """The index of `upstream`'s rows (made and checked when new; checked again when a
        document moves to it, unless `fresh_only`), remembered as `key`'s server."""
        if upstream in self.upstreams:
            i = self.upstreams.index(upstream)
            if not fresh_only:
                rows = self.servers[i]
                rows.route(key)
                self._check_rows(rows.client, rows)
        else:
            rows = self._make_rows()
            rows.fallbacks = self.fallbacks
            rows.client.upstream = upstream
            rows.route(key)
            self._check_rows(rows.client, rows)
            self.servers.append(rows)
            self.upstreams.append(upstream)
            self.calls.append(0)
            i = len(self.servers) - 1
        if key is not None:
            self._where[key] = i
            while len(self._where) > self.MAX_DOCUMENTS:
                self._where.popitem(last=False)
        return i

    def route(self, key: str | None) -> None:
        self._cut_retried = False
        super().route(key)
        self._quiet_others()

    def _quiet_others(self) -> None:
        """Close the streams other rows left open (nearly done): behind one balancer they may be
        on the server this call goes to, where a stream still decoding beside this call's
        prompt would share its batches and move its numbers."""
        for i, rows in enumerate(self.servers):
            if i != self._current:
                rows.close_stream()

    def recover(self, error: BaseException) -> bool:
        """A document the balancer moved: made again at once on the rows of the server it went
        to (checked first). An answer cut short or a connection that broke (its server died
        mid-answer: the balancer cannot send that one on) is made again once, through the
        balancer, which then sends it to a server that is up. Anything else is not ours to retry."""
        if not isinstance(error, UpstreamChanged):
            if (
                self._cut_retried
                or not isinstance(error, ModelServerError)
                or error.kind not in ("unreachable", "protocol")
            ):
                return False
            self._cut_retried, self._retrying = True, True
            return True
        self.servers[self._current].client.upstream = error.before  # those rows stay that server's
        self.failovers += 1
        nxt = self._learn(self._key, error.after)
        self._current, self._retrying = nxt, True
        self.calls[nxt] += 1
        self.servers[nxt].route(self._key)
        self._quiet_others()
        return True

    @property
    def upstream_changes(self) -> int:
        return self.failovers

    def close(self) -> None:
        super().close()
        self._probe.close()
