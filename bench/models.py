"""`python -m bench --only models [--model A,B]`: the figures of the README's model table.

For each catalogue model (engine.catalogue; all of them by default), through the real server
started with `--model NAME` (so the name is resolved, the file joined and checked as a user's is):

- **first word right inside a word**, on the code cases (Python, JavaScript, C) and on the prose
  cases of tests.support.cases: the exact method with the gate off (`minConfidence` 0: this measures the
  model's choice, not the gate's) and no alternatives (they are computed after the suggestion and
  never change it). Deterministic at temperature 0, so machine load does not move it;
- **cold and warm request latency**: a word typed letter by letter into fresh documents of about
  214 and 838 tokens (tests.support.prompts; 2 per size, 5 letters each): the first keystroke on a document is
  cold; "typing" is the median of the others, as a user types the real word (some are answered
  from the suggestion already shown, at no engine cost); "warm" is the median of letters typed off
  the suggestion, each a request the engine computes with the prompt in its KV cache. The servers
  run at the same time and take turns document by document, so each model sees the same machine
  load: compare them side by side, not with figures from another run.

- **typing replay** (bench.replay): passages of code and prose typed in place through the model's
  server, the gate off and at the model's own default, beside llama.vim's own request on the *same*
  model on a llama-server (`/infill` where the model has FIM tokens, `/completion` with the text
  before the cursor otherwise), replayed by the same rule: characters saved, precision (accepted /
  shown), keys per character, keystroke median. Deterministic for ours; the peer samples as
  llama.vim does, with the server's seed fixed (bench.infill).

Also: each server's peak resident memory and the model's file size. Results: bench/results/models.json,
written again after each step, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import report
from bench.quality import run_server
from bench.stats import median
from engine import catalogue
from tests.support.cases import Case, fingerprint
from tests.support.lsp_client import Editor, LspClient, insert_text, peak_rss_mb
from tests.support.prompts import documents

CODE_KINDS = ("python", "javascript", "c")
LATENCY_SIZES = (214, 838)
OFF_KEYS = 3
REQUEST_TIMEOUT_S = 900.0  # a 1.5B cold request on a crowded 2-core machine took over 120 s


def names_of(value: str | None) -> list[str]:
    """`--model` as a list of catalogue names (all of them when empty); an unknown one exits."""
    wanted = [n.strip() for n in (value or "").split(",") if n.strip()] or list(catalogue.CATALOGUE)
    unknown = [n for n in wanted if catalogue.by_name(n) is None]
    if unknown:
        raise SystemExit(f"bench: unknown model {', '.join(unknown)}; the catalogue has {catalogue.names()}")
    return [catalogue.by_name(n).name for n in wanted]  # type: ignore[union-attr]


def _start(name: str, threads: int, max_tokens: int) -> Editor:
    log = Path(tempfile.gettempdir()) / f"cpc-lsp-bench-models-{name}-{os.getpid()}.log"
    client = LspClient(["--log-level", "warning", "--model", name], stderr_path=log)
    client.initialize({"maxTokens": max_tokens, "threads": threads}, wait_loaded=True, timeout=600)
    editor = Editor(client)
    warmup = f"file:///bench/models/warmup-{name}.txt"
    editor.open(warmup, "The server is ready when this sentence gets an ans")
    editor.inline(warmup, timeout=REQUEST_TIMEOUT_S)
    editor.close(warmup)
    return editor


def quality(editor: Editor, cases: list[Case], max_tokens: int) -> dict[str, Any]:
    """First word right on code and prose, the gate off (see the module docstring)."""
    settings = {"cpcLsp": {"maxTokens": max_tokens, "minConfidence": 0.0, "alternatives": 0}}
    editor.client.notify("workspace/didChangeConfiguration", {"settings": settings})
    started = time.perf_counter()
    outcomes = run_server(editor, cases, timeout=REQUEST_TIMEOUT_S)
    model = (editor.stats() or {}).get("model")
    groups = {
        "code": [o for o in outcomes if o.kind in CODE_KINDS],
        "prose": [o for o in outcomes if o.kind == "prose"],
    }
    found: dict[str, Any] = {"served_as": model, "seconds": time.perf_counter() - started}
    for group, chosen in [
        *groups.items(),
        *((k, [o for o in outcomes if o.kind == k]) for k in (*CODE_KINDS, "prose")),
    ]:
        right = sum(o.correct for o in chosen)
        found.setdefault(
            group, {"right": right, "cases": len(chosen), "share": right / len(chosen) if chosen else None}
        )
    found["begins_with_typed"] = sum(bool(o.begins_with_typed) for o in outcomes) / len(outcomes) if outcomes else None
    found["outcomes"] = [
        {"case": o.case, "kind": o.kind, "suggestion": o.suggestion, "correct": o.correct} for o in outcomes
    ]
    return found


UNLIKELY = "qxzjkvw"  # letters typed off the suggestion, so the engine must work (bench.latency's)


def _off_keystrokes(editor: Editor, uri: str, word: str, count: int) -> list[dict[str, Any]]:
    """`count` keystrokes after the partial `word` at the document's end, each a letter the shown
    suggestion did not expect: the prompt is in the KV cache (the word-boundary split keeps it),
    so each is a warm request the engine computes."""
    steps = []
    shown = insert_text(editor.inline(uri, timeout=REQUEST_TIMEOUT_S)) or ""
    for _ in range(count):
        expected = shown[len(word) : len(word) + 1]
        letter = next(c for c in UNLIKELY if c != expected)
        editor.type(uri, letter)
        word += letter
        reply = editor.inline(uri, timeout=REQUEST_TIMEOUT_S)
        shown = insert_text(reply) or ""
        stats = editor.stats() or {}
        steps.append({"ms": reply.ms, "decoded_tokens": stats.get("decodedTokens"), "engine_ms": stats.get("ms")})
    return steps


def _typed_keystrokes(editor: Editor, uri: str, base: str, word: str, keys: int) -> list[dict[str, Any]]:
    """The first `keys` letters of `word` typed after `base` in a fresh document, one request each."""
    editor.open(uri, base)
    steps = []
    carried = (editor.stats() or {}).get("carried", 0)
    for ch in word[:keys]:
        editor.type(uri, ch)
        reply = editor.inline(uri, timeout=REQUEST_TIMEOUT_S)
        stats = editor.stats() or {}
        was_carried = stats.get("carried", 0) > carried  # answered from the suggestion shown (lsp_server.carry)
        carried = stats.get("carried", carried)
        steps.append({
            "ms": reply.ms, "carried": was_carried, "suggestion": insert_text(reply),
            "prompt_tokens": stats.get("promptTokens"), "decoded_tokens": 0 if was_carried else stats.get("decodedTokens"),
        })  # fmt: skip
    return steps


def latency(
    editors: dict[str, Editor],
    count_tokens: Callable[[str], int],
    docs_per_size: int,
    keys: int,
    save: Callable[[dict[str, Any]], None] = lambda found: None,
) -> dict[str, Any]:
    """Per document: its word typed letter by letter (the first keystroke cold, the rest warm: as
    a user types, so some are answered from the suggestion already shown), then `OFF_KEYS` letters
    off the suggestion (warm requests the engine computes). The models take turns document by
    document, the order rotating; `save` gets the summary after every document."""
    steps: dict[str, dict[int, list[dict[str, Any]]]] = {n: {s: [] for s in LATENCY_SIZES} for n in editors}
    names = list(editors)
    found: dict[str, Any] = {}
    for size in LATENCY_SIZES:
        docs = documents(count_tokens, size, docs_per_size, min_word=7, first_line=40 + size // 4)
        for d, doc in enumerate(docs):
            for name in names[d % len(names) :] + names[: d % len(names)]:
                uri = f"file:///bench/models/{size}-{d}.py"
                editor = editors[name]
                typed = _typed_keystrokes(editor, uri, doc.base, doc.word, keys)
                off = _off_keystrokes(editor, uri, doc.word[:keys], OFF_KEYS)
                editor.close(uri)
                steps[name][size].append({"typed": typed, "off": off})
            found = _summary(steps)
            save(found)
    return found


def _summary(steps: dict[str, dict[int, list[dict[str, Any]]]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, by_size in steps.items():
        rows = []
        for size, docs in by_size.items():
            if not docs:
                continue
            rest = [k for s in docs for k in s["typed"][1:]]
            off = [k for s in docs for k in s["off"]]
            rows.append({
                "tokens": median([s["typed"][0]["prompt_tokens"] for s in docs if s["typed"][0]["prompt_tokens"] is not None]),
                "documents": len(docs),
                "cold_ms": median([s["typed"][0]["ms"] for s in docs]),
                "warm_typed_median_ms": median([k["ms"] for k in rest]),
                "warm_typed_keystrokes": len(rest),
                "warm_typed_answered_from_suggestion": sum(k["carried"] for k in rest),
                "warm_off_median_ms": median([k["ms"] for k in off]),
                "warm_off_keystrokes": len(off),
                "warm_decoded_prompt_tokens_max": max((k["decoded_tokens"] or 0 for k in [*rest, *off]), default=None),
                "steps": docs,
            })  # fmt: skip
        found[name] = rows
    return found


def replay(
    name: str,
    editor: Editor,
    threads: int,
    max_tokens: int,
    per_kind: int,
    chars: int,
    say: Callable[[str], None],
    save: Callable[[dict[str, Any]], None] = lambda found: None,
) -> dict[str, Any]:
    """The typing replay of `name` (see the module docstring): in place, the gate off and at its
    default, beside llama.vim's request on a llama-server with the same model and threads."""
    from bench import replay as replays
    from bench.infill import SEED_ARGS, InfillPeer
    from tests.support.cases import build_cases, check_cases
    from tests.support.llama_server import LlamaServer

    tuning = build_cases(50, 0)
    items = replays.passages(per_kind, replays.used_files(tuning, check_cases(50, tuning)), chars=chars)
    items = replays.interleaved(items)  # kinds in turn: a run cut short still has every kind
    base = {"maxTokens": max_tokens, "threads": threads}
    variants = {f"gate {k.split()[-1]}": {**base, **v} for k, v in replays.gate_variants("off,default").items()}
    server = LlamaServer(slots=1, model=name, threads=threads, extra_args=SEED_ARGS).start(600)
    peer = InfillPeer(server, slot=0)
    say(
        f"models: replay of {name}: {len(items)} passages, {sum(len(p.text) for p in items)} characters, peer {peer.endpoint}"
    )

    def partial(found: dict[str, Any]) -> None:
        save({**found, "table": replays.summarize(found["runs"]), "peer_endpoint": peer.endpoint})

    try:
        found = replays.run(editor, peer, items, max_tokens, variants, lambda m: say(f"models: {name} {m}"),
                            places=(True,), save=partial)  # fmt: skip
    finally:
        peer.close()
        server.stop()
    found["peer_endpoint"] = peer.endpoint
    found["threads"] = threads
    return found


