"""Short and new files: a name only the file beside it defines, typed halfway, that file open or not.

The moment a user most needs another file's names is when the file is new or short: a test, a
script that imports the module next to it, a header's first user. Six kinds of case, each a folder
with two files: a short file (3 to 5 lines) that imports the other one, and the other one, which
defines a made-up name no model can guess (`quantize_vertex_lattice`, `MAX_TURNIP_SPROCKETS`). The
short file is typed up to the name's middle; the request there is right when the suggestion's next
word is exactly the rest of the name (bench.crossfile.judge).

The other file is, in turn:

- **open**: open in the editor beside the short file (and on disk);
- **closed**: on disk only, so the server finds it only by the short file's import;
- **absent**: nowhere (the control: what the model guesses from the short file alone).

Each with the folder opened as the workspace (`rootUri`, `workspaceFolders`) and without one
(`rootUri` null: `nvim file.py` outside a project). Per case the first request is cold (an
unrelated documents first fill every sequence the server keeps); then a letter off the suggestion
is typed and the engine's answer must decode 0 prompt tokens (the context is kept inside a line).
The cold cost of the context is measured side by side in the same server on the "open" folders:
the same cold request with `extraContext` off and on, in alternating order, `--reps` times. The
server runs with its defaults (prefetch on, a memory budget): a short file's first answer waits for
the part of the other files' text that 300 ms evaluate (engine.Engine.first_prompt), the rest
decodes behind it; `--whole` turns that off (every request waits for its whole prompt, as a
server without prefetch, or on `modelServer`, does).

`python -m bench.shortfile` (in-process; `--model-server` through a llama-server on the same model;
`--server-path DIR` runs another checkout's server, e.g. main's, for the before row)
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import report
from bench.crossfile import Doc, ask, judge
from bench.machine import wait_until_idle
from bench.stats import median
from tests.support.lsp_client import LspClient

WORK = Path("/tmp/cpc-lsp-bench-shortfile")
STATES = ("open", "closed", "absent")
MODES = ("workspace", "no folder")
LANGUAGES = {".py": "python", ".js": "javascript", ".c": "c", ".h": "c"}
COMMENTS = {".py": "# {}\n", ".js": "// {}\n", ".c": "/* {} */\n"}  # a first line that makes a text new


@dataclass(frozen=True)
class Case:
    kind: str  # what the name is
    folder: str
    other: str  # the file that defines the name
    other_text: str
    short: str  # the short file, typed
    short_text: str  # its whole text; the name is typed up to `typed` letters
    name: str
    typed: int

    @property
    def cursor(self) -> int:
        return self.short_text.index(self.name) + self.typed


GEOMETRY = '''"""Small helpers for meshes."""


def load_mesh_points(path):
    with open(path) as handle:
        return [tuple(map(float, line.split()[1:4])) for line in handle if line.startswith("v ")]


def quantize_vertex_lattice(points, step):
    """Snap every point to a lattice of `step`."""
    return [tuple(round(c / step) * step for c in p) for p in points]


def bounding_corners(points):
    xs, ys, zs = zip(*points)
    return (min(xs), min(ys), min(zs)), (max(xs), max(ys), max(zs))


def weld_close_points(points, tolerance=1e-6):
    seen = {}
    for p in points:
        seen.setdefault(tuple(round(c / tolerance) for c in p), p)
    return list(seen.values())
'''

LEDGER = '''"""A ledger of spools."""


class SpoolLedger:
    def __init__(self, region):
        self.region = region
        self.spools = []
        self.pending_wobble_quota = 0
        self.drained_at = None

    def refill(self, count):
        self.spools.extend(range(count))
        self.pending_wobble_quota += count

    def drain(self, when):
        self.spools.clear()
        self.drained_at = when
'''

TURNIPS = """// A queue of turnips, and what is done to it.
'use strict'

function openQueue (cellar) {
  return { cellar, items: [], sealed: false }
}

function marshalTurnipQueue (queue, opts = {}) {
  const limit = opts.limit || queue.items.length
  return queue.items.slice(0, limit).map((t) => ({ ...t, cellar: queue.cellar }))
}

function sealQueue (queue) {
  queue.sealed = true
  return queue
}

module.exports = { openQueue, marshalTurnipQueue, sealQueue }
"""

CONFIG = """// Limits of the sprocket rack.
export const RACK_NAME = 'north'
export const MAX_TURNIP_SPROCKETS = 12
export const MIN_SPACING_MM = 4
export const DEFAULT_COLOUR = 'ochre'

