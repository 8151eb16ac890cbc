"""Which other files' text goes in a document's prompt, kept stable so the KV cache survives.

The choice (lsp_server.chunks over lsp_server.workspace's sources) is made per document and
kept: it is made again only when the cursor is at the start of a line (the user has finished a
line: a new one begins), and the new choice replaces the old only when more than CHANGE_SHARE of
its chunks are new. Between those moments every request of the document carries the very same
`RepoContext` value (texts as they were when chosen), so the prompt's start never moves while
the user types: a keystroke inside a word decodes no prompt token, context or not. A new choice
is first sent by the prefetch that follows the edit (lsp_server.server), so its layout is decoded
while the user reads. The server makes its choices on a worker thread (`Background`): a slow disk
holds back the context, never a keystroke.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from engine import COLD_EXTRA_TOKENS, COLD_SHARE, ContextFile, RepoContext
from lsp_server.chunks import Chunk, Chunker, choose, definitions, identifiers, near_cursor, related
from lsp_server.documents import Document
from lsp_server.logs import frames
from lsp_server.outline import Entry, Outliner, as_view, fill, popularity, rank, tokens_of, used_names
from lsp_server.workspace import Source, Workspace

logger = logging.getLogger(__name__)

CHANGE_SHARE = 0.5  # a new choice is adopted when more than this share of its chunks are new
MAX_TYPED = 64  # the partial word at the cursor is looked for this far back
MIN_TYPED = 3  # a partial word this long picks the definitions it begins (lsp_server.chunks' too)
OUTLINE_SHARE = 1.0  # definitions may take the whole budget; chunks get what they leave
VIEW_CHARS = 4_000  # the default view_chars (a 2,048-token window, 512 of context)
VIEW_CHARS_PER_TOKEN = 3.5  # code, in Qwen2.5-Coder's and Gemma's vocabularies
FILE_CHARS_PER_TOKEN = 4.0  # an estimate (Qwen2.5-Coder: 3.6 to 4.7 on real code, 4.4+ on a licence's prose; Gemma 2.7 to 4.0): the engine's exact count bounds it (budget_for)
BUDGET_STEP = 64
DEFINITIONS_SCAN_CHARS = 262_144  # the current file's definitions are looked for this far (bounded work)


@dataclass(frozen=True)
class Choice:
    keys: frozenset[str]
    context: RepoContext | None
    budget: int
    offset: int  # the cursor when it was made
    settings: tuple[int, int]  # (max_tokens, window_tokens) it was made for


@dataclass(frozen=True)
class Chosen:
    """What goes in: definition lines (lsp_server.outline) and whole chunks (lsp_server.chunks)."""

    entries: tuple[Entry, ...]
    chunks: tuple[Chunk, ...]
    order: tuple[Entry, ...] = ()  # the entries best first (the engine leaves out the last ones' lines first)

    @property
    def keys(self) -> frozenset[str]:
        return frozenset([*(e.key for e in self.entries), *(c.key for c in self.chunks)])

    def files(self) -> tuple[ContextFile, ...]:
        """One ContextFile a file (lsp_server.outline.as_view), each line ranked: a definition's
        lines (its own, its enclosing ones) by the definition's place in `order`, a chunk's lines
        after every definition, in the chunks' order. The engine leaves out the worst-ranked lines
        first when its exact count of the budget holds fewer than the estimate chose."""
        view = as_view(((c.path, c.start, c.text) for c in self.chunks), self.entries)
        place = {e: i for i, e in reversed(list(enumerate(self.order)))}
        ranks: dict[str, dict[int, int]] = {}
        for entry in self.entries:
            r = place.get(entry, len(self.order))
            own = ranks.setdefault(entry.path, {})
            for n in (*(n for n, _ in entry.head), entry.line):
                own[n] = min(own.get(n, r), r)
        for k, chunk in enumerate(self.chunks):
            own = ranks.setdefault(chunk.path, {})
            for i in range(len(chunk.text.splitlines())):
                own.setdefault(chunk.start + i, len(self.order) + 1 + k)
        return tuple(ContextFile(path, text, tuple(ranks[path][n] for n in sorted(ranks[path])))
                     if len(ranks.get(path, {})) == len(text.splitlines()) else ContextFile(path, text)
                     for path, text in view)  # fmt: skip


def budget_for(text: str, cursor: int, max_tokens: int, window_tokens: int) -> int:
    """The context's tokens at this cursor: `max_tokens` when the current file's text before the
    cursor fills 2/3 of the window (the prompt is then at most the window, at most 1.5x the
    file's part), else at most half of that text's tokens (estimated at FILE_CHARS_PER_TOKEN) or
    COLD_EXTRA_TOKENS, whichever is more: a cold request costs at most 1.5x what it costs without
    context, or 256 tokens more on a short file (which needs another file's names most: a test, a
    script beside the module it imports; its first answer waits for 300 ms of them at most:
    engine.Engine.first_prompt). In steps of BUDGET_STEP, so the budget (and the choice) stays
    put while a line is typed. This sizes the choice; the engine, which
    tokenizes, holds the bound exactly (engine.prompt_window.cold_cap: where the estimate runs over, on
    prose, it lays out fewer of the chosen lines)."""
    file_tokens = cursor / FILE_CHARS_PER_TOKEN
    if (
        file_tokens * (1 + COLD_SHARE) >= window_tokens
    ):  # the file alone fills 2/3 of the window: at most 1.5x either way
        return max_tokens
    return min(max_tokens, max(COLD_EXTRA_TOKENS, int(file_tokens * COLD_SHARE) // BUDGET_STEP * BUDGET_STEP))


def stale_chars(window_tokens: int) -> int:
    """How far the cursor may move from where the kept choice was made before any new choice
    replaces it: a quarter of the window, the step in which the engine moves the window's start
    (engine.Engine.window), so re-choosing costs at most as many whole-prompt decodes again."""
    return int(window_tokens / 4 * VIEW_CHARS_PER_TOKEN)


def view_chars(window_tokens: int, budget: int) -> int:
    """About how much of the current file's text before the cursor the prompt shows (the engine
    keeps between 3/4 and all of what the context leaves; cautious: fewer names count as shown)."""
    return int((window_tokens - budget) * 3 / 4 * VIEW_CHARS_PER_TOKEN)


def at_line_start(text: str, cursor: int) -> bool:
    """Only horizontal whitespace between the line's start and the cursor."""
    start = max(text.rfind("\n", 0, cursor), text.rfind("\r", 0, cursor)) + 1
    return not text[start:cursor].strip(" \t")


