"""Typing replay: real text typed keystroke by keystroke through the real server, beside the peer.

A *passage* is a few lines cut from a real file (files the quality sets do not use, `sources`).
It is typed one character per keystroke, either at the *end* of the document (the document is
the file up to the passage) or *in place* (the rest of the file stays after the cursor). After
every keystroke the server is asked for a suggestion at the cursor; when the suggestion's next
word is exactly right (it ends where the passage's word ends), the simulated user accepts it with
one key (one didChange inserting it) and asks again.

The peer, llama-cpp-python's own `create_completion` with its prefix cache, gets the text before
the cursor with the partial word in it (what it would be given as a plain completion), the same
token budget, temperature 0 and a line-break stop, and is replayed by the same rule. Its
suggestion depends only on the text before the cursor, so one peer replay per passage serves
both placements.

Reported per language: the share of the passage's characters the user did not type (accepted),
the keys pressed per character (typed characters plus accept keys), and request latency.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import report
from bench.quality import LANGUAGES
from bench.stats import median, ratio
from lsp_server.confidence_gate import CURSOR_CLASSES, cursor_class
from lsp_server.split import is_word_char, split
from tests.support.cases import KINDS, Case, one_per_file, read_text
from tests.support.lsp_client import Editor, insert_text, insert_texts

PASSAGE_CHARS = 240  # about three lines of code or two sentences
CONTEXT_BEFORE = 1_500  # the document starts at a line this far before the passage
CONTEXT_AFTER = 1_500  # in place: this much of the file stays after the passage


@dataclass(frozen=True)
class Passage:
    kind: str
    file: str
    start: int  # where the passage starts in the file (a line start)
    end: int  # where it ends (a line end)
    before: str  # the document before the passage
    text: str  # what gets typed
    after: str  # the rest of the file after it (in place)


def passages(per_kind: int, used: set[str], seed: int = 0, chars: int = PASSAGE_CHARS) -> list[Passage]:
    """`per_kind` passages per kind, one per file, from files not in `used` (the quality sets')."""
    return one_per_file(
        KINDS, per_kind, f"cpc-lsp replay {seed}", used, lambda rng, kind, path: _passage_in(rng, kind, path, chars)
    )


def _passage_in(rng: random.Random, kind: str, path: Path, chars: int) -> Passage | None:
    """Whole lines of about `chars` characters, with some words in them, past the file's start."""
    text = read_text(path)
    if text is None or len(text) < CONTEXT_BEFORE + 2 * chars:
        return None
    at = rng.randrange(CONTEXT_BEFORE // 2, len(text) - 2 * chars)
    start = text.find("\n", at) + 1
    end = text.find("\n", start + chars)
    if start <= 0 or end < 0 or end - start > 2 * chars:
        return None
    passage = text[start:end]
    if sum(ch.isalpha() for ch in passage) < len(passage) // 3 or "\t" in passage and kind == "prose":
        return None
    first = text.find("\n", max(0, start - CONTEXT_BEFORE)) + 1 if start > CONTEXT_BEFORE else 0
    after = text[end : end + CONTEXT_AFTER]
    return Passage(kind, str(path), start, end, text[first:start], passage, after)


def passage_at(kind: str, file: str, start: int, end: int) -> Passage:
    """The passage of `file` from `start` to `end`, with the document around it as `passages`
    makes it: a result file's passages replayed again (the files a kind draws from can change
    when packages are installed, and with them the passages drawn)."""
    text = read_text(Path(file)) or ""
    first = text.find("\n", max(0, start - CONTEXT_BEFORE)) + 1 if start > CONTEXT_BEFORE else 0
    return Passage(kind, file, start, end, text[first:start], text[start:end], text[end : end + CONTEXT_AFTER])


def interleaved(items: list[Passage]) -> list[Passage]:
    """The passages with their kinds in turn (python, javascript, c, prose, python, ...)."""
    by_kind: dict[str, list[Passage]] = {}
    for p in items:
        by_kind.setdefault(p.kind, []).append(p)
    out = []
    while any(by_kind.values()):
        for group in by_kind.values():
            if group:
                out.append(group.pop(0))
    return out


def next_word(added: str) -> str:
    """What one accept key takes from a suggestion: up to the end of its first word."""
    i = 0
    while i < len(added) and not is_word_char(added[i]):
        i += 1
    while i < len(added) and is_word_char(added[i]):
        i += 1
    return added[:i] if any(is_word_char(ch) for ch in added[:i]) else ""


POSITIONS = ("inside a word", "at a word end", "after a non-word character")


def position_kind(before: str, rest: str) -> str:
    """Where the cursor is, knowing the passage: inside a word (it goes on), at the end of a word
    (it does not), or after a space or punctuation."""
    if before and is_word_char(before[-1]):
        return POSITIONS[0] if rest and is_word_char(rest[0]) else POSITIONS[1]
    return POSITIONS[2]


def accepts(chunk: str, rest: str) -> bool:
    """The chunk is exactly right: the passage goes on with it and its word ends there."""
    return bool(chunk) and rest.startswith(chunk) and (len(chunk) == len(rest) or not is_word_char(rest[len(chunk)]))


class _Cursor:
    """An open document with the cursor at `offset`; inserts there and knows its LSP position."""

    def __init__(self, editor: Editor, uri: str, before: str, after: str, language: str) -> None:
        self.editor, self.uri = editor, uri
        self.text, self.offset, self.version = before + after, len(before), 1
        self.line = before.count("\n")
        self.column = len(before[before.rfind("\n") + 1 :].encode("utf-16-le")) // 2
        item = {"uri": uri, "languageId": language, "version": 1, "text": self.text}
        editor.client.notify("textDocument/didOpen", {"textDocument": item})

    def position(self) -> dict[str, int]:
        return {"line": self.line, "character": self.column}

    def insert(self, chars: str) -> None:
        at = self.position()
        self.version += 1
        change = {"range": {"start": at, "end": at}, "text": chars}
        self.editor.client.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": self.uri, "version": self.version}, "contentChanges": [change]},
        )
        self.text = self.text[: self.offset] + chars + self.text[self.offset :]
        self.offset += len(chars)
        if "\n" in chars:
            self.line += chars.count("\n")
            self.column = len(chars[chars.rfind("\n") + 1 :].encode("utf-16-le")) // 2
        else:
            self.column += len(chars.encode("utf-16-le")) // 2

    def word(self) -> str:
        """The partial word before the cursor (what the server's insertText starts with)."""
        start = self.offset
        while start > 0 and is_word_char(self.text[start - 1]):
            start -= 1
        return self.text[start : self.offset]

    def close(self) -> None:
        self.editor.client.notify("textDocument/didClose", {"textDocument": {"uri": self.uri}})


@dataclass
class _Tally:
    """What one replay counts as the simulated user goes along the passage."""

    typed: int = 0
    accepted: int = 0  # characters taken by accept keys
    accepts: int = 0
    shown: int = 0
    ms: list[float] = field(default_factory=list)
    # per cursor position: requests, accepts, accepted characters
    where: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0, 0] for k in POSITIONS})
    # per cursor class as the server's gate sees it: requests, shown, accepts, accepted characters
    cursors: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0, 0, 0] for k in CURSOR_CLASSES})
    # every request: [characters of the passage typed before it, what its next word was ("" none), shown]
    steps: list[list[Any]] = field(default_factory=list)
    # every request, beside `steps`: what each item shown added after the partial word, first item first
    texts: list[list[str]] = field(default_factory=list)

    def step(self, before: str, rest: str, chunk: str, shown: bool = False, texts: list[str] | None = None) -> int:
        """One suggestion (`shown`) whose next word is `chunk`, with `before` the text before the
        cursor and `rest` what the passage has left: the user accepts it if it is exactly right,
        else types one character. Returns how many characters of the passage that took. `texts`:
        all that the items added (kept to read afterwards what was shown where)."""
        at = self.where[position_kind(before, rest)]
        at[0] += 1
        cursor = self.cursors[cursor_class(split(before, len(before)))]
        cursor[0] += 1
        cursor[1] += shown
        self.shown += shown
        self.steps.append([self.typed + self.accepted, chunk, shown])
        self.texts.append(list(texts or ()))
        if accepts(chunk, rest):
            self.accepted += len(chunk)
            self.accepts += 1
            at[1] += 1
            at[2] += len(chunk)
            cursor[2] += 1
            cursor[3] += len(chunk)
            return len(chunk)
        self.typed += 1
        return 1

    def result(self, chars: int, begins: bool | None) -> dict[str, Any]:
        return {
            "chars": chars, "typed": self.typed, "accepted": self.accepted, "accepts": self.accepts,
            "requests": len(self.ms), "ms": self.ms, "shown": self.shown, "begins_with_typed": begins,
            "positions": self.where, "cursors": self.cursors, "steps": self.steps, "texts": self.texts,
        }  # fmt: skip


