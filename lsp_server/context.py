"""Which other files' text goes in a document's prompt, kept stable so the KV cache survives.

The choice (lsp_server.chunks over lsp_server.workspace's sources) is made per document and
kept: it is made again only when the cursor is at the start of a line (the user has finished a
line: a new one begins), and the new choice replaces the old only when more than CHANGE_SHARE of
its chunks are new. Between those moments every request of the document carries the very same
`RepoContext` value (texts as they were when chosen), so the prompt's start never moves while
the user types: a keystroke inside a word decodes no prompt token, context or not. A new choice
is first sent by the prefetch that follows the edit (lsp_server.server), so its layout is decoded
while the user reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from engine import COLD_EXTRA_TOKENS, COLD_SHARE, ContextFile, RepoContext
from lsp_server.chunks import Chunk, Chunker, choose, definitions, identifiers, near_cursor, related
from lsp_server.documents import Document
from lsp_server.outline import Entry, Outliner, as_view, fill, popularity, rank, tokens_of, used_names
from lsp_server.workspace import Source, Workspace

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
    context, or a few hundred milliseconds more on a short file (which needs another file's names
    most: a test, a script beside the module it imports). In steps of BUDGET_STEP, so the budget
    (and the choice) stays put while a line is typed. This sizes the choice; the engine, which
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


class ContextChooser:
    def __init__(self, workspace: Workspace | None = None) -> None:
        self.workspace = workspace or Workspace()
        self.chunker = Chunker()
        self.outliner = Outliner()
        self._chosen: dict[str, Choice] = {}
        self._defined: dict[str, tuple[str, frozenset[str], dict[str, int]]] = {}
        self.choices = 0  # contexts adopted (a new layout each: for stats)
        self.view_chars = VIEW_CHARS  # the current file's text before the cursor the prompt likely shows
        self.related = True

    def forget(self, key: str | None = None) -> None:
        """Drop the kept choice of one document (all when None), e.g. when a setting changed."""
        if key is None:
            self._chosen.clear()
            self._defined.clear()
        else:
            self._chosen.pop(key, None)
            self._defined.pop(key, None)

    def context_for(
        self, key: str, doc: Document, cursor: int, documents: Iterable[tuple[str, Document]], max_tokens: int,
        window_tokens: int = 2048,
    ) -> RepoContext | None:  # fmt: skip
        """The context of `doc`'s prompt at `cursor` (see the module docstring): at most
        `max_tokens`, and at most half of what the current file's text takes of a window of
        `window_tokens` (budget_for)."""
        previous = self._chosen.get(key)
        if previous is not None and previous.settings != (max_tokens, window_tokens):
            previous = None  # a setting changed: choose afresh
        if previous is not None and not at_line_start(doc.text, cursor):
            return previous.context  # inside a line nothing changes, not even the budget
        budget = budget_for(doc.text, cursor, max_tokens, window_tokens)
        if budget <= 0:
            self._chosen[key] = Choice(frozenset(), None, budget, cursor, (max_tokens, window_tokens))
            return None
        self.view_chars = view_chars(window_tokens, budget)
        chosen = self.choose(key, doc, cursor, documents, budget)
        keys = chosen.keys
        near = abs(cursor - previous.offset) < stale_chars(window_tokens) if previous is not None else False
        same_budget = previous is not None and previous.budget == budget
        if (
            previous is not None
            and same_budget
            and (keys == previous.keys or near and not substantial(previous.keys, keys))
        ):
            return previous.context
        context = None
        if keys:
            path, _ = self.workspace.describe(doc.uri, doc.uri)
            context = RepoContext(chosen.files(), path=path, name=self.workspace.name_for(doc.uri), max_tokens=budget)
        self._chosen[key] = Choice(keys, context, budget, cursor, (max_tokens, window_tokens))
        self.choices += context is not None
        return context

    def choose(
        self, key: str, doc: Document, cursor: int, documents: Iterable[tuple[str, Document]], max_tokens: int
    ) -> Chosen:
        """Within `max_tokens`: first the definitions of the names this file uses and does not
        define (lsp_server.outline: dozens fit where one chunk does), then, in what is left, the
        chunks most like the cursor's neighbourhood (lsp_server.chunks)."""
        sources = self.sources(key, doc, documents)
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
        visible = (
            frozenset(used_names(doc.text[max(0, cursor - self.view_chars) : cursor]))
            if self.view_chars
            else frozenset()
        )
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

    def sources(self, key: str, doc: Document, documents: Iterable[tuple[str, Document]]) -> list[Source]:
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
                found.append(Source(other_key, path, other.text, ws.edits(other_key)))
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