def replay_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per model and who (gate off, gate default, peer): the replay's figures over all kinds."""

    def side(who: str) -> str:  # bench.replay names its variants "server lexicon off, gate off"
        return who if who == "peer" else "server " + who.split(", ")[-1].removeprefix("server ")

    rows = []
    for name, found in results.get("replay", {}).items():
        table = {side(r["who"]): r for r in found.get("table", []) if r["kind"] == "all"}
        cursors = {side(r["who"]): r for r in found.get("cursors") or replays_cursors(found)
                   if r["kind"] == "all" and r["cursor"] == "all"}  # fmt: skip
        peer = table.get("peer")
        off = table.get("server gate off")
        for who in ("server gate off", "server gate default", "peer"):
            r = table.get(who)
            if r is None:
                continue
            precision = cursors.get(who, {}).get("precision")
            rows.append({
                "model": name, "who": who, "peer_endpoint": found.get("peer_endpoint"), "chars": r["chars"],
                "passages": len({x["passage"] for x in found["runs"]}), "saved": r["not_typed"], "precision": precision,
                "keys_per_char": r["keys_per_char"], "median_ms": r["median_ms"],
                "saved_over_peer": None if who == "peer" or not peer else r["not_typed"] / peer["not_typed"],
                "saved_over_gate_off": r["not_typed"] / off["not_typed"] if off and off["not_typed"] else None,
                "precision_over_gate_off": (precision / cursors["server gate off"]["precision"]
                                            if precision and cursors.get("server gate off", {}).get("precision") else None),
            })  # fmt: skip
    return rows