def ready_editor(client, settings: dict[str, Any]) -> Editor:
    """Initialize the server with `settings` and wait for one answer, so no replay pays the load.
    A model that cannot load stops the run: a replay of empty answers would read as 0% saved."""
    client.initialize({"cpcLsp": settings})
    editor = Editor(client)
    warm = "file:///bench/replay/warmup.txt"
    editor.open(warm, "The server is ready when this sentence gets an ans")
    editor.inline(warm)
    editor.close(warm)
    said = client.messages("window/showMessage") + client.messages("window/logMessage")
    failed = [m for m in said if "cannot load model" in m]
    if failed:
        raise RuntimeError(failed[0])
    return editor


def replay_server(editor: Editor, passage: Passage, uri: str, in_place: bool) -> dict[str, Any]:
    cursor = _Cursor(editor, uri, passage.before, passage.after if in_place else "", LANGUAGES[passage.kind])
    target, pos = passage.text, 0
    tally = _Tally()
    begins = True
    try:
        while pos < len(target):
            params = {"textDocument": {"uri": uri}, "position": cursor.position(), "context": {"triggerKind": 2}}
            reply = editor.client.request("textDocument/inlineCompletion", params)
            tally.ms.append(reply.ms)
            shown = insert_text(reply)
            chunk = ""
            word = cursor.word()
            if shown is not None:
                begins = begins and shown.startswith(word)
                chunk = next_word(shown[len(word) :])
            texts = [t[len(word) :] for t in insert_texts(reply)]
            took = tally.step(passage.before + target[:pos], target[pos:], chunk, shown is not None, texts)
            cursor.insert(target[pos : pos + took])  # the accepted word, or one typed character
            pos += took
    finally:
        cursor.close()
    return tally.result(len(target), begins)


