"""`python -m bench.warm_cost`: what a warm engine call costs besides its tokens, beside the floor.

Text is typed keystroke by keystroke through the real language server over stdio (bench.replay's
passages and its simulated user), with the server's defaults except the model and its threads
(the default code model, `threads` fixed so the floor and the peer run as many), beside
llama.vim's own request to a llama-server on the same GGUF (bench.infill), passage by passage.
Reported, from one run:

- per engine call, from the server's own log line (`#N shown: ... generated=G ... ms=M`) and its
  stats (`cpcLsp/stats` after each request: the alternatives' and the lexicon's decodes): the
  fixed cost and the cost per generated token, the intercept and slope of a robust line (Theil-Sen)
  through (G, M) over the warm calls (at most WARM_DECODED prompt tokens decoded), also over the
  calls that decoded nothing before generating, and through (llama_decode calls, M); and beside it
  the *floor*, a bare `llama_decode` of one token through the same llama-cpp-python build, in this
  process, FLOOR_SAMPLES times after the cold requests and after each passage, once the server's
  own work (a rest or a prefetch it makes after an answer) has stopped: the machine's other load
  is in it, the server's is not (sampled right after each answer, it raced those jobs for the
  cores and read 3-5x a decode);
- the same calls' time seen by the client (the request's round trip), so what lies outside the
  engine (pygls, the scheduler's hand-offs, shaping) shows as the difference;
- the share of engine calls that showed nothing, and the tokens they generated;
- every keystroke's latency (p50/p75/p90/p95, over 300 ms) beside the peer's;
- the cold request (a fresh ~840-token document: the first answer after opening it) beside a bare
  evaluation of the same number of tokens through the same build.

`--profile PATH` runs the server under bench.profiled_server (cProfile in thread CPU time) and
prints where its CPU went per engine call. Results: a small JSON file (`--out`).

    python -m bench.warm_cost --quick            # one short Python passage, one cold document
    python -m bench.warm_cost --out bench/results/warm_cost.json
    python -m bench.warm_cost --quick --profile /tmp/warm   # and the CPU profile by function
    python -m bench.warm_cost --quick --model-server        # ours through a shared llama-server
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.machine import wait_until_idle

MODEL = "qwen2.5-coder-0.5b"  # the server's default model for code
WARM_DECODED = 5  # an engine call that decoded at most this many prompt tokens is warm
REMEMBERED_MS = 20.0  # a call this fast decoded nothing: every row was remembered (left out of the fits)
PERCENTILES = (0.50, 0.75, 0.90, 0.95)
SLOW_MS = 300.0
CHUNK_TOKENS = 64  # the floor evaluates a prompt in the engine's (and llama-server's) chunks
FLOOR_SAMPLES = 8  # one-token decodes each time the floor is sampled

LOG_LINE = re.compile(
    r"#(?P<number>\d+) (?P<outcome>shown|nothing to add): stop=(?P<stop>\S+) required=(?P<required>\d+) chars "
    r"prompt=(?P<prompt>\d+) reused=(?P<reused>\d+) decoded=(?P<decoded>\d+) cover=(?P<cover>\d+) "
    r"generated=(?P<generated>\d+) alternatives=(?P<alternatives>\d+) ms=(?P<ms>\d+)"
)


# --- pure parts (tests/bench/test_warm_cost.py) ------------------------------------------------


@dataclass(frozen=True)
class EngineCall:
    """One engine call as the server's log line tells it (numbers only, no text)."""

    number: int  # the server's request number (the first request is 1)
    shown: bool
    stop: str
    required: int
    prompt: int
    reused: int
    decoded: int
    cover: int
    generated: int
    alternatives: int
    ms: float
    alternative_decodes: int | None = None  # from cpcLsp/stats, when it was asked after the call
    lexicon_decodes: int | None = None
    client_ms: float | None = None  # the request's round trip as the client timed it

    def decode_steps(self) -> int | None:
        """llama_decode calls the call made: its generated tokens but the first (read from the
        prompt's row), the covering's, the alternatives' and the lexicon's decodes, and the
        prompt's new tokens (a run, then its last token alone: engine.llama_backend); None when
        the stats are unknown."""
        if self.alternative_decodes is None or self.lexicon_decodes is None:
            return None
        prompt = min(self.decoded, 2)
        return max(0, self.generated - 1) + self.cover + self.alternative_decodes + self.lexicon_decodes + prompt


