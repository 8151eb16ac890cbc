"""`python -m bench.soak [--quick]`: a long session through the real server, watched for leaks.

2,000 keystrokes (quick: 300) are typed across four documents (an email, notes, Python code and
a 200 KB report), one character per `didChange` + `textDocument/inlineCompletion`, the way an
editor sends them: five words in one document before moving to the next, mostly waiting for
each answer, every seventh word in a burst without waiting, every 50th request cancelled at once,
every 400 keystrokes a document closed and reopened.
After a warm-up (a visit to every document and the known prompts below, or a tenth of the
keystrokes if that is more), the server process is sampled once per segment of keystrokes:

- peak resident set (`VmHWM`, reset per segment through /proc/PID/clear_refs where the kernel
  allows it, else the largest `VmRSS` seen after each keystroke): the last segments' peak may
  exceed the first segment's by at most 5%;
- open file descriptors (/proc/PID/fd) and threads (/proc/PID/task): no more at the end than
  right after the warm-up;
- answers: every answer that arrives is for the text it was asked about (its range ends at that
  keystroke's cursor and it begins with the partial word), and at every segment end known prompts
  are completed right (`…the draft yest` → "yesterday", `def add(a, b): ret` → "return").

Prints a table per segment and the checks, returns the numbers (`run(quick) -> dict`), and exits
non-zero from the command line when a check fails. Nothing here is compared with a wall-clock
target; times are reported for information only.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from lsp_server.split import split
from tests.support.lsp_client import Editor, LspClient

FULL_KEYSTROKES, QUICK_KEYSTROKES = 2000, 300
MAX_RSS_GROWTH = 0.05
WORDS_PER_VISIT, BURST_EVERY_WORD, CANCEL_EVERY, REOPEN_EVERY = 5, 7, 50, 400
WAIT_S = 300.0  # only so a broken server cannot hang the run

TYPED = {
    "email.txt": (
        "Hi Priya,\n\n",
        "Thanks for the update on the budget. I read the draft yesterday and have a few notes before "
        "we send it to the board. The numbers for the second quarter look right, but the summary "
        "should say why travel went up. Could you also add the hiring plan for the support team? "
        "I can review the final version on Thursday morning.\n\nBest regards,\nSam\n\n",
    ),
    "notes.md": (
        "# Weekly notes\n\n",
        "- Launch review moved to next Tuesday.\n- Support asked for two more people before the "
        "holidays.\n- Sales wants the new pricing page live by the end of the month.\n- Follow up "
        "with the design team about the onboarding screens.\n",
    ),
    "util.py": (
        "import os\n\n\n",
        "def read_config(path):\n    with open(path) as handle:\n        return handle.read()\n\n\n"
        "def add(a, b):\n    return a + b\n\n\ndef environment(name, default=None):\n    value = "
        "os.environ.get(name)\n    return default if value is None else value\n\n\n",
    ),
    "report.txt": (None, "The committee met again this week and agreed to publish the report in May. "),
}
SPOT_CHECKS = [
    ("Thanks for sending over the draft yest", "yesterday"),
    ("def add(a, b):\n    ret", "return"),
]


def _report_base(size: int = 200_000) -> str:
    rng = random.Random(11)
    words = ("the committee reviewed the budget the schedule and the risks of the project while the "
             "team asked for more time to test the release before the launch").split()  # fmt: skip
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(6, 16))).capitalize() + "."
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n\n"


# --- the server process, from /proc -----------------------------------------------------------


def _status(pid: int, key: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB -> MiB
    except OSError:
        return None
    return None


def _count(pid: int, what: str) -> int | None:
    try:
        return len(list(Path(f"/proc/{pid}/{what}").iterdir()))
    except OSError:
        return None


def _reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to clear_refs); False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# --- the session --------------------------------------------------------------------------------


class Session:
    def __init__(self, client: LspClient, keystrokes: int) -> None:
        self.client = client
        self.editor = Editor(client)
        self.texts: dict[str, str] = {}
        self.sources = {uri: text for uri, (_, text) in self._docs().items()}
        self.cursor = {uri: 0 for uri in self.sources}  # how far into its source each document is typed
        self.keystrokes = keystrokes
        self.done = 0
        self.words = 0
        self.answers = {"total": 0, "shown": 0, "empty": 0, "cancelled": 0, "errors": 0, "wrong": 0}
        self.latencies: list[float] = []
        self.rss_seen = 0.0  # largest VmRSS since the last sample (fallback peak)

    @staticmethod
    def _docs() -> dict[str, tuple[str | None, str]]:
        return {f"file:///soak/{name}": base for name, base in TYPED.items()}

    def open_all(self) -> None:
        for uri, (base, _) in self._docs().items():
            self.texts[uri] = _report_base() if base is None else base
            self.editor.open(uri, self.texts[uri])

    def reopen(self, uri: str) -> None:
        self.editor.close(uri)
        self.editor.open(uri, self.texts[uri])

    def _next_word(self, uri: str) -> str:
        source, at = self.sources[uri], self.cursor[uri]
        end = at
        while end < len(source) and not source[end].isspace():
            end += 1
        while end < len(source) and source[end].isspace():
            end += 1
        self.cursor[uri] = end % len(source)  # the source starts over when typed to its end
        return source[at:end]

    def _check(self, reply: Any, text: str, position: dict[str, int]) -> None:
        self.answers["total"] += 1
        if reply.error is not None:
            key = "cancelled" if reply.error.get("code") == -32800 else "errors"
            self.answers[key] += 1
            return
        items = reply.result or []
        if not items:
            self.answers["empty"] += 1
            return
        self.answers["shown"] += 1
        item = items[0]
        word = split(text, len(text)).word
        if item["range"]["end"] != position or not item["insertText"].startswith(word):
            self.answers["wrong"] += 1

    def _sample(self) -> None:
        rss = _status(self.client.pid, "VmRSS")
        if rss is not None:
            self.rss_seen = max(self.rss_seen, rss)

    def type_words(self, until: int, words: int = 0) -> None:
        """Type word by word, a visit to each document in turn, until `until` keystrokes (and at
        least `words` words in all) are done."""
        uris = list(self.sources)
        while self.done < until or self.words < words:
            uri = uris[(self.words // WORDS_PER_VISIT) % len(uris)]
            self.words += 1
            burst = self.words % BURST_EVERY_WORD == 0
            pending = []
            for ch in self._next_word(uri):
                if self.done >= until and self.words >= words:
                    break
                self.editor.type(uri, ch)
                self.texts[uri] += ch
                self.done += 1
                position = self.editor.end(uri)
                started = time.perf_counter()
                msg_id, future = self.client.send("textDocument/inlineCompletion", self.editor.inline_params(uri))
                if self.done % CANCEL_EVERY == 0:
                    self.client.notify("$/cancelRequest", {"id": msg_id})
                if self.done % REOPEN_EVERY == 0:
                    self.reopen(uri)
                if burst:
                    pending.append((future, self.texts[uri], position))
                    continue
                reply = future.result(WAIT_S)
                self.latencies.append((time.perf_counter() - started) * 1000)
                self._check(reply, self.texts[uri], position)
                self._sample()
            for future, text, position in pending:
                self._check(future.result(WAIT_S), text, position)
            self._sample()

    def spot_checks(self, round_: int) -> tuple[int, int]:
        ok = 0
        for i, (text, expected) in enumerate(SPOT_CHECKS):
            uri = f"file:///soak/spot-{round_}-{i}.txt"
            self.editor.open(uri, text)
            reply = self.editor.inline(uri, timeout=WAIT_S)
            items = reply.result if reply.error is None else None
            ok += bool(items) and expected in items[0]["insertText"]
            self.editor.close(uri)
        return ok, len(SPOT_CHECKS)


def run(
    quick: bool,
    keystrokes: int | None = None,
    threads: int = 0,
    max_tokens: int = 8,
    context_tokens: int = 2048,
    log: Path | None = None,
) -> dict[str, Any]:
    """The soak: returns its numbers, checks and whether they passed (`ok`)."""
    keystrokes = keystrokes or (QUICK_KEYSTROKES if quick else FULL_KEYSTROKES)
    log = log or Path(tempfile.gettempdir()) / "cpc-lsp-soak-server.log"
    started = time.perf_counter()
    client = LspClient(["--log-level", "warning"], stderr_path=log)
    rows: list[dict[str, Any]] = []
    try:
        client.initialize({"cpcLsp": {"maxTokens": max_tokens, "threads": threads, "contextTokens": context_tokens}})
        session = Session(client, keystrokes)
        session.open_all()
        _say(f"warming up ({len(TYPED)} documents, maxTokens {max_tokens}, threads {threads or 'all'})")
        session.type_words(keystrokes // 10, words=WORDS_PER_VISIT * len(TYPED) + 1)  # every document once
        spot_ok, spot_total = session.spot_checks(0)
        warmup = session.done
        segment = max(-(-(keystrokes - warmup) // 6), 20)  # six segments, the last one full
        pid = client.pid
        resettable = _reset_peak(pid)
        base = {"fds": _count(pid, "fd"), "threads": _count(pid, "task"), "rss": _status(pid, "VmRSS")}
        session.rss_seen = base["rss"] or 0.0
        while session.done < keystrokes or not rows:  # at least one measured segment
            session.type_words(min(max(keystrokes, warmup + segment), session.done + segment))
            ok, total = session.spot_checks(len(rows) + 1)
            spot_ok, spot_total = spot_ok + ok, spot_total + total
            peak = _status(pid, "VmHWM") if resettable else session.rss_seen
            rows.append({
                "keystrokes": session.done,
                "peak_rss_mib": peak,
                "rss_mib": _status(pid, "VmRSS"),
                "fds": _count(pid, "fd"),
                "threads": _count(pid, "task"),
                "spot_ok": ok,
                "spot_total": total,
            })  # fmt: skip
            resettable = resettable and _reset_peak(pid)
            session.rss_seen = _status(pid, "VmRSS") or 0.0
            _say(f"{session.done}/{keystrokes} keystrokes, peak RSS {report.num(peak)} MiB, "
                 f"{time.perf_counter() - started:.0f} s")  # fmt: skip
        answers, latencies = session.answers, sorted(session.latencies)
    finally:
        client.shutdown()
    exit_code = client.process.returncode
    server_log = log.read_text(errors="replace") if log.exists() else ""

    first, later = rows[0]["peak_rss_mib"], [r["peak_rss_mib"] for r in rows[1:]] or [rows[0]["peak_rss_mib"]]
    growth = None if not first or None in later else max(later) / first - 1
    result: dict[str, Any] = {
        "keystrokes": session.done,
        "warmup_keystrokes": warmup,
        "documents": len(TYPED),
        "settings": {"maxTokens": max_tokens, "threads": threads, "contextTokens": context_tokens},
        "peak_reset_per_segment": resettable,
        "after_warmup": base,
        "segments": rows,
        "rss_growth": growth,
        "fds_end": rows[-1]["fds"],
        "threads_end": rows[-1]["threads"],
        "answers": answers,
        "spot_checks": {"ok": spot_ok, "total": spot_total},
        "latency_ms": {
            "median": latencies[len(latencies) // 2] if latencies else None,
            "p95": latencies[int(len(latencies) * 0.95)] if latencies else None,
            "waited_keystrokes": len(latencies),
        },
        "server_exit_code": exit_code,
        "server_log": {
            "path": str(log),
            "errors": server_log.count(" ERROR "),
            "tracebacks": server_log.count("Traceback"),
        },
        "seconds": time.perf_counter() - started,
    }
    result["checks"] = _checks(result)
    result["ok"] = all(ok for _, _, ok in result["checks"])
    return result


def _say(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


def _checks(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    answers, base = r["answers"], r["after_warmup"]
    every = answers["total"] == r["keystrokes"]
    growth = r["rss_growth"]
    return [
        (f"peak RSS after warm-up grows <= {MAX_RSS_GROWTH:.0%}", "-" if growth is None else f"{growth:+.1%}",
         growth is not None and growth <= MAX_RSS_GROWTH),
        ("no file descriptors leak", f"{base['fds']} -> {r['fds_end']}", r["fds_end"] <= base["fds"]),
        ("no threads leak", f"{base['threads']} -> {r['threads_end']}", r["threads_end"] <= base["threads"]),
        ("every keystroke answered", f"{answers['total']}/{r['keystrokes']}", every),
        ("no answer for an older text", f"{answers['wrong']} wrong", answers["wrong"] == 0),
        ("no errors other than cancelled", f"{answers['errors']}", answers["errors"] == 0),
        ("known prompts still right", f"{r['spot_checks']['ok']}/{r['spot_checks']['total']}",
         r["spot_checks"]["ok"] == r["spot_checks"]["total"]),
        ("no tracebacks in the server log", str(r["server_log"]["tracebacks"]), r["server_log"]["tracebacks"] == 0),
        ("clean exit", str(r["server_exit_code"]), r["server_exit_code"] == 0),
    ]  # fmt: skip


def tables(r: dict[str, Any]) -> list[report.Table]:
    """The segment table and the checks, in bench's table format."""
    header = ["keystrokes", "peak RSS MiB", "RSS MiB", "fds", "threads", "spot checks"]
    body = [[report.num(row["keystrokes"]), report.num(row["peak_rss_mib"]), report.num(row["rss_mib"]),
             report.num(row["fds"]), report.num(row["threads"]), f"{row['spot_ok']}/{row['spot_total']}"]
            for row in r["segments"]]  # fmt: skip
    base = r["after_warmup"]
    body.insert(0, [f"{r['warmup_keystrokes']} (warm-up)", "-", report.num(base["rss"]), report.num(base["fds"]),
                    report.num(base["threads"]), "-"])  # fmt: skip
    a, lat = r["answers"], r["latency_ms"]
    title = (f"soak: {r['keystrokes']:,} keystrokes over {r['documents']} documents, maxTokens "
             f"{r['settings']['maxTokens']}; answers {a['shown']} shown, {a['empty']} empty, {a['cancelled']} "
             f"cancelled; waited keystroke median {report.num(lat['median'], 0)} ms, p95 {report.num(lat['p95'], 0)} ms")  # fmt: skip
    checks = [[name, value, "PASS" if ok else "MISS"] for name, value, ok in r["checks"]]
    return [(title, header, body), ("soak checks", ["check", "measured", "result"], checks)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_KEYSTROKES} keystrokes instead of {FULL_KEYSTROKES}"
    )
    parser.add_argument("--keystrokes", type=int, default=None, help="override the number of keystrokes")
    parser.add_argument("--threads", type=int, default=0, help="the server's threads setting (0: all cores)")
    parser.add_argument("--max-tokens", type=int, default=8, help="the server's maxTokens setting")
    parser.add_argument("--context-tokens", type=int, default=2048, help="the server's contextTokens setting")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    result = run(args.quick, args.keystrokes, args.threads, args.max_tokens, args.context_tokens)
    for table in tables(result):
        print(report.render(table), end="\n\n")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