def replay_peer(peer, passage: Passage, max_tokens: int) -> dict[str, Any]:
    """The same replay with the peer's completion of the text before the cursor."""
    target, pos = passage.text, 0
    tally = _Tally()
    while pos < len(target):
        prompt = passage.before + target[:pos]
        started = time.perf_counter()
        out = peer.llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, stop=["\n"])
        tally.ms.append((time.perf_counter() - started) * 1000)
        added = out["choices"][0]["text"]
        pos += tally.step(prompt, target[pos:], next_word(added), bool(added.strip()), [added])
    return tally.result(len(target), None)


def replay_infill(peer, passage: Passage, in_place: bool, progress=None, fresh: bool = False) -> dict[str, Any]:
    """The same replay with llama.vim's request (bench.infill) on llama-server: it sees the
    document as the server does, so the text after the passage too when typing in place. What
    it shows is all of its suggestion as llama.vim renders it (bench.infill.render: the first
    line at the cursor and the lines below), judged as ours is: its next word, across a line
    break when its first line is empty, as our multi-line suggestions are. Which answer it shows
    is llama.vim's choice (bench.infill.LlamaVimSession: typing along a suggestion shows the rest
    of it from its cache, as ours does); `fresh`: the answer to a request at every keystroke
    instead, as this replay judged it before (an independent sample where llama.vim shows the
    rest of the suggestion that was just typed past)."""
    target, pos = passage.text, 0
    after = passage.after if in_place else ""
    tally = _Tally()
    session = None if fresh or not hasattr(peer, "session") else peer.session()
    while pos < len(target):
        before = passage.before + target[:pos]
        if session is not None:
            ms, shown = session.shown(before + after, len(before))
        else:
            ms, shown, _ = peer.llama_vim_shown(before + after, len(before))
        tally.ms.append(ms)
        pos += tally.step(before, target[pos:], next_word(shown), bool(shown.strip()), [shown])
        if progress is not None and pos < len(target):  # so far: a run cut short keeps its first `pos` characters
            progress({**tally.result(len(target), None), "partial_chars": pos})
    return tally.result(len(target), None)