def replays_cursors(found: dict[str, Any]) -> list[dict[str, Any]]:
    from bench.replay import by_cursor

    return by_cursor(found.get("runs", []))


def replay_table(results: dict[str, Any]) -> report.Table:
    rows = []
    for r in replay_rows(results):
        who = {"server gate off": "ours, gate off", "server gate default": "ours, gate at its default"}.get(r["who"])
        who = who or f"llama.vim's request ({r['peer_endpoint']})"
        rows.append([r["model"], who, f"{r['passages']} / {r['chars']:,}", report.pct(r["saved"]), report.pct(r["precision"]),
                     f"{r['keys_per_char']:.2f}", report.num(r["median_ms"]), report.times(r["saved_over_peer"]),
                     report.times(r["precision_over_gate_off"]) if r["who"] == "server gate default" else "",
                     report.times(r["saved_over_gate_off"]) if r["who"] == "server gate default" else ""])  # fmt: skip
    header = [
        "model",
        "who",
        "passages / chars",
        "chars saved",
        "precision",
        "keys/char",
        "median ms",
        "saved / peer's (target >= 1.25x)",
        "precision / gate off (>= 1.5x)",
        "saved / gate off (>= 0.9x)",
    ]
    return ("Typing replay per model, in place, beside llama.vim's request on the same model", header, rows)