export function describeRack () {
  return `${RACK_NAME}: ${MAX_TURNIP_SPROCKETS} sprockets`
}
"""

VEXEL = """#ifndef VEXEL_H
#define VEXEL_H

#include <stddef.h>

struct vexel_bundle {
    const char *name;
    size_t count;
    int *pins;
};

struct vexel_bundle *vexel_open_bundle(const char *name);
int vexel_refract_bundle(struct vexel_bundle *bundle, int angle);
void vexel_splay_moraine(struct vexel_bundle *bundle, size_t width);
void vexel_close_bundle(struct vexel_bundle *bundle);

#endif
"""

CASES = (
    Case("Python function", "py_function", "geometry_tools.py", GEOMETRY, "snap.py",
         "import geometry_tools as gt\n\npts = gt.load_mesh_points(\"bunny.obj\")\nsnapped = gt.quantize_vertex_lattice(pts, 0.1)\n",
         "quantize_vertex_lattice", 12),
    Case("Python attribute", "py_attribute", "ledger.py", LEDGER, "report.py",
         "from ledger import SpoolLedger\n\nbook = SpoolLedger(\"north\")\nbook.refill(12)\nprint(book.pending_wobble_quota)\n",
         "pending_wobble_quota", 10),
    Case("JavaScript function", "js_function", "turnips.js", TURNIPS, "main.js",
         "const tq = require('./turnips')\n\nconst queue = tq.openQueue('cellar')\nconst ready = tq.marshalTurnipQueue(queue)\n",
         "marshalTurnipQueue", 9),
    Case("JavaScript constant", "js_constant", "config.js", CONFIG, "fits.js",
         "import * as cfg from './config.js'\n\nexport function fits (n) {\n  return n <= cfg.MAX_TURNIP_SPROCKETS\n}\n",
         "MAX_TURNIP_SPROCKETS", 10),
    Case("C function", "c_function", "vexel.h", VEXEL, "main.c",
         "#include \"vexel.h\"\n\nint main(void) {\n    struct vexel_bundle *b = vexel_open_bundle(\"sky\");\n"
         "    int n = vexel_refract_bundle(b, 30);\n", "vexel_refract_bundle", 10),
    Case("C function, another", "c_function2", "vexel.h", VEXEL, "spread.c",
         "#include \"vexel.h\"\n\nvoid spread(struct vexel_bundle *b) {\n    vexel_splay_moraine(b, 8);\n",
         "vexel_splay_moraine", 10),
)  # fmt: skip


def lay_out(work: Path, state: str) -> Path:
    """The cases' folders for one state, fresh: the short file always (the editor has it), the
    other one on disk unless absent."""
    root = work / state
    shutil.rmtree(root, ignore_errors=True)
    for case in CASES:
        folder = root / case.folder
        folder.mkdir(parents=True)
        (folder / case.short).write_text(case.short_text[: case.cursor])
        if state != "absent":
            (folder / case.other).write_text(case.other_text)
    return root


def start(root: Path, mode: str, settings: dict[str, Any], code: Path | None) -> LspClient:
    client = LspClient(["--log-level", "warning"], code=code)
    capabilities = {
        "general": {"positionEncodings": ["utf-16"]},
        "textDocument": {"inlineCompletion": {}, "synchronization": {}},
    }
    folders = (
        {"rootUri": root.as_uri(), "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}]}
        if mode == "workspace"
        else {"rootUri": None}
    )
    client.call("initialize", {"processId": None, "capabilities": capabilities, **folders,
                               "initializationOptions": {"cpcLsp": settings}})  # fmt: skip
    client.notify("initialized", {})
    message = client.wait_loaded(timeout=300)
    if not message.startswith("loaded"):
        raise RuntimeError(message)
    return client


EVICTING = 8  # unrelated documents asked in turn: more than the sequences the default memory budget keeps


def cold_reset(client: LspClient) -> None:
    """Nothing of the cases left decoded: unrelated documents fill every sequence the server keeps."""
    for n in range(EVICTING):
        text = f"Nothing in sentence number {n} is like the cases' files; it is here to fill the cache, so the next is"
        unrelated = Doc(client, f"untitled:unrelated-{n}", text, "plaintext")
        ask(client, unrelated, len(unrelated.text))
        unrelated.close()


def run_case(client: LspClient, root: Path, case: Case, state: str, busy: list[int]) -> dict[str, Any]:
    """The cold request at the name's middle, then a letter off the suggestion (a warm one); the
    short file is opened once the processes `busy` (the server, its llama-server) are idle."""
    folder = root / case.folder
    cold_reset(client)
    other = (
        Doc(client, (folder / case.other).as_uri(), case.other_text, LANGUAGES[Path(case.other).suffix])
        if state == "open"
        else None
    )
    wait_until_idle(busy)
    text = case.short_text[: case.cursor]
    doc = Doc(client, (folder / case.short).as_uri(), text, LANGUAGES[Path(case.short).suffix])
    try:
        prompt: list[int] = []
        shown, ms, decoded = ask(client, doc, case.cursor, prompt)
        right = judge(shown, case.short_text, case.cursor)
        typed = case.name[: case.typed]
        ahead = shown[len(typed) : len(typed) + 1] if shown and shown.startswith(typed) else ""
        letter = next(c for c in "qzxj" if c != ahead)  # off the suggestion: the engine answers
        doc.set(text + letter)
        _, warm_ms, warm_decoded = ask(client, doc, case.cursor + 1)
    finally:
        doc.close()
        if other is not None:
            other.close()
    return {"kind": case.kind, "state": state, "right": right, "shown": (shown or "")[:48], "ms": ms,
            "decoded": decoded, "prompt": prompt[0] if prompt else None, "warm_ms": warm_ms, "warm_decoded": warm_decoded}  # fmt: skip


def cold_pairs(
    client: LspClient, root: Path, settings: dict[str, Any], reps: int, busy: list[int]
) -> list[dict[str, Any]]:
    """Per case, the cold request with the context off and on (the other file open), alternating
    which goes first, `reps` times: the context's cost side by side, in one server. Each request's
    short file starts with a comment line of its own, so nothing of it is in the KV cache (`cold_reset`
    alone leaves some: short documents take few of the memory budget's tokens). The other file is
    opened first and the processes `busy` let go idle, as for a file open a while; the short file is asked at
    once, so its own prefetch (on opening) may decode part of its prompt, which the request waits
    for. Per pair, the answer's time and, of it, the time before generating (the answer's time less
    the engine's generation): the context's cost without the longer suggestion it may bring."""
    out = []
    for rep in range(reps):
        for case in CASES:
            folder = root / case.folder
            row: dict[str, Any] = {"kind": case.kind, "rep": rep}
            for extra in (False, True) if rep % 2 == 0 else (True, False):
                client.notify(
                    "workspace/didChangeConfiguration", {"settings": {"cpcLsp": {**settings, "extraContext": extra}}}
                )
                cold_reset(client)
                other = Doc(client, (folder / case.other).as_uri(), case.other_text, LANGUAGES[Path(case.other).suffix])
                wait_until_idle(busy)  # open a while: its own prefetch is not in the short file's time
                fresh = COMMENTS[Path(case.short).suffix].format(
                    f"draft {rep} {'with' if extra else 'without'} context"
                )
                doc = Doc(
                    client,
                    (folder / case.short).as_uri(),
                    fresh + case.short_text[: case.cursor],
                    LANGUAGES[Path(case.short).suffix],
                )
                prompt: list[int] = []
                try:
                    _, ms, decoded = ask(client, doc, len(fresh) + case.cursor, prompt)
                    stats = client.call("cpcLsp/stats", None) or {}
                finally:
                    doc.close()
                    other.close()
                key = "on" if extra else "off"
                generating = (stats.get("ms") or 0.0) - (stats.get("promptMs") or 0.0)
                row.update({f"{key}_ms": ms, f"{key}_prompt": prompt[0] if prompt else None, f"{key}_decoded": decoded,
                            f"{key}_to_generation_ms": ms - generating, f"{key}_generated": stats.get("generatedTokens")})  # fmt: skip
            out.append(row)
    client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": settings}})
    return out


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        cases = run["cases"]
        warm = [c["warm_decoded"] for c in cases if c["warm_decoded"] is not None]
        rows.append({"label": run["label"], "mode": run["mode"], "state": run["state"], "right": sum(c["right"] for c in cases),
                     "cases": len(cases), "which": ", ".join(c["kind"] for c in cases if c["right"]),
                     "prompt_median": median([c["prompt"] for c in cases if c["prompt"] is not None]),
                     "warm_zero": sum(d == 0 for d in warm), "warm": len(warm)})  # fmt: skip
    return rows


def cost_rows(pairs: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    rows = []
    for kind in dict.fromkeys(p["kind"] for p in pairs):
        mine = [p for p in pairs if p["kind"] == kind]
        rows.append({"label": label, "kind": kind, "off_prompt": mine[0]["off_prompt"], "on_prompt": mine[0]["on_prompt"],
                     "off_ms": median([p["off_ms"] for p in mine]), "on_ms": median([p["on_ms"] for p in mine]),
                     "extra_ms": median([p["on_ms"] - p["off_ms"] for p in mine]),
                     "extra_to_generation_ms": median([p["on_to_generation_ms"] - p["off_to_generation_ms"] for p in mine]),
                     "generated": f"{median([p['off_generated'] for p in mine]):.0f} / {median([p['on_generated'] for p in mine]):.0f}",
                     "reps": len(mine)})  # fmt: skip
    return rows


def tables(rows: list[dict[str, Any]], costs: list[dict[str, Any]]) -> list[report.Table]:
    right = ("short files: a made-up name from the file beside it, typed halfway; right = the rest of the name",
             ["run", "workspace", "other file", "right", "which", "prompt tokens (median)", "warm keys with 0 decoded"],
             [[r["label"], r["mode"], r["state"], f"{r['right']} of {r['cases']}", r["which"] or "-",
               report.num(r["prompt_median"], 0), f"{r['warm_zero']} of {r['warm']}"] for r in rows])  # fmt: skip
    cost = ("the cold request with the context off and on (other file open, workspace), medians over reps, ms",
            ["run", "case", "prompt off", "prompt on", "ms off", "ms on", "extra ms (median of pairs)",
             "of it before generating", "generated off / on", "reps"],
            [[c["label"], c["kind"], report.num(c["off_prompt"], 0), report.num(c["on_prompt"], 0), report.num(c["off_ms"], 0),
              report.num(c["on_ms"], 0), report.num(c["extra_ms"], 0), report.num(c["extra_to_generation_ms"], 0),
              c["generated"], str(c["reps"])] for c in costs])  # fmt: skip
    return [right, cost]


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.shortfile`: short files, the other file open, closed and absent."""
    parser = argparse.ArgumentParser(prog="python -m bench.shortfile", description=main.__doc__.split(":")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="catalogue name or path (the default code model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=4, help="cold off/on pairs per case (0: none)")
    parser.add_argument("--modes", default=",".join(MODES), help="workspace, no folder")
    parser.add_argument("--states", default=",".join(STATES), help="open, closed, absent")
    parser.add_argument(
        "--model-server", action="store_true", help="through a llama-server (modelServer) on the same model"
    )
    parser.add_argument("--server-path", type=Path, default=None, help="run the server's code from this checkout")
    parser.add_argument(
        "--whole",
        action="store_true",
        help="every request waits for its whole prompt (prefetch off, memoryBudgetMib 0: no lean first answer)",
    )
    parser.add_argument("--label", default="this branch")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "shortfile.json")
    args = parser.parse_args(argv)
    say = lambda m: print(f"[shortfile] {m}", file=sys.stderr, flush=True)  # noqa: E731
    settings: dict[str, Any] = {"model": args.model, "threads": args.threads, "maxTokens": 16, "minConfidence": 0,
                                "alternatives": 0, "extraContext": True}  # fmt: skip
    if args.whole:
        settings.update({"memoryBudgetMib": 0, "prefetch": False})  # no second sequence, no prefetch
    server = None
    if args.model_server:
        from tests.support.llama_server import LlamaServer

        server = LlamaServer(slots=1, model=args.model, threads=args.threads, extra_args=("--cache-ram", "0")).start()
        settings["modelServer"] = server.url
        settings["modelServerTimeoutMs"] = 60_000
    label = args.label + (", modelServer" if args.model_server else "") + (", whole prompts" if args.whole else "")
    runs: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    try:
        for mode in args.modes.split(","):
            for state in args.states.split(","):
                root = lay_out(args.work / mode.replace(" ", "-"), state)
                client = start(root, mode, settings, args.server_path)
                try:
                    busy = [client.pid] + ([server.process.pid] if server is not None and server.process else [])
                    cases = [run_case(client, root, case, state, busy) for case in CASES]
                    if mode == "workspace" and state == "open" and args.reps:
                        pairs = cold_pairs(client, root, settings, args.reps, busy)
                finally:
                    client.shutdown()
                runs.append({"label": label, "mode": mode, "state": state, "cases": cases})
                say(f"{label} {mode} {state}: {sum(c['right'] for c in cases)} of {len(cases)} right "
                    f"({', '.join(c['shown'].split('(')[0] for c in cases)})")  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    rows, costs = summarize(runs), cost_rows(pairs, label) if pairs else []
    for table in tables(rows, costs):
        print(report.render(table))
    report.write_json(args.out, {"settings": {**settings, "modelServer": bool(args.model_server), "reps": args.reps,
                                              "server_path": str(args.server_path or "")},
                                 "table": rows, "costs": costs, "runs": runs, "pairs": pairs})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