def parse_calls(log: str) -> list[EngineCall]:
    """Every engine call's log line in `log` (the server's stderr), in order."""
    calls = []
    for m in LOG_LINE.finditer(log):
        g = m.groupdict()
        calls.append(EngineCall(
            number=int(g["number"]), shown=g["outcome"] == "shown", stop=g["stop"], required=int(g["required"]),
            prompt=int(g["prompt"]), reused=int(g["reused"]), decoded=int(g["decoded"]), cover=int(g["cover"]),
            generated=int(g["generated"]), alternatives=int(g["alternatives"]), ms=float(g["ms"]),
        ))  # fmt: skip
    return calls


@dataclass(frozen=True)
class Fit:
    """y = intercept + slope * x, robustly (Theil-Sen), over `points` points."""

    intercept: float
    slope: float
    points: int


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> Fit | None:
    """The median of the slopes between every two points with different x, and the median of
    y - slope * x: a few calls slowed by another process move it little. None with fewer than two
    distinct x."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]
    ]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    return Fit(statistics.median(y - slope * x for x, y in zip(xs, ys)), slope, len(xs))


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least `share` of the values at or
    below it (p90 of 1..100 is 90)."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[max(0, math.ceil(round(share * len(ranked), 9)) - 1)]


def latency_rows(ours: Sequence[float], peer: Sequence[float]) -> list[dict[str, Any]]:
    """p50/p75/p90/p95 (nearest rank) of every keystroke's latency, ours beside the peer's, and
    the share over SLOW_MS."""
    rows = []
    for share in PERCENTILES:
        a, b = percentile(ours, share), percentile(peer, share)
        rows.append({"what": f"p{round(share * 100)}", "ours_ms": a, "peer_ms": b, "ratio": _ratio(a, b)})
    a, b = _share(ours, lambda v: v > SLOW_MS), _share(peer, lambda v: v > SLOW_MS)
    rows.append({"what": f"over {SLOW_MS:.0f} ms", "ours_ms": a, "peer_ms": b, "ratio": _ratio(a, b)})
    return rows


def call_summary(calls: Sequence[EngineCall], floor_ms: float | None) -> dict[str, Any]:
    """The fits and shares of the module docstring; `floor_ms`: a bare one-token decode."""
    remembered = [c for c in calls if c.decoded == 0 and c.ms < REMEMBERED_MS]
    warm = [c for c in calls if c.decoded <= WARM_DECODED and c not in remembered]
    still = [c for c in warm if c.decoded == 0 and c.cover == 0]
    fit = theil_sen([c.generated for c in warm], [c.ms for c in warm])
    fit_still = theil_sen([c.generated for c in still], [c.ms for c in still])
    seen = [c for c in warm if c.client_ms is not None]
    fit_client = theil_sen([c.generated for c in seen], [c.client_ms or 0.0 for c in seen])
    outside = [(c.client_ms or 0.0) - c.ms for c in seen]
    stepped = [(c.decode_steps(), c.ms) for c in warm if c.decode_steps() is not None]
    fit_steps = theil_sen([x for x, _ in stepped], [y for _, y in stepped])
    hidden = [c for c in calls if not c.shown]
    max_alt = max((c.alternative_decodes or 0 for c in warm), default=0)
    return {
        "engine_calls": len(calls),
        "warm_calls": len(warm),
        "remembered_calls": len(remembered),
        "fit_engine_ms": _fit_json(fit),
        "fit_engine_ms_nothing_decoded": _fit_json(fit_still),
        "fit_client_ms": _fit_json(fit_client),
        "fit_engine_ms_by_decode_steps": _fit_json(fit_steps),
        "warm_means": _means(warm),
        "outside_engine_ms": {f"p{round(share * 100)}": percentile(outside, share) for share in (0.25, 0.5, 0.75, 0.9)},
        "outside_engine_ms_median": _median(outside),
        "floor_ms_per_token": floor_ms,
        "slope_over_floor": _ratio(fit.slope if fit else None, floor_ms),
        "decode_slope_over_floor": _ratio(fit_steps.slope if fit_steps else None, floor_ms),
        "intercept_in_floor_tokens": _ratio(fit.intercept if fit else None, floor_ms),
        "two_tokens_ms_median": _median([c.ms for c in warm if c.generated == 2]),
        "stopped_at_budget_share": _share([c.stop == "length" for c in warm], bool),
        "alternative_decodes_at_budget_share": _share([c.alternative_decodes == max_alt for c in warm], bool),
        "nothing_shown_share": len(hidden) / len(calls) if calls else None,
        "nothing_shown_calls": len(hidden),
        "nothing_shown_generated_median": _median([c.generated for c in hidden]),
        "nothing_shown_generated_total": sum(c.generated for c in hidden),
        "nothing_shown_ms_total": sum(c.ms for c in hidden),
        "engine_ms_total": sum(c.ms for c in calls),
    }


def _means(calls: Sequence[EngineCall]) -> dict[str, float | None]:
    """What a warm call does on average, in tokens and decodes."""

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    known = [c for c in calls if c.decode_steps() is not None]
    return {
        "generated": mean([c.generated for c in calls]), "prompt_decoded": mean([c.decoded for c in calls]),
        "cover_decodes": mean([c.cover for c in calls]),
        "alternative_decodes": mean([c.alternative_decodes or 0 for c in known]),
        "lexicon_decodes": mean([c.lexicon_decodes or 0 for c in known]),
        "decode_steps": mean([c.decode_steps() or 0 for c in known]), "ms": mean([c.ms for c in calls]),
    }  # fmt: skip


def _fit_json(fit: Fit | None) -> dict[str, Any] | None:
    return None if fit is None else asdict(fit)


def _share(values: Sequence[float], test) -> float | None:
    return sum(1 for v in values if test(v)) / len(values) if values else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


# --- the floor: bare llama_decode through the same build ----------------------------------------


class Floor:
    """The model in this process through llama-cpp-python's C API and nothing else: the cost of
    a token when no Python work surrounds it (no logits copy, no sampling)."""

    def __init__(self, path: Path, threads: int, n_ctx: int = 2048, n_batch: int = 512) -> None:
        import ctypes

        import llama_cpp

        from engine.local.llama import FLASH_ATTN

        self._llama = llama_cpp
        self._quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(self._quiet, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        ctx = llama_cpp.llama_context_default_params()
        ctx.n_ctx, ctx.n_batch, ctx.n_ubatch = n_ctx, n_batch, n_batch
        ctx.n_threads = ctx.n_threads_batch = threads
        ctx.swa_full, ctx.no_perf = True, True  # as the engine's context (engine.local.llama)
        ctx.flash_attn_type = FLASH_ATTN
        self._ctx = llama_cpp.llama_init_from_model(self._model, ctx)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self.n_ctx = n_ctx
        self._next = (0, 0)  # (position, token) `one_ms` decodes (`hold`)

    def tokenize(self, text: str) -> list[int]:
        raw = text.encode("utf-8", "replace")
        buffer = (self._llama.llama_token * (len(raw) + 8))()
        count = self._llama.llama_tokenize(self._vocab, raw, len(raw), buffer, len(buffer), True, False)
        return list(buffer[: max(0, count)])

    def _decode(self, tokens: Sequence[int]) -> None:
        array = (self._llama.llama_token * len(tokens))(*tokens)
        if self._llama.llama_decode(self._ctx, self._llama.llama_batch_get_one(array, len(tokens))) != 0:
            raise RuntimeError("llama_decode failed")

    def evaluate_ms(self, tokens: Sequence[int]) -> float:
        """A cold evaluation of `tokens` (the cache cleared first), in CHUNK_TOKENS chunks."""
        self._llama.llama_memory_clear(self._memory, True)
        started = time.perf_counter()
        for at in range(0, len(tokens), CHUNK_TOKENS):
            self._decode(tokens[at : at + CHUNK_TOKENS])
        return (time.perf_counter() - started) * 1000

    def hold(self, context: Sequence[int]) -> None:
        """Evaluate `context` (cold), so that `one_ms` decodes after it."""
        self.evaluate_ms(context[:-1])
        self._next = (len(context) - 1, context[-1])

    def one_ms(self) -> float:
        """One single-token llama_decode after the held context, then its cell removed again, so
        every sample decodes the same token at the same position."""
        position, token = self._next
        started = time.perf_counter()
        self._decode([token])
        ms = (time.perf_counter() - started) * 1000
        self._llama.llama_memory_seq_rm(self._memory, 0, position, -1)
        return ms

    def samples_when_idle(self, pids: Sequence[int], count: int) -> list[float]:
        """`count` one-token decodes once the language server (`pids`) is idle."""
        wait_until_idle(pids)
        return [self.one_ms() for _ in range(count)]

    def close(self) -> None:
        self._llama.llama_free(self._ctx)
        self._llama.llama_model_free(self._model)


# --- the run ---------------------------------------------------------------------------------


class Server:
    """`python -m lsp_server` (or bench.profiled_server) over stdio, its stderr in a file."""

    def __init__(self, threads: int, profile: Path | None) -> None:
        from tests.support.lsp_client import LspClient

        module = "bench.profiled_server" if profile else "lsp_server"
        env = {**os.environ, **({"CPC_BENCH_PROFILE": str(profile)} if profile else {})}
        handle, name = tempfile.mkstemp(prefix="cpc-warm-cost-", suffix=".log")
        os.close(handle)
        self.log_path = Path(name)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, "--log-level", "info"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, env=env,
        )  # fmt: skip
        self.client = LspClient.over(self.process.stdout, self.process.stdin)
        self.settings = {"model": MODEL, "threads": threads}
        self.text = ""  # its stderr, once closed

    def close(self) -> None:
        self.client.shutdown()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        self.text = self.log_path.read_text(errors="replace")
        self.log_path.unlink()


class StatsAfterEachRequest:
    """The client as bench.replay drives it, asking `cpcLsp/stats` right after each answered
    inline request (after its time was taken): the decodes of the call the server made for it
    (`engineAnswers` grew), by the server's request number."""

    def __init__(self, client) -> None:
        self.client = client
        self.notify = client.notify
        self.decodes: dict[int, tuple[int, int]] = {}  # request number -> (alternative, lexicon decodes)
        self._answers = 0

    def request(self, method: str, params: Any = None, timeout: float = 300.0):
        reply = self.client.request(method, params, timeout)
        if method == "textDocument/inlineCompletion":
            stats = self.client.call("cpcLsp/stats") or {}
            if stats.get("engineAnswers", 0) > self._answers:
                self._answers = stats["engineAnswers"]
                self.decodes[stats["requests"]] = (stats.get("alternativeDecodes", 0), stats.get("lexiconDecodes", 0))
        return reply