def table(results: dict[str, Any]) -> report.Table:
    rows = []
    for name in results["models"]:
        entry = catalogue.by_name(name)
        q = results.get("quality", {}).get(name, {})
        lat = {row["tokens"]: row for row in results.get("latency", {}).get(name, [])}
        cells = [name, f"{entry.size / 1e6:.0f} MB" if entry else "-"]
        for group in ("code", "prose"):
            g = q.get(group)
            cells.append(f"{g['right']}/{g['cases']} ({100 * g['share']:.0f}%)" if g and g["cases"] else "-")
        for row in lat.values():
            cells += [
                report.num(row["cold_ms"], 0),
                report.num(row["warm_off_median_ms"], 0),
                report.num(row["warm_typed_median_ms"], 0),
            ]
        rows.append(cells)
    sizes = [f"{row['tokens']:.0f}" for row in next(iter(results.get("latency", {}).values()), [])]
    header = ["model", "file", "first word right, code", "first word right, prose"]
    for size in sizes:
        header += [f"cold ms ({size} tok)", f"warm ms ({size})", f"typing ms ({size})"]
    return ("Models (through the real server; latency medians side by side in this run)", header, rows)


def run(args, cases: list[Case], say: Callable[[str], None], out: Path) -> dict[str, Any]:
    from engine.local.llama import LlamaModel
    from engine.model_files import default_model_path

    names = names_of(args.model)
    threads = args.threads or 0
    results: dict[str, Any] = {
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "models": names,
        "threads": threads or os.cpu_count(),
        "machine": {"cpus": os.cpu_count(), "note": "shared with other processes: compare the models side by side"},
        "cases": {
            "count": len(cases),
            "code": sum(c.kind in CODE_KINDS for c in cases),
            "prose": sum(c.kind == "prose" for c in cases),
            "seed": args.seed,
            "per_kind": args.per_kind,
            "fingerprint": fingerprint(cases),
            "files": [c.file for c in cases],
        },  # fmt: skip
    }
    counter = LlamaModel(default_model_path(), vocab_only=True)  # one tokenizer sizes every model's documents

    def count_tokens(text: str) -> int:
        return len(counter.tokenize(text.encode("utf-8", "replace"), add_bos=True))

    editors: dict[str, Editor] = {}
    try:
        for name in names:
            say(f"models: starting the server with --model {name}")
            started = time.perf_counter()
            editors[name] = _start(name, threads, args.max_tokens)
            results.setdefault("start_s", {})[name] = time.perf_counter() - started
        if not args.no_latency:
            say(f"models: cold/warm latency, {', '.join(names)} taking turns")
            keys = 4 if args.quick else 5

            def save(found: dict[str, Any]) -> None:
                results["latency"] = found
                report.write_json(out, results)

            latency(editors, count_tokens, 1 if args.quick else 2, keys, save)
        for name, editor in editors.items() if not args.no_quality else ():
            say(f"models: quality of {name} ({len(cases)} cases)")
            results.setdefault("quality", {})[name] = quality(editor, cases, args.quality_max_tokens)
            report.write_json(out, results)
        for name, editor in editors.items() if not args.no_replay else ():

            def save_replay(found: dict[str, Any], name: str = name) -> None:
                results.setdefault("replay", {})[name] = found
                report.write_json(out, results)

            per_kind = 1 if args.quick else args.replay_per_kind
            chars = 60 if args.quick else args.replay_chars
            save_replay(replay(name, editor, threads or 1, args.max_tokens, per_kind, chars, say, save_replay))
        results["memory"] = {
            name: {"peak_rss_mib": peak_rss_mb(e.client.pid), "file_mib": catalogue.by_name(name).size / 2**20}  # type: ignore[union-attr]
            for name, e in editors.items()
        }
    finally:
        for editor in editors.values():
            editor.client.shutdown()
        counter.close()
    report.write_json(out, results)
    return results