def by_position(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Over all kinds, per (who, where) and cursor position: requests, the share accepted, and the
    characters accepted there as a share of all characters."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        if "positions" in r:
            groups[(r["who"], r["where"])].append(r)
    rows = []
    for (who, where), rs in groups.items():
        chars = sum(r["chars"] for r in rs)
        for kind in POSITIONS:
            requests, accepted_n, accepted = (sum(r["positions"][kind][i] for r in rs) for i in range(3))
            rows.append({"who": who, "where": where, "position": kind, "requests": requests,
                         "accept_rate": accepted_n / requests if requests else None,
                         "chars_share": accepted / chars})  # fmt: skip
    return rows


def by_cursor(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (who, where), per kind (all cursor classes) and per cursor class (all kinds): requests,
    suggestions shown, accepted (next word exactly right), precision (accepted / shown) and the
    characters accepted as a share of all characters."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        if "cursors" in r:
            groups[(r["who"], r["where"], r["kind"])].append(r)
            groups[(r["who"], r["where"], "all")].append(r)
    rows = []
    for (who, where, kind), rs in groups.items():
        chars = sum(r["chars"] for r in rs)
        for cursor in (*CURSOR_CLASSES, "all") if kind == "all" else ("all",):
            picked = CURSOR_CLASSES if cursor == "all" else (cursor,)
            requests, shown, accepted, saved = (sum(r["cursors"][c][i] for r in rs for c in picked) for i in range(4))
            rows.append({"who": who, "where": where, "kind": kind, "cursor": cursor, "requests": requests,
                         "shown": shown, "accepted": accepted, "precision": accepted / shown if shown else None,
                         "saved": saved / chars if chars else None})  # fmt: skip
    order = {k: i for i, k in enumerate((*KINDS, "all"))}
    rows.sort(
        key=lambda r: (order[r["kind"]], r["cursor"] == "all", r["cursor"], r["who"] != "peer", r["who"], r["where"])
    )
    return rows


def run(
    editor: Editor,
    peer,
    items: list[Passage],
    max_tokens: int,
    variants: dict[str, dict[str, Any]],
    say=print,
    places: tuple[bool, ...] = (False, True),
    save=None,
    only: set[int] | None = None,
    fresh_peer: bool = False,
) -> dict[str, Any]:
    """Every passage (or those numbered in `only`), for every server variant ({name: settings}) at
    the end and in place (`places`: in place or not), and the peer; `save(results so far)` after
    each passage."""
    runs = []
    for n, passage in enumerate(items):
        if only is not None and n not in only:
            continue
        for name, settings in variants.items():
            editor.client.notify("workspace/didChangeConfiguration", {"settings": {"cpcLsp": settings}})
            for in_place in places:
                where = "in place" if in_place else "end"
                uri = f"file:///bench/replay/{n}-{name}-{'place' if in_place else 'end'}{Path(passage.file).suffix}"
                result = replay_server(editor, passage, uri, in_place)
                runs.append({"passage": n, "kind": passage.kind, "who": f"server {name}", "where": where, **result})
        if peer is not None and hasattr(
            peer, "llama_vim_shown"
        ):  # llama.vim's /infill: it reads the text after the cursor
            for in_place in places:
                where = "in place" if in_place else "end"

                def progress(
                    so_far: dict[str, Any], n: int = n, passage: Passage = passage, where: str = where
                ) -> None:
                    if save is not None:
                        current = {"passage": n, "kind": passage.kind, "who": "peer", "where": where, **so_far}
                        save({"passages": [_passage_json(p) for p in items[: n + 1]], "runs": [*runs, current],
                              "complete": False})  # fmt: skip

                result = replay_infill(peer, passage, in_place, progress, fresh=fresh_peer)
                runs.append(
                    {
                        "passage": n,
                        "kind": passage.kind,
                        "who": "peer",
                        "where": "in place" if in_place else "end",
                        **result,
                    }
                )
        elif peer is not None:
            result = replay_peer(peer, passage, max_tokens)
            runs.append({"passage": n, "kind": passage.kind, "who": "peer", "where": "before cursor", **result})
        say(f"replay: passage {n + 1}/{len(items)} ({passage.kind}) done")
        if save is not None:
            save({"passages": [_passage_json(p) for p in items[: n + 1]], "runs": runs,
                  "complete": n + 1 == len(items) or (only is not None and n == max(only))})  # fmt: skip
    found = {"passages": [_passage_json(p) for p in items], "runs": runs, "table": summarize(runs),
             "positions": by_position(runs), "cursors": by_cursor(runs)}  # fmt: skip
    found["places"] = by_place(found)
    found["paired"] = by_place_paired(found)
    return found


def _passage_json(p: Passage) -> dict[str, Any]:
    return {"kind": p.kind, "file": p.file, "start": p.start, "end": p.end, "chars": len(p.text), "text": p.text}


PLACES = ("line end", "indentation", "inside a word", "word end", "after a space", "after punctuation")


def place_of(before: str, rest: str) -> str:
    """Where a request was, more finely than `position_kind`, to see where characters are lost:
    at a line's end (the passage goes on with a line break), in a line's indentation (nothing but
    whitespace before the cursor on its line), inside a word, at a word's end, after a space
    inside a line, after punctuation."""
    line = before[before.rfind("\n") + 1 :]
    if rest.startswith("\n"):
        return PLACES[0]
    if not line.strip():
        return PLACES[1]
    if is_word_char(line[-1]):
        return PLACES[2] if rest and is_word_char(rest[0]) else PLACES[3]
    return PLACES[4] if line[-1].isspace() else PLACES[5]


def by_place(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (who, where) and `place_of` class, over all kinds: requests, shown, accepted, and the
    characters accepted there as a share of all characters (from the runs' steps)."""
    texts = {n: p.get("text") for n, p in enumerate(results.get("passages", []))}
    groups: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: {k: [0, 0, 0, 0] for k in PLACES})
    chars: dict[tuple[str, str], int] = defaultdict(int)
    for r in results.get("runs", []):
        text = texts.get(r["passage"])
        if text is None or "steps" not in r:
            continue
        key = (r["who"], r["where"])
        chars[key] += r["chars"]
        for pos, chunk, shown in r["steps"]:
            counts = groups[key][place_of(text[:pos] if pos else "\n", text[pos:])]
            counts[0] += 1
            counts[1] += bool(shown)
            if accepts(chunk, text[pos:]):
                counts[2] += 1
                counts[3] += len(chunk)
    return [{"who": who, "where": where, "place": place, "requests": c[0], "shown": c[1], "accepted": c[2],
             "precision": c[2] / c[1] if c[1] else None, "saved": c[3] / chars[(who, where)]}
            for (who, where), by in sorted(groups.items()) for place, c in by.items()]  # fmt: skip


def by_place_paired(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Ours beside the peer at the same cursors: per server variant and `place_of` class, the
    requests both made at the same place of the same passage (same `where`), and how many of them
    each got exactly right. `by_place` counts each side along its own path, and the paths differ:
    after a word it accepted, a side never asks after the space that follows, so the cursors one
    side reaches after a space are mostly those where its guess at the word's end was wrong. At
    the same cursors the two are compared on the same questions."""
    texts = {n: p.get("text") for n, p in enumerate(results.get("passages", []))}
    steps: dict[tuple[str, str, int], dict[int, str]] = {}
    for r in results.get("runs", []):
        if texts.get(r["passage"]) is not None and "steps" in r:
            steps[(r["who"], r["where"], r["passage"])] = {pos: chunk for pos, chunk, _ in r["steps"]}
    counts: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: {k: [0, 0, 0] for k in PLACES})
    for (who, where, n), ours in steps.items():
        peer = steps.get(("peer", where, n)) or steps.get(("peer", "before cursor", n))
        if who == "peer" or peer is None:
            continue
        text = texts[n]
        for pos in ours.keys() & peer.keys():
            c = counts[(who, where)][place_of(text[:pos] if pos else "\n", text[pos:])]
            c[0] += 1
            c[1] += accepts(ours[pos], text[pos:])
            c[2] += accepts(peer[pos], text[pos:])
    return [{"who": who, "where": where, "place": place, "requests": c[0], "accepted": c[1], "peer_accepted": c[2]}
            for (who, where), by in sorted(counts.items()) for place, c in by.items()]  # fmt: skip


def paired_table(rows: list[dict[str, Any]]):
    from bench.report import num, pct

    header = ["who", "where", "cursor", "same cursors", "accepted", "peer accepted", "rate", "peer rate"]
    body = [[r["who"], r["where"], r["place"], num(r["requests"]), num(r["accepted"]), num(r["peer_accepted"]),
             pct(r["accepted"] / r["requests"] if r["requests"] else None),
             pct(r["peer_accepted"] / r["requests"] if r["requests"] else None)] for r in rows]  # fmt: skip
    return (
        "typing replay: ours and the peer at the same cursors (both asked there), by the cursor's place",
        header,
        body,
    )


def place_table(rows: list[dict[str, Any]]):
    from bench.report import num, pct

    header = ["who", "where", "cursor", "requests", "shown", "accepted", "precision", "chars saved from here"]
    body = [[r["who"], r["where"], r["place"], num(r["requests"]), num(r["shown"]), num(r["accepted"]),
             pct(r["precision"]), pct(r["saved"])] for r in rows]  # fmt: skip
    return (
        "typing replay: where the characters are saved, by the cursor's place in the passage (all kinds)",
        header,
        body,
    )


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (who, where, kind) and per (who, where) over all kinds."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["who"], r["where"], r["kind"])].append(r)
        groups[(r["who"], r["where"], "all")].append(r)
    # The peer's row for the same placement (llama.vim's request reads the text after the cursor),
    # else its one replay on the text before the cursor, which serves both placements.
    peers = {(where, kind): rs for (who, where, kind), rs in groups.items() if who == "peer"}
    peer_ms = {key: median([m for r in rs for m in r["ms"]]) for key, rs in peers.items()}
    peer_saved = {key: _saved(rs) for key, rs in peers.items()}

    def peer_key(where: str, kind: str) -> tuple[str, str]:
        return (where, kind) if (where, kind) in peers else ("before cursor", kind)

    rows = []
    for (who, where, kind), rs in groups.items():
        saved = _saved(rs)
        ms = median([m for r in rs for m in r["ms"]])
        chars = sum(r["chars"] for r in rs)
        key = peer_key(where, kind)
        rows.append({
            "who": who, "where": where, "kind": kind, "chars": chars,
            "not_typed": saved, "keys_per_char": sum(r["typed"] + r["accepts"] for r in rs) / chars,
            "median_ms": ms, "requests": sum(r["requests"] for r in rs),
            "saved_over_peer": ratio(saved, peer_saved.get(key)), "ms_over_peer": ratio(ms, peer_ms.get(key)),
            "begins_with_typed": None if who == "peer" else all(r["begins_with_typed"] for r in rs),
        })  # fmt: skip
    order = {k: i for i, k in enumerate((*KINDS, "all"))}
    rows.sort(key=lambda r: (order[r["kind"]], r["who"] != "peer", r["who"], r["where"]))
    return rows


def _saved(rs: list[dict[str, Any]]) -> float:
    return sum(r["accepted"] for r in rs) / sum(r["chars"] for r in rs)


def gate_variants(spec: str) -> dict[str, dict[str, Any]]:
    """ "off,default,0.5" -> {"gate off": {"minConfidence": 0}, "gate default": {"minConfidence": None}, ...}.

    The default is sent as null: settings are patched, so a variant that left the key out would
    keep the previous variant's threshold (the gate off), not restore the model's own."""
    out: dict[str, dict[str, Any]] = {}
    for v in spec.split(","):
        if v == "default":
            out["gate default"] = {"minConfidence": None}
        else:
            out[f"gate {v}"] = {"minConfidence": 0.0 if v == "off" else float(v)}
    return out


def used_files(*case_sets: list[Case]) -> set[str]:
    return {c.file for cases in case_sets for c in cases}


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.replay`: the typing replay alone; results in bench/results/replay.json."""
    import argparse
    import json
    import sys

    from bench.latency import Peer
    from bench.machine import CpuWatch, process_cpu_seconds
    from engine.model_files import resolve_model
    from tests.support.cases import build_cases, check_cases
    from tests.support.lsp_client import LspClient

    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=main.__doc__.split(":")[0])
    parser.add_argument("--per-kind", type=int, default=2, help="passages per kind of text")
    parser.add_argument("--chars", type=int, default=PASSAGE_CHARS, help="about this many characters a passage")
    parser.add_argument(
        "--seed", type=int, default=0, help="which passages are drawn (another seed: other files, a check set)"
    )
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lexicon", default="off", help="server variants: off, on or both (off,on)")
    parser.add_argument("--prior", type=float, default=None, help="lexiconPrior for the 'on' variant")
    parser.add_argument(
        "--gate", default="off,default", help="minConfidence variants: off, default, a number, or several"
    )
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--no-server", action="store_true", help="the peer alone (merge with a server run: --merge)")
    parser.add_argument("--passages-from", type=Path, default=None, help="replay the passages of this result file")
    parser.add_argument(
        "--only-passages", default=None, help="replay only these passages (numbers from 0, comma-separated)"
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        help="measure nothing: merge result files of the same passages (a server run, a peer run) into --out",
    )
    parser.add_argument("--places", default="end,in place", help="where passages are typed: end, in place or both")
    parser.add_argument(
        "--model",
        default=None,
        help="a catalogue name or a GGUF path for the server and the peer (default: the server's)",
    )
    parser.add_argument(
        "--peer",
        choices=("completion", "infill"),
        default="completion",
        help="completion: llama-cpp-python's create_completion; infill: llama.vim's request on "
        "llama-server with the same model (/infill; /completion for a model with no FIM tokens)",
    )
    parser.add_argument(
        "--peer-display",
        choices=("cache", "fresh"),
        default="cache",
        help="infill: what llama.vim shows at each keystroke: cache (its own choice, from its answer "
        "cache: the rest of a suggestion typed along) or fresh (the answer to that keystroke's request)",
    )
    parser.add_argument("--out", type=Path, default=report.output_root() / "bench" / "results" / "replay.json")
    args = parser.parse_args(argv)
    if args.merge:
        results = merge([json.loads(p.read_text()) for p in args.merge])
        results["settings"] = {"merged": [str(p) for p in args.merge]}
        _print(results)
        args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        return 0

    tuning = build_cases(50, 0)
    used = used_files(tuning, check_cases(50, tuning))
    kinds = tuple(args.kinds.split(","))
    items = interleaved([p for p in passages(args.per_kind, used, seed=args.seed, chars=args.chars) if p.kind in kinds])
    if args.passages_from is not None:  # the passages of another run, exactly
        listed = json.loads(args.passages_from.read_text())["passages"]
        items = [passage_at(p["kind"], p["file"], p["start"], p["end"]) for p in listed]
    base = {"maxTokens": args.max_tokens, "threads": args.threads, **({"model": args.model} if args.model else {})}
    variants = {}
    for v in args.lexicon.split(","):
        lexicon = {"lexicon": v == "on", **({"lexiconPrior": args.prior} if args.prior is not None else {})}
        for gate, settings in gate_variants(args.gate).items() if not args.no_server else ():
            variants[f"lexicon {v}, {gate}"] = {**lexicon, **settings}
    watch = CpuWatch.start()
    llama_server = None
    if args.no_peer:
        peer = None
    elif args.peer == "infill":
        from bench.infill import SEED_ARGS, InfillPeer
        from tests.support.llama_server import LlamaServer

        llama_server = LlamaServer(slots=1, model=args.model, threads=args.threads, extra_args=SEED_ARGS).start(600)
        peer = InfillPeer(llama_server)
        if peer.endpoint != "/infill":  # no FIM tokens: the same request on /completion (bench.infill)
            print(f"[replay] no /infill for this model ({getattr(peer, 'refused', '')}): llama.vim's request on /completion",
                  file=sys.stderr)  # fmt: skip
    else:
        peer = Peer(str(resolve_model(args.model)), threads=args.threads)
    try:
        say = lambda m: print(f"[replay] {m}", file=sys.stderr, flush=True)  # noqa: E731
        partial = args.out.with_suffix(".partial.json")

        def replay_all(editor) -> dict[str, Any]:
            return run(editor, peer, items, args.max_tokens, {k: {**base, **v} for k, v in variants.items()}, say,
                       tuple(w == "in place" for w in args.places.split(",")),
                       lambda r: partial.write_text(json.dumps(r, ensure_ascii=False) + "\n"),
                       {int(n) for n in args.only_passages.split(",")} if args.only_passages else None,
                       fresh_peer=args.peer_display == "fresh")  # fmt: skip

        server_cpu = 0.0
        if args.no_server:
            results = replay_all(None)
        else:
            with LspClient(["--log-level", "warning"]) as client:
                results = replay_all(ready_editor(client, base))
                server_cpu = process_cpu_seconds(client.pid) or 0.0
    finally:
        if peer is not None:
            peer.close()
        if llama_server is not None:
            llama_server.stop()
    results["other_processes_cpu_share"] = watch.others_share(server_cpu)
    results["settings"] = {
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "variants": variants,
        "model": args.model,
        "peer": None if args.no_peer else args.peer,
        "peer_display": args.peer_display if args.peer == "infill" else None,
        "peer_endpoint": getattr(peer, "endpoint", None),
        "places": args.places,
        "command": "python -m bench.replay " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    _print(results)
    print(f"other processes used {100 * (results['other_processes_cpu_share'] or 0):.0f}% of the CPUs")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    return 0


def _print(results: dict[str, Any]) -> None:
    print(report.render(table(results["table"])))
    print(report.render(position_table(results["positions"])))
    print(report.render(cursor_table(results["cursors"])))
    print(report.render(place_table(results["places"])))
    if results.get("paired"):
        print(report.render(paired_table(results["paired"])))


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Result files of the same passages (e.g. the servers' run and the peer's, measured at other
    times) as one: their runs together, the tables made again. Latencies then compare across runs."""

    def key(p: dict[str, Any]) -> tuple[str, int, int]:
        return (p["file"], p["start"], p["end"])

    # a run cut short (a .partial.json) or one of some passages (--only-passages) has some of them:
    # the passages that every side (who and where) replayed
    listed: dict[int, dict[str, Any]] = {}
    for part in parts:
        for n, p in enumerate(part["passages"]):
            if n in listed and key(listed[n]) != key(p):
                raise SystemExit("bench.replay --merge: the files replayed other passages")
            listed.setdefault(n, p)
    all_runs = [r for part in parts for r in part["runs"]]
    sides = {(r["who"], r["where"]) for r in all_runs}
    kept = sorted(n for n in listed if {(r["who"], r["where"]) for r in all_runs if r["passage"] == n} == sides)
    renumber = {n: i for i, n in enumerate(kept)}
    runs = [{**r, "passage": renumber[r["passage"]]} for r in all_runs if r["passage"] in renumber]
    # a passage one side did not finish (`partial_chars`): every side's run of it cut to that many characters
    cut = {}
    for r in runs:
        if r.get("partial_chars") is not None:
            cut[r["passage"]] = min(cut.get(r["passage"], r["partial_chars"]), r["partial_chars"])
    runs = [truncated(r, listed[kept[r["passage"]]], cut[r["passage"]]) if r["passage"] in cut else r for r in runs]
    found = {"passages": [listed[n] for n in kept], "runs": runs, "table": summarize(runs), "positions": by_position(runs),
             "cursors": by_cursor(runs), "parts": [{k: v for k, v in p.items() if k not in ("runs", "passages", "table",
             "positions", "cursors", "places", "paired")} for p in parts]}  # fmt: skip
    found["places"] = by_place(found)
    found["paired"] = by_place_paired(found)
    return found


def truncated(run: dict[str, Any], passage: dict[str, Any], chars: int) -> dict[str, Any]:
    """`run` (with its steps) as the replay of the passage's first `chars` characters: its
    requests before there, by the same rule, a word accepted across the end counted up to it."""
    text = passage["text"]
    source = read_text(Path(passage["file"])) or ""
    before = source[: passage["start"]][-CONTEXT_BEFORE:]
    tally = _Tally()
    steps = [s for s in run["steps"] if s[0] < chars]
    ms = run["ms"][: len(steps)]
    texts = run.get("texts") or [[] for _ in steps]
    for (pos, chunk, shown), shown_texts in zip(steps, texts):
        took = tally.step(before + text[:pos], text[pos:], chunk, shown, shown_texts)
        if took > chars - pos:  # the accepted word goes past the cut: only its part before it counts
            tally.accepted -= took - (chars - pos)
    tally.ms = list(ms)
    return {**{k: v for k, v in run.items() if k != "partial_chars"}, **tally.result(chars, run.get("begins_with_typed")),
            "truncated_to": chars}  # fmt: skip


def table(rows: list[dict[str, Any]]):
    from bench.report import num, pct, times

    header = ["kind", "who", "where", "chars", "not typed", "keys/char", "median ms", "not typed / peer", "ms / peer"]
    body = [[r["kind"], r["who"], r["where"], num(r["chars"]), pct(r["not_typed"]), f"{r['keys_per_char']:.2f}",
             num(r["median_ms"]), times(r["saved_over_peer"]) if r["who"] != "peer" else "",
             times(r["ms_over_peer"]) if r["who"] != "peer" else ""] for r in rows]  # fmt: skip
    return "typing replay: characters not typed (accepted words) and request latency, server vs peer", header, body


def cursor_table(rows: list[dict[str, Any]], title: str = "typing replay"):
    from bench.report import num, pct

    header = ["kind", "cursor", "who", "where", "requests", "shown", "accepted", "precision", "chars saved"]
    body = [[r["kind"], r["cursor"], r["who"], r["where"], num(r["requests"]), num(r["shown"]), num(r["accepted"]),
             pct(r["precision"]), pct(r["saved"])] for r in rows]  # fmt: skip
    return (
        f"{title}: suggestions shown and accepted (next word exactly right), per kind and per cursor class",
        header,
        body,
    )


def position_table(rows: list[dict[str, Any]]):
    from bench.report import num, pct

    header = ["who", "where", "cursor", "requests", "accepted", "chars not typed from here"]
    body = [
        [r["who"], r["where"], r["position"], num(r["requests"]), pct(r["accept_rate"]), pct(r["chars_share"])]
        for r in rows
    ]
    return "typing replay by cursor position: where the accepted words come from (all kinds)", header, body


if __name__ == "__main__":
    raise SystemExit(main())