def cold_request(
    editor, floor: Floor, server_pids: Sequence[int], uri: str, text: str, language: str
) -> dict[str, Any]:
    """Open a fresh document and ask at its end at once: the first answer's time after opening,
    the engine's prompt tokens, and a bare evaluation of as many tokens of the same text, once
    the server has finished what it decodes behind the answer."""
    opened = time.perf_counter()
    editor.open(uri, text, language)
    reply = editor.inline(uri, timeout=300)
    first_ms = (reply.received - opened) * 1000
    stats = editor.stats() or {}
    prompt = int(stats.get("promptTokens") or 0)
    tokens = floor.tokenize(text)
    while len(tokens) < prompt:  # the prompt's layout adds a few tokens: the same text again
        tokens += tokens[1:]
    wait_until_idle(server_pids)
    bare = floor.evaluate_ms(tokens[:prompt])
    editor.close(uri)
    # the request's time before generating (its answer less the engine's generation) is what
    # compares with a bare evaluation: a cold answer may generate 5 tokens or 49
    generating = (stats.get("ms") or 0.0) - (stats.get("promptMs") or 0.0)
    return {"prompt_tokens": prompt, "decoded_tokens": stats.get("decodedTokens"), "request_ms": reply.ms,
            "open_to_answer_ms": first_ms, "engine_ms": stats.get("ms"), "bare_ms": bare,
            "generated": stats.get("generatedTokens"), "before_generating_ms": reply.ms - generating,
            "request_over_bare": _ratio(reply.ms, bare),
            "before_generating_over_bare": _ratio(reply.ms - generating, bare)}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.infill import SEED_ARGS, InfillPeer
    from bench.machine import CpuWatch, process_cpu_seconds
    from bench.replay import interleaved, passages, ready_editor, replay_infill, replay_server, used_files
    from engine.model_files import resolve_model
    from tests.support.cases import build_cases, check_cases
    from tests.support.llama_server import LlamaServer
    from tests.support.lsp_client import Editor
    from tests.support.prompts import documents

    say = lambda m: print(f"[warm_cost] {m}", file=sys.stderr, flush=True)  # noqa: E731
    tuning = build_cases(50, 0)
    items = interleaved([p for p in passages(args.per_kind, used_files(tuning, check_cases(50, tuning)), chars=args.chars)
                         if p.kind in args.kinds.split(",")])  # fmt: skip
    watch = CpuWatch.start()
    floor = Floor(resolve_model(MODEL), args.threads)
    llama_server = (
        None if args.no_peer else LlamaServer(slots=1, model=MODEL, threads=args.threads, extra_args=SEED_ARGS)
    )
    peer = None if llama_server is None else InfillPeer(llama_server.start(600))
    # ours through its own llama-server (the README's command): the peer's seed settings keep one
    # slot and its own cache; the two replay in turn, never at once
    shared = LlamaServer(model=MODEL, threads=args.threads).start(600) if args.model_server else None
    server = Server(args.threads, args.profile)
    if shared is not None:
        server.settings["modelServer"] = shared.url
    client_ms: dict[int, float] = {}
    number = 1  # the server numbers its requests from 1: the warm-up is #1
    ours: list[float] = []
    theirs: list[float] = []
    cold = []
    floor_ms: list[float] = []
    busy = [server.process.pid] + ([shared.process.pid] if shared is not None and shared.process else [])
    try:
        editor: Editor = ready_editor(server.client, server.settings)
        stats = StatsAfterEachRequest(server.client)
        recorder = Editor(stats)  # type: ignore[arg-type]
        for i, doc in enumerate(documents(lambda t: len(floor.tokenize(t)), 838, args.cold, first_line=400)):
            cold.append(cold_request(editor, floor, busy, f"file:///bench/warm_cost/cold-{i}.py", doc.base, "python"))
            number += 1
            client_ms[number] = cold[-1]["request_ms"]
            say(f"cold {i + 1}/{args.cold}: {cold[-1]['request_ms']:.0f} ms for {cold[-1]['prompt_tokens']} tokens, "
                f"bare {cold[-1]['bare_ms']:.0f} ms")  # fmt: skip
        floor.hold(floor.tokenize(items[0].before)[-400:])
        floor_ms += floor.samples_when_idle(busy, FLOOR_SAMPLES)
        for n, passage in enumerate(items):
            result = replay_server(recorder, passage, f"file:///bench/warm_cost/{n}{Path(passage.file).suffix}", True)
            for ms in result["ms"]:
                number += 1
                client_ms[number] = ms
            ours += result["ms"]
            floor_ms += floor.samples_when_idle(busy, FLOOR_SAMPLES)
            if peer is not None:
                wait_until_idle(busy)  # the peer's requests do not race our server's work after an answer
                theirs += replay_infill(peer, passage, True)["ms"]
            say(f"passage {n + 1}/{len(items)} ({passage.kind}): {len(result['ms'])} keystrokes")
        pids = [server.process.pid] + [s.process.pid for s in (llama_server, shared) if s is not None and s.process]
        server_cpu = sum(process_cpu_seconds(pid) or 0.0 for pid in pids)
    finally:
        server.close()
        if peer is not None:
            peer.close()
        for started in (llama_server, shared):
            if started is not None:
                started.stop()
        floor.close()
    calls = [replace(c, client_ms=client_ms.get(c.number)) for c in parse_calls(server.text)]
    calls = [
        replace(c, alternative_decodes=stats.decodes[c.number][0], lexicon_decodes=stats.decodes[c.number][1])
        if c.number in stats.decodes
        else c
        for c in calls
    ]
    floor_median = _median(floor_ms)
    return {
        "calls": call_summary(calls, floor_median),
        "latency": latency_rows(ours, theirs),
        "keystrokes": {"ours": len(ours), "peer": len(theirs)},
        "cold": cold,
        "floor_ms_samples": len(floor_ms),
        "passages": [{"kind": p.kind, "file": p.file, "start": p.start, "end": p.end} for p in items],
        "other_processes_cpu_share": watch.others_share(server_cpu),
        "engine_call_log": {
            "fields": list(EngineCall.__dataclass_fields__),
            "calls": [list(asdict(c).values()) for c in calls],
        },
    }


