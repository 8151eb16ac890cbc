"""The same whole suggestion from a shared llama-server as in-process, on cursors the project never
tuned on: the remote headline's own check (`python -m bench.remote_vs_local --unseen`).

The cases: mid-word cursors in files no other case set of the bench uses (bench.cases' sources:
the Python standard library, npm's JavaScript, C headers, documentation), each document the
1,500 characters of the file before the cursor (from a line start) and the 400 after, opened with
its language id, asked once at the cursor, closed. Two language servers name the same model, one
in-process and one with `modelServer` on the README's server command (with `--cache-ram 0`: the
in-process engine has no prompt cache in RAM), every other setting at its default; the gate on
(its default) and off (`minConfidence` 0).

For each differing case: each side's first prompt ("near", "lean" or the whole one), prompt length
and stop reason; the first token where the two suggestions part (both tokenized from the word's
start by the server's `/tokenize`); and the engine's own diagnosis (bench.remote_why, both
engines in one process): which of the prompt, the numbers or the path differs, and the log-prob
gap between the two tokens where the token paths part (a near-tie is a gap within the float
noise between the two backends' rows, 3e-4 nats measured with flash attention off).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from bench import quality
from bench.machine import wait_until_idle
from tests.support.cases import Case, build_cases, check_cases, read_text
from tests.support.lsp_client import Editor, LspClient, end_position, insert_text

UNSEEN_SEED = 7  # no other case set of the bench is drawn with it
BEFORE, AFTER = 1_500, 400
TIMEOUT_MS = 120_000  # a loaded 2-core machine: a slow answer is not what this compares


@dataclass(frozen=True)
class Cursor:
    """A document and a cursor inside one of its words."""

    kind: str
    file: str
    text: str
    cursor: int  # code points into `text`
    word: str  # the whole word the cursor is in
    typed: str  # its part before the cursor

    @property
    def language(self) -> str:
        return quality.LANGUAGES[self.kind]

    @property
    def position(self) -> tuple[int, int]:
        return end_position(self.text[: self.cursor])


def _cursor(case: Case) -> Cursor | None:
    text = read_text(Path(case.file))
    if text is None:
        return None
    document = text[case.context_start : case.offset + AFTER]
    return Cursor(case.kind, case.file, document, case.offset - case.context_start, case.word, case.typed)


def unseen_cases(per_kind: int = 25) -> list[Cursor]:
    """`per_kind` cursors of each kind of text, from files neither the tuning set nor the check
    set of the bench (bench.cases) draws from."""
    tuning = build_cases(50, 0)
    used = frozenset(c.file for c in tuning) | frozenset(c.file for c in check_cases(50, tuning))
    cases = build_cases(per_kind, UNSEEN_SEED, context_chars=BEFORE, exclude=used)
    return [c for c in (_cursor(case) for case in cases) if c is not None]


def _client(settings: dict[str, Any]) -> LspClient:
    client = LspClient(["--log-level", "warning"])
    client.initialize({"cpcLsp": settings}, wait_loaded=True, timeout=300)
    return client


def ask(client: LspClient, uri: str, case: Cursor, settle: Sequence[int] = ()) -> dict[str, Any]:
    """Open, ask once at the cursor, close: the suggestion and the engine's stats. `settle`: the
    processes (the language server, a llama-server) to wait for after opening, until the opening
    prefetch is done."""
    editor = Editor(client)
    editor.open(uri, case.text, case.language)
    if settle:
        wait_until_idle(settle, at_most=60.0)
    reply = editor.inline(uri, case.position, timeout=600)
    stats = editor.stats() or {}
    editor.close(uri)
    return {"suggestion": insert_text(reply), "ms": reply.ms, "stats": stats}


def first_split(a: str | None, b: str | None, tokenize: Callable[[str], list[str]]) -> dict[str, Any] | None:
    """Where two suggestions part: the index of the first differing token (both tokenized from
    the word's start) and each side's token there ("" past its end; None: no suggestion)."""
    if a == b:
        return None
    ta = tokenize(a) if a else []
    tb = tokenize(b) if b else []
    i = 0
    while i < min(len(ta), len(tb)) and ta[i] == tb[i]:
        i += 1
    return {
        "token": i,
        "local": ta[i] if i < len(ta) else ("" if a else None),
        "remote": tb[i] if i < len(tb) else ("" if b else None),
    }


def compare(
    server_url: str,
    cases: list[Cursor],
    settings: dict[str, Any],
    tokenize: Callable[[str], list[str]],
    label: str,
    say: Callable[[str], None] = lambda m: None,
    settle: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Each case asked of the in-process language server, then of the remote one, back to back.
    `settle` (the llama-server's pid): each asked once its server and the llama-server are idle
    after opening."""
    local, remote = _client(settings), _client({**settings, "modelServer": server_url})
    rows = []
    quiet = lambda client: () if settle is None else (client.pid, *settle)  # noqa: E731
    try:
        for i, case in enumerate(cases):
            uri = f"file:///bench/same/{label}/{case.kind}-{i}.txt"
            a, b = ask(local, uri, case, quiet(local)), ask(remote, uri, case, quiet(remote))
            row = {
                "case": i, "kind": case.kind, "file": case.file, "typed": case.typed, "word": case.word,
                "local": a["suggestion"], "remote": b["suggestion"], "local_ms": a["ms"], "remote_ms": b["ms"],
                "lexicon_changed": [a["stats"].get("lexiconChanged"), b["stats"].get("lexiconChanged")],
                "fallback": b["stats"].get("fallback"), "round_trips": b["stats"].get("roundTrips"),
                "first_prompt": [a["stats"].get("firstPrompt"), b["stats"].get("firstPrompt")],
                "prompt_tokens": [a["stats"].get("promptTokens"), b["stats"].get("promptTokens")],
                "stop": [a["stats"].get("stopReason"), b["stats"].get("stopReason")],
            }  # fmt: skip
            row["split"] = first_split(row["local"], row["remote"], tokenize)
            rows.append(row)
            if (i + 1) % 10 == 0:
                say(f"  {label}: {i + 1}/{len(cases)}, {sum(r['split'] is None for r in rows)} equal")
            if row["split"] is not None:
                say(
                    f"  {label} {i} ({case.kind}) differs at token {row['split']['token']}: {row['local']!r} | {row['remote']!r}"
                )
    finally:
        local.shutdown()
        remote.shutdown()
    differ = [r for r in rows if r["split"] is not None]
    return {
        "cases": len(rows), "equal": len(rows) - len(differ), "equal_share": (len(rows) - len(differ)) / len(rows) if rows else None,
        "shown": {"local": sum(r["local"] is not None for r in rows), "remote": sum(r["remote"] is not None for r in rows)},
        "differ": differ, "rows": rows,
    }  # fmt: skip


def check(
    cases: list[Cursor],
    say: Callable[[str], None] = lambda m: None,
    threads: int = 2,
    model: str = "gemma-3-270m",
    max_tokens: int = 8,
    save: Callable[[dict], None] | None = None,
    explain: bool = True,
    gates: tuple[str, ...] = ("on", "off"),
    settled: bool = False,
) -> dict[str, Any]:
    """The whole check: one llama-server (the README's command, `--cache-ram 0`), the gate on,
    then off; each gate a fresh pair of language servers. `save` gets the results after each gate.
    `explain`: then each differing case again through bench.remote_why (both engines in this
    process): the cause, and the log-prob gap between the two tokens where the paths part.
    `settled`: each case asked once both servers are idle after opening (its opening prefetch
    done), where a request asked at once can meet that prefetch begun on one side only."""
    from tests.support.llama_server import start_llama_server

    server = start_llama_server(slots=4, ctx=2048, threads=threads, model=model, extra_args=("--cache-ram", "0"))
    out: dict[str, Any] = {"llama_server": server.command()[1:], "model": model, "max_tokens": max_tokens, "cases": len(cases),
                           "per_kind": {k: sum(c.kind == k for c in cases) for k in quality.LANGUAGES}, "settled": settled}  # fmt: skip

    def tokenize(text: str) -> list[str]:
        status, body = server.post("/tokenize", {"content": text, "with_pieces": True})
        if status != 200:
            raise RuntimeError(f"/tokenize answered {status}")
        return [
            p["piece"] if isinstance(p["piece"], str) else bytes(p["piece"]).decode("utf-8", "replace")
            for p in body["tokens"]
        ]

    try:
        for gate in gates:
            extra = {} if gate == "on" else {"minConfidence": 0}
            settings = {"model": model, "maxTokens": max_tokens, "modelServerTimeoutMs": TIMEOUT_MS, **extra}
            say(f"remote, unseen cursors: gate {gate}, {len(cases)} cases, in-process vs remote")
            settle = None if not settled or server.process is None else (server.process.pid,)
            out[f"gate_{gate}"] = compare(server.url, cases, settings, tokenize, gate, say, settle)
            if save is not None:
                save(out)
        if explain:
            from bench import remote_why

            for gate in gates:
                differ = out[f"gate_{gate}"]["differ"]
                if differ:
                    say(f"remote, unseen cursors: why {len(differ)} differ with the gate {gate} (bench.remote_why)")
                    found = remote_why.run(
                        server.url, [cases[r["case"]] for r in differ], model, max_tokens, gate == "on", say
                    )
                    for row, why in zip(differ, found):
                        row["why"] = why
            if save is not None:
                save(out)
    finally:
        server.stop()
    return out


def table(result: dict[str, Any]):
    from bench.report import pct

    body = []
    for gate in ("on", "off"):
        g = result.get(f"gate_{gate}")
        if g:
            body.append(
                [
                    gate,
                    f"{g['equal']}/{g['cases']}",
                    pct(g["equal_share"]),
                    f"{g['shown']['local']} / {g['shown']['remote']}",
                ]
            )
    return (f"remote: the same whole suggestion as in-process on unseen cursors ({result['cases']} cases, maxTokens {result['max_tokens']})",
            ["gate", "equal", "share", "shown local / remote"], body)  # fmt: skip


def differ_table(result: dict[str, Any]):
    body = []
    for gate in ("on", "off"):
        for r in (result.get(f"gate_{gate}") or {}).get("differ", []):
            s, why = r["split"], r.get("why") or {}
            gap = why.get("gap") or {}
            gaps = " / ".join("-" if gap.get(k) is None else f"{gap[k]:.4f}" for k in ("in_process", "server"))
            body.append([gate, str(r["case"]), r["kind"], repr(r["typed"]), str(s["token"]), repr(s["local"]), repr(s["remote"]),
                         why.get("cause") or "-", gaps, repr(r["local"]), repr(r["remote"])])  # fmt: skip
    return (
        "remote: where the differing suggestions part (first differing token, from the word's start)",
        [
            "gate",
            "case",
            "kind",
            "typed",
            "token",
            "in-process",
            "remote",
            "cause",
            "gap in-process / server (nats)",
            "in-process suggestion",
            "remote suggestion",
        ],
        body,
    )


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    checks: list[tuple[str, str, bool | None]] = []
    for gate in ("on", "off"):
        g = result.get(f"gate_{gate}")
        if g:
            checks.append(
                (
                    f"remote = in-process on unseen cursors, gate {gate}: >= 97%",
                    f"{g['equal']}/{g['cases']}",
                    g["equal_share"] >= 0.97,
                )
            )
    return checks