def main(args, cases: list[Case], say: Callable[[str], None], out: Path) -> int:
    results = run(args, cases, say, out)
    print(report.render(table(results)))
    if results.get("replay"):
        print(report.render(replay_table(results)))
    print(f"note: threads {results['threads']}; the machine was shared: latency medians compare only within this run")
    print(f"results in {out}")
    return 0


def _peer_endpoint(found: dict[str, Any]) -> str | None:
    """The peer's endpoint recorded by the run, or by a run merged into it (merges can nest)."""
    for part in found.get("parts", []):
        endpoint = part.get("settings", {}).get("peer_endpoint") or _peer_endpoint(part)
        if endpoint:
            return endpoint
    return None


def replay_from(pairs: list[str], out: Path) -> dict[str, Any]:
    """The replay table from bench.replay result files ("NAME=FILE": a `python -m bench.replay
    --model NAME --peer infill` run, or its --merge), written to `out` as bench.models writes it."""
    results: dict[str, Any] = {"models": [], "replay": {}, "from": {}}
    for pair in pairs:
        name, _, path = pair.partition("=")
        found = json.loads(Path(path).read_text())
        found.setdefault("peer_endpoint", _peer_endpoint(found))
        results["models"].append(name)
        results["replay"][name] = {
            k: found[k] for k in ("runs", "table", "cursors", "places", "peer_endpoint") if k in found
        }
        results["from"][name] = path
    report.write_json(out, results)
    return results


if __name__ == "__main__":  # pragma: no cover - use `python -m bench --only models`
    if sys.argv[1:2] == ["replay-table"]:
        found = replay_from(sys.argv[2:], report.output_root() / "bench" / "results" / "models-replay.json")
        print(report.render(replay_table(found)))
        print(report.markdown(replay_table(found)))
    else:
        print(
            json.dumps(
                {
                    "usage": "python -m bench --only models [--model A,B] [--threads N] [--per-kind N]; "
                    "python -m bench.models replay-table NAME=REPLAY.json ..."
                }
            )
        )