# Where a thread's CPU went, by the functions a warm call passes through: (thread, what, file, function).
# Time with callees (cProfile's cumtime); the parts overlap where one calls another (e.g. every
# part of the engine calls llama_decode), so the engine's own Python time is given apart.
PROFILE_PARTS = (
    (
        "engine",
        "the request's prompt: decode its new tokens, cover the typed prefix",
        "engine/sequence.py",
        "decode_prompt",
    ),
    ("engine", "generation (the tokens)", "engine/engine.py", "_generate"),
    ("engine", "alternatives (other first words), before the answer", "engine/engine.py", "_alternatives"),
    ("engine", "the lexicon's words", "engine/engine.py", "_choose_word"),
    ("engine", "signals for the gate", "engine/engine.py", "_signals"),
    (
        "engine",
        "prompt tokens: tokenize, window, layout (requests and prefetches)",
        "engine/engine.py",
        "prompt_tokens",
    ),
    ("engine", "prefetch after each edit (decodes the next prompt between keystrokes)", "engine/engine.py", "prefetch"),
    ("engine", "llama_decode with its batch and row copy (all callers)", "engine/llama_backend.py", "decode"),
    ("engine", "a logits row's log-sum-exp (all callers)", "engine/sampler.py", "log_sum_exp"),
    ("engine", "loading the model (once)", "lsp_server/scheduler.py", "load_engine"),
    ("loop", "inline request handler: split, context, carry, gate, shaping", "lsp_server/server.py", "suggest"),
    ("loop", "didChange: apply the edit, lexicon, prefetch request", "lsp_server/server.py", "did_change"),
    ("loop", "the benchmark's own cpcLsp/stats after each request", "lsp_server/server.py", "stats"),
    (
        "loop",
        "the event loop's turns (pygls reading, dispatch, writing; all of the above)",
        "asyncio/base_events.py",
        "_run_once",
    ),
)