def substantial(old: frozenset[str], new: frozenset[str]) -> bool:
    """True when `new` should replace `old`: something where there was nothing, or at least
    more than CHANGE_SHARE of its chunks new (a choice that loses everything is not worth a cold decode)."""
    if not new or new == old:
        return False
    if not old:
        return True
    return len(new - old) / len(new) > CHANGE_SHARE


PROVISIONAL = -1  # the budget of the choice a document has while its first one is being made


class ContextChooser:
    """Makes and keeps each document's choice, on the caller's thread (the command line, the
    benchmarks, the tests). The server's is `Background`, which makes choices on a worker."""

    def __init__(self, workspace: Workspace | None = None) -> None:
        self.workspace = workspace or Workspace()
        self.chunker = Chunker()
        self.outliner = Outliner()
        self._chosen: dict[str, Choice] = {}
        self._defined: dict[str, tuple[str, frozenset[str], dict[str, int]]] = {}
        self.choices = 0  # contexts adopted (a new layout each: for stats)
        self.view_chars = VIEW_CHARS  # the current file's text before the cursor the prompt likely shows
        self.related = True

    def set_folders(self, folders: Iterable[str]) -> None:
        """The workspace folders (lsp_server.workspace.Workspace.set_roots)."""
        self.workspace.set_roots(folders)

    def closed(self, key: str, uri: str, text: str) -> None:
        """A document closed: the regions edited in it are kept (lsp_server.workspace)."""
        self.workspace.closed(key, uri, text)

    def waiting(self, key: str) -> bool:
        """True while the document's first choice is being made (never, here: it is made at once)."""
        return False

    def forget(self, key: str | None = None) -> None:
        """Drop the kept choice of one document (all when None), e.g. when a setting changed."""
        if key is None:
            self._chosen.clear()
        else:
            self._chosen.pop(key, None)
        self._forget_made(key)

    def _forget_made(self, key: str | None) -> None:
        """What making a choice remembers of one document's text (all when None)."""
        if key is None:
            self._defined.clear()
        else:
            self._defined.pop(key, None)

    def context_for(
        self, key: str, doc: Document, cursor: int, documents: Iterable[tuple[str, Document]], max_tokens: int,
        window_tokens: int = 2048, carried: bool = True,
    ) -> RepoContext | None:  # fmt: skip
        """The context of `doc`'s prompt at `cursor` (see the module docstring): at most
        `max_tokens`, and at most half of what the current file's text takes of a window of
        `window_tokens` (budget_for). `carried`: a request will carry it (not a prefetch)."""
        previous = self._previous(key, (max_tokens, window_tokens))
        if previous is not None and not at_line_start(doc.text, cursor):
            return previous.context  # inside a line nothing changes, not even the budget
        return self._settle(key, previous, self.made(key, doc, cursor, documents, max_tokens, window_tokens))

    def _previous(self, key: str, settings: tuple[int, int]) -> Choice | None:
        previous = self._chosen.get(key)
        return None if previous is None or previous.settings != settings else previous  # a setting changed: afresh

    def made(
        self, key: str, doc: Document, cursor: int, documents: Iterable[tuple[str, Document]], max_tokens: int,
        window_tokens: int, edits: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Choice:  # fmt: skip
        """A new choice for `doc` at `cursor`: the slow part (it reads files, splits and ranks
        their text), kept by nothing yet. `edits`: the lines edited lately per document, when
        not the workspace's own (taken on another thread)."""
        settings = (max_tokens, window_tokens)
        budget = budget_for(doc.text, cursor, max_tokens, window_tokens)
        if budget <= 0:
            return Choice(frozenset(), None, budget, cursor, settings)
        chosen = self.choose(key, doc, cursor, documents, budget, view_chars(window_tokens, budget), edits)
        context = None
        if chosen.keys:
            path, _ = self.workspace.describe(doc.uri, doc.uri)
            context = RepoContext(chosen.files(), path=path, name=self.workspace.name_for(doc.uri), max_tokens=budget)
        return Choice(chosen.keys, context, budget, cursor, settings)

    def _settle(self, key: str, previous: Choice | None, made: Choice) -> RepoContext | None:
        """Keep `previous` unless `made` differs enough from it (the same budget and the same
        chunks, or close by and not substantially new, keep it); the context in force after."""
        if previous is not None and previous.budget == made.budget:
            near = abs(made.offset - previous.offset) < stale_chars(made.settings[1])
            if made.keys == previous.keys or near and not substantial(previous.keys, made.keys):
                return previous.context
        self._chosen[key] = made
        self.choices += made.context is not None
        return made.context

    def choose(
        self, key: str, doc: Document, cursor: int, documents: Iterable[tuple[str, Document]], max_tokens: int,
        view: int | None = None, edits: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Chosen:  # fmt: skip
        """Within `max_tokens`: first the definitions of the names this file uses and does not
        define (lsp_server.outline: dozens fit where one chunk does), then, in what is left, the
        chunks most like the cursor's neighbourhood (lsp_server.chunks). `view`: how much text
        before the cursor the prompt shows (self.view_chars when None)."""
        view = self.view_chars if view is None else view
        sources = self.sources(key, doc, documents, edits)
        imported = {s.path for s in sources if s.imported}
        near = identifiers(near_cursor(doc.text, cursor))
        start = cursor
        while (
            start > 0 and cursor - start < MAX_TYPED and (doc.text[start - 1].isalnum() or doc.text[start - 1] == "_")
        ):
            start -= 1
        typed = doc.text[start:cursor]
        defined, uses = self._defined_in(key, doc.text)
        chunks = [c for s in sources for c in self.chunker.chunks(s)]
        visible = frozenset(used_names(doc.text[max(0, cursor - view) : cursor])) if view else frozenset()
        outlines = [e for s in sources for e in self.outliner.entries(s)]
        ids: dict[str, set[str]] = {}
        for c in chunks:
            ids.setdefault(c.path, set()).update(c.ids)
        scored = rank(outlines, uses, near, defined, typed if len(typed) >= MIN_TYPED else "", visible,
                      related(chunks, near) if self.related else None, imported, popularity(ids, outlines))  # fmt: skip
        entries = fill(scored, round(max_tokens * OUTLINE_SHARE))  # outline.pick, with the ranking kept
        taken = set(entries)
        ranked = dict.fromkeys(e for _, e, _ in scored if e in taken)
        order = (*ranked, *(e for e in entries if e not in ranked))  # then an anchor brought along, not ranked itself
        return Chosen(
            tuple(entries), tuple(choose(chunks, near, defined, max_tokens - tokens_of(entries), typed)), order
        )

    def sources(
        self, key: str, doc: Document, documents: Iterable[tuple[str, Document]],
        edits: Mapping[str, tuple[int, ...]] | None = None,
    ) -> list[Source]:  # fmt: skip
        """The open documents (not this one), the files this one imports, regions of closed ones."""
        ws = self.workspace
        found: list[Source] = []
        paths: set[str] = set()
        open_keys = set()
        own_path, _ = ws.describe(doc.uri, doc.uri)
        for other_key, other in documents:
            open_keys.add(other_key)
            if other_key == key or other.stale:
                continue
            path, usable = ws.describe(other.uri, doc.uri)  # with no workspace folder: under doc's own
            if usable and path not in paths:
                paths.add(path)
                edited = ws.edits(other_key) if edits is None else edits.get(other_key, ())
                found.append(Source(other_key, path, other.text, edited))
        imports = ws.imports(doc.uri, doc.text)
        imported_paths = {i.path for i in imports}
        found = [replace(f, imported=True) if f.path in imported_paths else f for f in found]
        for imported in imports:
            if imported.path not in paths and imported.path != own_path:
                paths.add(imported.path)
                found.append(replace(imported, imported=True))
        for region in ws.ring():
            if region.key.rsplit("#", 1)[0] not in open_keys:
                found.append(region)
        return found

    def _defined_in(self, key: str, text: str) -> tuple[frozenset[str], dict[str, int]]:
        """(the names this document defines, how often it uses each identifier), per text."""
        cached = self._defined.get(key)
        if cached is None or cached[0] is not text:
            scan = text[:DEFINITIONS_SCAN_CHARS]
            cached = (text, definitions(scan), used_names(scan))
            self._defined[key] = cached
        return cached[1], cached[2]


class Background(ContextChooser):
    """The server's chooser: every choice is made on one worker thread (it reads files, matches
    ignore rules, splits and ranks other files' text), never on the event loop, so a slow disk
    or a large workspace holds back no keystroke.

    A call on the loop only takes what is ready. At a line start it asks for a new choice and
    takes the one made since the last (a line behind at most); inside a line it keeps the one in
    force, so the prompt's start never moves and a keystroke there decodes no prompt token. While
    no request has carried a document's choice yet (just opened: only its prefetch has), a newer
    one is taken at once; before the first is made, requests go without context and the
    prefetch waits for it (`waiting`), then `on_ready` is told (on the worker thread) so the
    server prefetches with it."""

    def __init__(self, workspace: Workspace | None = None, on_ready: Callable[[str], None] | None = None) -> None:
        super().__init__(workspace)
        self.on_ready = on_ready  # called with a document's URI when a choice it can take at once is made
        self._cond = threading.Condition()
        self._wanted: OrderedDict[str, Callable[[], None]] = OrderedDict()  # name -> its newest task, in order
        self._running: str | None = None
        self._ready: dict[str, Choice] = {}  # document key -> a choice made and not yet taken
        self._carried: set[str] = set()  # documents whose choice in force a request has carried
        self._deferred: set[str] = set()  # documents whose prefetch waits for their first choice
        self._asked: dict[
            str, tuple[Document, int]
        ] = {}  # document key -> the text and cursor a choice was last asked for
        self._epochs: dict[str, int] = {}  # document key -> bumped when it is forgotten (a task of before is dropped)
        self._epoch = 0  # bumped when everything is forgotten
        self._thread: threading.Thread | None = None

    # --- on the event loop -------------------------------------------------------------------

    def context_for(
        self, key: str, doc: Document, cursor: int, documents: Iterable[tuple[str, Document]], max_tokens: int,
        window_tokens: int = 2048, carried: bool = True,
    ) -> RepoContext | None:  # fmt: skip
        settings = (max_tokens, window_tokens)
        previous = self._previous(key, settings)
        asked = self._asked.get(key)
        new_line = at_line_start(doc.text, cursor) and (asked is None or asked[0] is not doc or asked[1] != cursor)
        with self._cond:
            if previous is None:
                self._carried.discard(key)
            # May the context change now? Also inside a line while the one in force is the
            # provisional none (the first choice was not ready): one prompt decoded again, once.
            provisional = previous is not None and previous.budget == PROVISIONAL
            free = previous is None or new_line or key not in self._carried or provisional
            made = self._ready.pop(key, None) if free else None
            busy = key == self._running or key in self._wanted
        if made is not None and made.settings != settings:
            made = None  # made under other settings
        if new_line or previous is None and made is None and not busy:
            self._ask(key, doc, cursor, documents, max_tokens, window_tokens)
        if made is not None:
            context = self._settle(key, previous, made)
            if self._chosen[key] is made:
                with self._cond:
                    self._carried.discard(key)  # a new choice: no request has carried it yet
        elif previous is not None:
            context = previous.context
        else:  # nothing made yet: go without, and keep that until a choice may be taken
            self._chosen[key] = Choice(frozenset(), None, PROVISIONAL, cursor, settings)
            context = None
        if carried:
            with self._cond:
                self._carried.add(key)
        return context

    def waiting(self, key: str) -> bool:
        """True while the document's first choice is being made; `on_ready` is told when it is."""
        with self._cond:
            if self._choosing_first(key):
                self._deferred.add(key)
                return True
            return False

    def first_choice(self, key: str, timeout: float) -> bool:
        """Wait, on a thread other than the loop's, until the document's first choice is made (a
        request for a just-opened file then carries it from its first keystroke); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._choosing_first(key), timeout)

    def choosing_first(self, key: str) -> bool:
        """True while the document's first choice is being made and not yet ready."""
        with self._cond:
            return self._choosing_first(key)

    def _choosing_first(self, key: str) -> bool:  # with self._cond held
        chosen = self._chosen.get(key)
        busy = key == self._running or key in self._wanted
        return busy and key not in self._ready and (chosen is None or chosen.budget == PROVISIONAL)

    def set_folders(self, folders: Iterable[str]) -> None:
        folders = list(folders)
        self._submit("\0folders", lambda: self.workspace.set_roots(folders))

    def closed(self, key: str, uri: str, text: str) -> None:
        lines = self.workspace.take_edits(key)
        self._submit(f"\0closed {key}", lambda: self.workspace.keep_regions(key, uri, text, lines))

    def forget(self, key: str | None = None) -> None:
        with self._cond:
            if key is None:
                self._epoch += 1
                self._ready.clear()
                self._carried.clear()
                self._deferred.clear()
                self._asked.clear()
                self._chosen.clear()
            else:
                self._epochs[key] = self._epochs.get(key, 0) + 1
                self._ready.pop(key, None)
                self._carried.discard(key)
                self._deferred.discard(key)
                self._asked.pop(key, None)
                self._chosen.pop(key, None)
        self._submit(f"\0forget {key}", lambda: self._forget_made(key))  # the worker's own

    def idle(self, timeout: float) -> bool:
        """Wait until no choice is being made or waits to be (tests); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._running is None and not self._wanted, timeout)

    def _ask(
        self, key: str, doc: Document, cursor: int, documents: Iterable[tuple[str, Document]], max_tokens: int,
        window_tokens: int,
    ) -> None:  # fmt: skip
        """Have the worker make a choice at `cursor` (it replaces one asked for before and not begun)."""
        docs = list(documents)  # documents are snapshots; the store and the edits change on this thread
        edits = {other: self.workspace.edits(other) for other, _ in docs}
        self._asked[key] = (doc, cursor)
        epoch = (self._epoch, self._epochs.get(key, 0))

        def task() -> None:
            started = time.perf_counter()
            made = self.made(key, doc, cursor, docs, max_tokens, window_tokens, edits)
            with self._cond:
                if (self._epoch, self._epochs.get(key, 0)) != epoch:
                    return  # forgotten meanwhile
                self._ready[key] = made
                tell = key in self._deferred
                self._deferred.discard(key)
                self._cond.notify_all()  # first_choice
            files = len(made.context.files) if made.context is not None else 0
            logger.info("context chosen in %.0f ms (%d files)", (time.perf_counter() - started) * 1000, files)
            if tell and self.on_ready is not None:
                self.on_ready(doc.uri)

        self._submit(key, task)

    # --- the worker ----------------------------------------------------------------------------

    def _submit(self, name: str, task: Callable[[], None]) -> None:
        with self._cond:
            self._wanted[name] = task
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cpc-context", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        """Daemon: a read stuck on a dead network mount must not keep the process from exiting."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._wanted))
                name, task = self._wanted.popitem(last=False)
                self._running = name
            try:
                task()
            except Exception as exc:  # a failure costs the context, never the server
                logger.error("choosing context failed: %s", frames(exc))
            finally:
                with self._cond:
                    self._running = None
                    self._cond.notify_all()