def profile_parts(base: Path, calls: int) -> list[dict[str, Any]]:
    """PROFILE_PARTS from bench.profiled_server's files (`base`.*.pstats), in CPU ms per engine
    call, with the engine thread's total and its Python time outside llama_decode and loading."""
    import pstats

    threads: dict[str, dict] = {}
    for path in sorted(base.parent.glob(f"{base.name}.*.pstats")):
        thread = path.name[len(base.name) + 1 : -len(".pstats")]
        kind = "engine" if thread.startswith("cpc-engine") else "loop" if thread == "main" else None
        if kind is not None:
            threads[kind] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]

    def find(kind: str, file: str, name: str) -> tuple[float, float, int]:
        """(cumtime, tottime, calls) of a function, summed over its entries (a coroutine's resumes)."""
        found = [(v[3], v[2], v[1]) for (f, _, n), v in threads.get(kind, {}).items() if f.endswith(file) and n == name]
        return tuple(map(sum, zip(*found))) if found else (0.0, 0.0, 0)  # type: ignore[return-value]

    per = 1000 / max(1, calls)
    engine_total = sum(v[2] for v in threads.get("engine", {}).values())
    rows = [{"thread": kind, "what": what, "function": f"{file}:{name}", "calls": find(kind, file, name)[2],
             "ms_per_engine_call": find(kind, file, name)[0] * per} for kind, what, file, name in PROFILE_PARTS]  # fmt: skip
    decode = find("engine", "engine/llama_backend.py", "decode")[1]
    load = find("engine", "lsp_server/scheduler.py", "load_engine")[0]
    rows.append({"thread": "engine", "what": "engine thread, all", "function": "", "calls": calls,
                 "ms_per_engine_call": engine_total * per})  # fmt: skip
    rows.append({"thread": "engine", "what": "engine thread's Python outside llama_decode and loading", "function": "",
                 "calls": calls, "ms_per_engine_call": max(0.0, engine_total - decode - load) * per})  # fmt: skip
    for row in rows:
        row["share_of_engine_thread"] = row["ms_per_engine_call"] / (engine_total * per) if engine_total else None
    return rows


def profile_top(base: Path, calls: int, top: int = 15) -> list[dict[str, Any]]:
    """The functions with the most CPU of their own (tottime) over all threads, ms per engine call."""
    import pstats

    rows = []
    for path in sorted(base.parent.glob(f"{base.name}.*.pstats")):
        thread = re.sub(r"-\d+$", "", path.name[len(base.name) + 1 : -len(".pstats")])
        for (file, line, name), (_, ncalls, tottime, cumtime, _) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
            rows.append({"thread": thread, "function": f"{_short(file)}:{line}:{name}", "calls": ncalls,
                         "own_ms_per_engine_call": 1000 * tottime / max(1, calls)})  # fmt: skip
    rows.sort(key=lambda r: -r["own_ms_per_engine_call"])
    return rows[:top]


def _short(file: str) -> str:
    for marker in ("site-packages/", "/engine/", "/lsp_server/", "/bench/"):
        if marker in file:
            at = file.index(marker)
            return file[at + (len(marker) if marker == "site-packages/" else 1) :]
    return file


def print_tables(found: dict[str, Any]) -> None:
    from bench.report import num, pct, render, times

    c = found["calls"]

    def fit(f: dict[str, Any] | None) -> list[str]:
        return ["-", "-", "-"] if f is None else [num(f["intercept"]), num(f["slope"]), num(f["points"])]

    print(render((
        f"warm engine calls (at most {WARM_DECODED} prompt tokens decoded): fixed cost and cost per generated token",
        ["measured", "fixed ms", "ms per token", "calls"],
        [["engine ms (server log)", *fit(c["fit_engine_ms"])],
         ["engine ms, nothing decoded before generating", *fit(c["fit_engine_ms_nothing_decoded"])],
         ["request round trip (client)", *fit(c["fit_client_ms"])],
         ["engine ms by llama_decode calls (x: decode steps, not tokens)", *fit(c["fit_engine_ms_by_decode_steps"])],
         ["bare llama_decode of one token (floor)", "-", num(c["floor_ms_per_token"]), num(found["floor_ms_samples"])]],
    )))  # fmt: skip
    out = c["outside_engine_ms"]
    print(
        f"per llama_decode call / floor: {times(c['decode_slope_over_floor'])}; per generated token / floor: "
        f"{times(c['slope_over_floor'])}; fixed cost = {num(c['intercept_in_floor_tokens'])} "
        f"tokens' worth; outside the engine (client - engine ms) p25/p50/p75/p90: "
        f"{' / '.join(num(out[k], 0) for k in ('p25', 'p50', 'p75', 'p90'))}"
    )
    print(
        f"warm calls that generated to the token budget: {pct(c['stopped_at_budget_share'])}; that spent the "
        f"most alternatives' decodes seen: {pct(c['alternative_decodes_at_budget_share'])}"
    )
    m = c["warm_means"]
    print(f"a warm call on average: {num(m['generated'])} tokens generated, {num(m['prompt_decoded'])} prompt tokens "
          f"decoded, {num(m['cover_decodes'])} covering + {num(m['alternative_decodes'])} alternatives' + "
          f"{num(m['lexicon_decodes'])} lexicon decodes: {num(m['decode_steps'])} llama_decode calls, {num(m['ms'], 0)} ms; "
          f"{c['remembered_calls']} calls from remembered rows (under {REMEMBERED_MS:.0f} ms) left out")  # fmt: skip
    print(f"engine calls: {c['engine_calls']}, nothing shown: {c['nothing_shown_calls']} ({pct(c['nothing_shown_share'])}), "
          f"generating {c['nothing_shown_generated_total']} tokens (median {num(c['nothing_shown_generated_median'])}) "
          f"in {num(c['nothing_shown_ms_total'], 0)} of {num(c['engine_ms_total'], 0)} engine ms")  # fmt: skip
    rows = found["latency"]
    print(render((
        "every keystroke: time to the answer (ms), ours beside llama.vim's request (same model, same threads)",
        ["", "ours", "llama.vim", "ours / llama.vim"],
        [[r["what"], num(r["ours_ms"], 0), num(r["peer_ms"], 0), times(r["ratio"])] for r in rows[:-1]]
        + [[rows[-1]["what"], pct(rows[-1]["ours_ms"]), pct(rows[-1]["peer_ms"]), times(rows[-1]["ratio"])]],
    )))  # fmt: skip
    print(render((
        "cold request: a fresh document, asked at once, beside a bare evaluation of as many tokens",
        ["prompt tokens", "request ms", "open to answer ms", "engine ms", "generated", "before generating ms",
         "bare ms", "request / bare", "before generating / bare"],
        [[num(r["prompt_tokens"]), num(r["request_ms"], 0), num(r["open_to_answer_ms"], 0), num(r["engine_ms"], 0),
          num(r.get("generated")), num(r.get("before_generating_ms"), 0), num(r["bare_ms"], 0),
          times(r["request_over_bare"]), times(r.get("before_generating_over_bare"))] for r in found["cold"]],
    )))  # fmt: skip
    if found.get("profile"):
        print(render((
            f"CPU (thread CPU time, with callees) per engine call over {c['engine_calls']} calls",
            ["thread", "part", "function", "calls", "ms / engine call", "of engine thread"],
            [[r["thread"], r["what"], r["function"], num(r["calls"]), num(r["ms_per_engine_call"]),
              pct(r["share_of_engine_thread"])] for r in found["profile"]],
        )))  # fmt: skip
        print(render((
            "CPU of their own (tottime), the largest, per engine call",
            ["thread", "function", "calls", "ms / engine call"],
            [[r["thread"], r["function"], num(r["calls"]), num(r["own_ms_per_engine_call"], 2)]
             for r in found["profile_top"]],
        )))  # fmt: skip
    print(f"other processes used {pct(found.get('other_processes_cpu_share'))} of the CPUs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.warm_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short Python passage and one cold document")
    parser.add_argument("--per-kind", type=int, default=2, help="passages per kind of text")
    parser.add_argument("--kinds", default="python,javascript,prose")
    parser.add_argument("--chars", type=int, default=240, help="about this many characters a passage")
    parser.add_argument("--cold", type=int, default=2, help="cold documents (~840 tokens each)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the server, the floor and the peer")
    parser.add_argument("--no-peer", action="store_true", help="leave out llama.vim's request (e.g. for a profile)")
    parser.add_argument(
        "--model-server",
        action="store_true",
        help="ours through a llama-server of the same build and model (modelServer, the README's command)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="run the server under cProfile (bench.profiled_server); its stats go to PATH.*.pstats",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the results (JSON) here")
    args = parser.parse_args(argv)
    if args.quick:
        args.per_kind, args.kinds, args.chars, args.cold = 1, "python", 120, 1
    if args.profile is not None:
        args.profile = args.profile.resolve()
        for old in args.profile.parent.glob(f"{args.profile.name}.*.pstats"):
            old.unlink()
    found = run(args)
    if args.profile is not None:
        found["profile"] = profile_parts(args.profile, found["calls"]["engine_calls"])
        found["profile_top"] = profile_top(args.profile, found["calls"]["engine_calls"])
    found["settings"] = {
        "model": MODEL,
        "threads": args.threads,
        "per_kind": args.per_kind,
        "kinds": args.kinds,
        "chars": args.chars,
        "cold": args.cold,
        "peer": not args.no_peer,
        "model_server": args.model_server,
        "profiled": args.profile is not None,
        "command": "python -m bench.warm_cost " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    print_tables(found)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
