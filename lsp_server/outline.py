"""The definition lines of other files: the names the current file uses and does not define, in few tokens.

A 32-line chunk costs about 300 tokens, so the default budget (512) holds one or two, and at the
start of a line (when the choice is made) nothing says which of the sibling files' hundreds of
chunks defines the name about to be typed: measured on real projects, the chosen chunks held the
definition of the identifier typed next at about one cursor in eight. A definition's line alone
(``def get_event_loop():``, ``LZ4FLIB_API size_t LZ4F_compressBound(size_t srcSize, ...);``,
``class Range {``) costs about 10 to 30 tokens, so the budget holds dozens: an outline of what
the current file calls, like a stub file (Aider's repository map and Tabby's declarations are
the same idea).

Each file's lines are read once per text (`Outliner`, like `Chunker`): per language, the lines
that define a name (functions, classes, methods, module-level and ``self.``/``this.``
assignments; C macros, functions, typedefs, struct fields and enum members), each with the line
that encloses it (a method's class, a field's struct) when there is one. Comments and docstrings
are skipped.

`pick` ranks them: the names the current file uses first; then, for the names it has not used yet
(the ones only the context can spell), what tells them apart at a line's start: membership of a
used class or enum, closeness in their file to a used definition (files keep related things
together), how many of the other files use the name, and the code like the cursor's that uses it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from lsp_server.workspace import Source, language_of

CHARS_PER_TOKEN = 3  # as lsp_server.chunks: cautious for code
MAX_LINE_CHARS = 160  # a longer definition line is cut (its name is near its start)
MAX_ENTRIES = 4_096  # per file: a bigger outline is generated code

_PY = (
    re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)"),
    re.compile(r"^([ \t]*)class[ \t]+([A-Za-z_]\w*)"),
    re.compile(r"^()([A-Za-z_]\w*)[ \t]*(?::[^=\n]+)?=(?!=)"),
    re.compile(r"^([ \t]+)self\.([A-Za-z_]\w*)[ \t]*(?::[^=\n]+)?=(?!=)"),
)
_JS_KEYWORDS = r"(?!(?:if|for|while|switch|catch|return|function|else|do|try|with|new|typeof|await)\b)"
_JS = (
    re.compile(r"^([ \t]*)(?:export[ \t]+)?(?:default[ \t]+)?(?:async[ \t]+)?function[ \t]*\*?[ \t]*([\w$]+)"),
    re.compile(r"^([ \t]*)(?:export[ \t]+)?(?:default[ \t]+)?class[ \t]+([\w$]+)"),
    re.compile(r"^()(?:export[ \t]+)?(?:const|let|var)[ \t]+([\w$]+)[ \t]*="),
    re.compile(r"^([ \t]*)(?:module\.)?exports\.([\w$]+)[ \t]*="),
    re.compile(r"^([ \t]+)this\.([\w$]+)[ \t]*=(?!=)"),
    re.compile(
        r"^([ \t]+)(?:static[ \t]+|async[ \t]+|get[ \t]+|set[ \t]+|\*)*"
        + _JS_KEYWORDS
        + r"([\w$]+)[ \t]*\([^)\n]*\)[ \t]*\{"
    ),
    re.compile(
        r"^([ \t]*)" + _JS_KEYWORDS + r"([\w$]+)[ \t]*:[ \t]*(?:async[ \t]+)?(?:function\b|\([^)\n]*\)[ \t]*=>)"
    ),
)
_C_KEYWORDS = r"(?!(?:return|else|if|while|for|switch|case|goto|do|sizeof)\b)"
_C = (
    re.compile(r"^([ \t]*)#[ \t]*define[ \t]+([A-Za-z_]\w*)"),
    re.compile(r"^()" + _C_KEYWORDS + r"(?:[A-Za-z_]\w*[ \t\*]+)+\**([A-Za-z_]\w*)[ \t]*\("),  # a function at column 0
    re.compile(r"^([ \t]*)typedef\b[^;{(]*?\b([A-Za-z_]\w*)[ \t]*;"),
    re.compile(r"^()\}[ \t]*([A-Za-z_]\w*)[ \t]*;"),  # the end of a typedef struct/enum
    re.compile(r"^([ \t]*)(?:typedef[ \t]+)?(?:struct|enum|union)[ \t]+([A-Za-z_]\w*)[ \t]*\{?[ \t]*$"),
)
_C_MEMBER = re.compile(
    r"^([ \t]+)"
    + _C_KEYWORDS
    + r"(?:(?:const|unsigned|signed|struct|enum)[ \t]+)*(?:[A-Za-z_]\w*[ \t\*]+)+\**([A-Za-z_]\w*)[ \t]*(?:\[[^\]]*\])?[ \t]*;"
)
_C_ENUMERATOR = re.compile(r"^([ \t]+)([A-Za-z_]\w*)[ \t]*(?:=[^,;{}]*)?,?[ \t]*(?:/[/*].*)?$")
_C_BLOCK = re.compile(r"\b(struct|union|enum)\b[^;()]*\{[ \t]*(?:/[/*].*)?$")
# A block's header alone on its line, its brace on the next (`enum JSTYPES` then `{`: Allman style)
_C_HEADER = re.compile(r"^[ \t]*(?:typedef[ \t]+)?(struct|union|enum)\b[^;(){}=]*$")
_JS_HEADER = re.compile(r"^[ \t]*(?:export[ \t]+)?(?:default[ \t]+)?(class)\b[^;(){}=]*$")
# A pointer to a function, as a typedef or a struct's field: `typedef int (*JSPFN_ITERNEXT)(...)`
_C_FUNCTION_POINTER = re.compile(
    r"^([ \t]*)(?:typedef[ \t]+)?[A-Za-z_][\w \t\*]*\([ \t]*\*[ \t]*([A-Za-z_]\w*)[ \t]*\)[ \t]*\("
)


@dataclass(frozen=True)
class Entry:
    """One definition line of a source: `key` is stable across keystrokes (the source's key and
    the line), `head` the lines shown before it (the class of a method, the struct of a field)."""

    key: str
    path: str
    line: int
    name: str
    text: str
    head: tuple[tuple[int, str], ...] = ()

    @property
    def tokens(self) -> int:
        return len(self.text) // CHARS_PER_TOKEN + 1


def _cut(line: str) -> str:
    line = line.rstrip("\r\n")
    return (line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS]) + "\n"


def outline(text: str, language: str | None) -> list[tuple[int, str, str, tuple[tuple[int, str], ...]]]:
    """(line, name, line text, enclosing lines) of each definition in `text`, in order."""
    if language == "python":
        return _outline_python(text)
    if language in ("javascript", "c"):
        return _outline_braces(text, language)
    return []


def _outline_python(text: str) -> list[tuple[int, str, str, tuple[tuple[int, str], ...]]]:
    out = []
    classes: list[tuple[int, int, str]] = []  # (indent, line, text) of the enclosing classes
    in_string: str | None = None
    for number, line in enumerate(text.splitlines()):
        if in_string is not None:
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        while classes and classes[-1][0] >= indent:
            classes.pop()
        for pattern in _PY:
            m = pattern.match(line)
            if m:
                head = tuple((n, t) for _, n, t in classes[-1:])
                out.append((number, m.group(2), _cut(line), head))
                if stripped.startswith("class"):
                    classes.append((indent, number, _cut(line)))
                break
        for quote in ('"""', "'''"):
            if line.count(quote) % 2 == 1:
                in_string = quote
                break
        if len(out) >= MAX_ENTRIES:
            break
    return out


def _outline_braces(text: str, language: str) -> list[tuple[int, str, str, tuple[tuple[int, str], ...]]]:
    """JavaScript and C: definitions by line, with the enclosing class (JS) or struct/enum (C)."""
    patterns = _JS if language == "javascript" else _C
    out: list[tuple[int, str, str, tuple[tuple[int, str], ...]]] = []
    blocks: list[tuple[int, tuple[int, str] | None, str | None]] = []  # (depth it opened at, its line if kind, kind)
    depth = 0
    in_comment = False
    header: tuple[int, str, str] | None = None  # a block header whose brace is on the next line
    for number, line in enumerate(text.splitlines()):
        if in_comment:
            if "*/" in line:
                in_comment = False
            continue
        stripped = line.strip()
        if stripped.startswith("/*") and "*/" not in stripped:
            in_comment = True
            continue
        if not stripped or stripped.startswith(("//", "/*", "*")):
            continue
        inner = blocks[-1] if blocks else None
        found = None
        if language == "c" and (inner is None or inner[2] in ("struct", "union")):
            found = _C_FUNCTION_POINTER.match(line)
        if found is not None:
            pass
        elif language == "c" and inner is not None and inner[2] in ("struct", "union"):
            found = _C_MEMBER.match(line)
        elif language == "c" and inner is not None and inner[2] == "enum":
            found = _C_ENUMERATOR.match(line)
        if found is None:
            for pattern in patterns:
                found = pattern.match(line)
                if found:
                    break
        if found is not None:
            enclosing = next((b[1] for b in reversed(blocks) if b[1] is not None), None)
            out.append((number, found.group(2), _cut(line), (enclosing,) if enclosing else ()))
        code = _strip_literals(line)
        opened = code.count("{")
        closed = code.count("}")
        if opened > closed:
            kind = None
            opener = (number, _cut(line))
            if header is not None and code.lstrip().startswith("{"):
                kind, opener = header[2], (header[0], header[1])
            elif language == "c":
                m = _C_BLOCK.search(code)
                kind = m.group(1) if m else None
            elif re.search(r"\bclass\b", code):
                kind = "class"
            blocks.append((depth, opener if kind else None, kind))
        head_match = (_C_HEADER if language == "c" else _JS_HEADER).match(code) if opened == closed == 0 else None
        header = (number, _cut(line), head_match.group(1)) if head_match else None
        depth += opened - closed
        while blocks and depth <= blocks[-1][0]:
            blocks.pop()
        if len(out) >= MAX_ENTRIES:
            break
    return out


def _strip_literals(line: str) -> str:
    """The line without strings and a trailing // comment (their braces do not count)."""
    line = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`(?:\\.|[^`\\])*`', '""', line)
    return line.split("//", 1)[0]


class Outliner:
    """Entries of each source, remembered while its text is the same object."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, list[Entry]]] = {}

    def entries(self, source: Source) -> list[Entry]:
        cached = self._cache.get(source.key)
        if cached is None or cached[0] is not source.text:
            language = language_of(source.path)
            made = [Entry(f"{source.key}#{line}", source.path, line, name, text, head)
                    for line, name, text, head in outline(source.text, language)]  # fmt: skip
            cached = (source.text, made)
            self._cache[source.key] = cached
        return cached[1]

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._cache.pop(key, None)


NEAR_WEIGHT = 3  # a name used near the cursor counts as three uses elsewhere in the file
TYPED_WEIGHT = 100  # a name the partial word begins: what is being typed now
FILE_TOKENS = 8  # a file's header (separator and path) in the layout
PER_NAME = 2  # definitions of one name kept (e.g. a declaration and its definition in two files)
# A name the file has not used yet can only be spelled from another file, and at a line's start
# nothing says which: the likeliest are the other members of what it already uses (the enum of a
# constant it names, the class of a method it calls), then the rest of the files it draws on.
SIBLING_WEIGHT = 0.5  # an unused member of a struct, enum or class one of whose members is used
SAME_FILE_WEIGHT = 0.25  # an unused definition of a file some of whose definitions are used


PRIVATE_FACTOR = 0.5  # an unused name its own file keeps to itself (`_name`, a C `static` in a .c file)
VISIBLE_FACTOR = 0.1  # a name the current file's part of the prompt already shows: the model can copy it
RELATED_WEIGHT = 1.0  # per unit of similarity of the other files' code that uses the name (see `related`)
# Files keep related things together (an enum's members, a family of functions, a regex and its
# replacement string): an unused definition a few lines from one the file uses is likelier next
# than one at the other end of the file, which plain line order would prefer.
PROXIMITY_WEIGHT = 0.5  # an unused definition on the very line next to a used one near the cursor
PROXIMITY_LINES = 40  # ... falling to nothing this many lines away
PROXIMITY_FAR = 0.5  # a used definition whose name is not near the cursor counts this much as an anchor
# C fields are short common words (`start`, `end`, `free`, `type`): a parameter of the same name
# made a whole struct the file never names look used (the encoder's 40 fields in the decoder).
# A field counts as used only when the file names its struct (tag or typedef name).
UNNAMED_FIELD_FACTOR = 0.2
# What the rest of the project calls, this file likely calls too: a header's typedef every source
# uses before its hundredth macro (at a file's start nothing else tells them apart).
POPULAR_WEIGHT = 0.5  # per share of the other files that use the name
_C_TAG = re.compile(r"\b(?:struct|union)[ \t]+([A-Za-z_]\w*)")


def pick(
    entries: Iterable[Entry], uses: dict[str, int], near: frozenset[str], defined_here: frozenset[str], budget: int,
    typed: str = "", visible: frozenset[str] = frozenset(), related: Mapping[str, float] | None = None,
    drawn: Iterable[str] = (), popular: Mapping[str, float] | None = None,
) -> list[Entry]:  # fmt: skip
    """The definitions of the names the current file uses and does not define, most used first
    (a use near the cursor counts NEAR_WEIGHT), then the unused ones beside them (SIBLING_WEIGHT,
    SAME_FILE_WEIGHT), within `budget` tokens (with their enclosing lines and each file's
    header), in a stable order (path, then line). A name in `visible` (the current file's text
    in the prompt shows it) counts VISIBLE_FACTOR as much: the model spells it from there.
    `related`: names the other files use in code like the cursor's (RELATED_WEIGHT each).
    `drawn`: paths drawn on whatever the file uses yet (the files it imports). `popular`: per
    name, the share of the other files that use it (POPULAR_WEIGHT each, for unused names)."""
    ranked = rank(entries, uses, near, defined_here, typed, visible, related, drawn, popular)
    return fill(ranked, budget)


def rank(
    entries: Iterable[Entry], uses: dict[str, int], near: frozenset[str], defined_here: frozenset[str],
    typed: str = "", visible: frozenset[str] = frozenset(), related: Mapping[str, float] | None = None,
    drawn: Iterable[str] = (), popular: Mapping[str, float] | None = None,
) -> list[tuple[float, Entry, Entry | None]]:  # fmt: skip
    """(score, entry, anchor) of every definition worth a place, best first (see `pick` for the
    terms); `anchor`: for an unused entry that comes right after a used definition in its file
    (the next member of an enum, the next function of a family), that definition (`fill` shows
    it with the entry: that is what says which one comes next)."""
    related = related or {}
    popular = popular or {}
    entries = list(entries)
    unnamed = unnamed_fields(entries, uses)
    scored: list[tuple[float, Entry, Entry | None]] = []
    unused: list[Entry] = []
    families: set[tuple[str, int]] = set()
    files: set[str] = set(drawn)
    anchors: dict[str, list[tuple[int, float]]] = {}  # per path: (line, weight) of the used definitions
    anchor_at: dict[tuple[str, int], Entry] = {}  # the used definition on each anchor line
    before = previous_lines(entries)
    for entry in entries:
        name = entry.name
        if name in defined_here or name.startswith("__"):
            continue
        score: float = uses.get(name, 0) + (NEAR_WEIGHT if name in near else 0)
        if typed and name != typed and name.startswith(typed):
            score += TYPED_WEIGHT
        if score > 0:
            if name in visible:
                score *= VISIBLE_FACTOR
            if entry.key in unnamed:
                scored.append((UNNAMED_FIELD_FACTOR * score + RELATED_WEIGHT * related.get(name, 0.0), entry, None))
                continue
            scored.append((score + RELATED_WEIGHT * related.get(name, 0.0), entry, None))
            families.update((entry.path, n) for n, _ in entry.head)
            families.add((entry.path, entry.line))  # a used class, struct or enum: its members are siblings
            files.add(entry.path)
            anchors.setdefault(entry.path, []).append((entry.line, 1.0 if name in near else PROXIMITY_FAR))
            anchor_at.setdefault((entry.path, entry.line), entry)
        else:
            unused.append(entry)
    for lines in anchors.values():
        lines.sort()
    for entry in unused:
        bonus = RELATED_WEIGHT * related.get(entry.name, 0.0) + POPULAR_WEIGHT * popular.get(entry.name, 0.0)
        if entry.key in unnamed:
            if bonus > 0:
                scored.append((bonus * UNNAMED_FIELD_FACTOR, entry, None))
            continue
        bonus += PROXIMITY_WEIGHT * proximity(entry, anchors.get(entry.path, []))
        anchor = anchor_at.get(
            before.get(entry.key, ("", -1))
        )  # a used definition right before it: it follows that one
        if any((entry.path, n) in families for n, _ in entry.head):
            base = SIBLING_WEIGHT
        elif entry.path in files:
            base = SAME_FILE_WEIGHT
        elif bonus > 0:
            base = 0.0
        else:
            continue
        scored.append(((base + bonus) * (PRIVATE_FACTOR if private(entry) else 1.0), entry, anchor))
    scored.sort(key=lambda se: (-se[0], se[1].path, se[1].line))
    return scored


def fill(scored: list[tuple[float, Entry, Entry | None]], budget: int) -> list[Entry]:
    """The best of `scored` while they fit `budget` tokens (with their enclosing lines and each
    file's header), at most PER_NAME definitions a name, in a stable order (path, then line).

    An entry that comes right after a used definition in its file (its anchor, from `rank`) brings
    that definition's line along when both fit, even when the current file already shows the
    name: the pair is what says which one comes next (one line more per entry, no more: a wider
    run cost the unseen members their place at a file's start, where the budget is small).
    Measured on a switch over an enum's members (argon2.c's error messages): with the members the
    file had just written left out of the context (they count little, being visible), the enum
    read `OK = 0, PWD_TOO_SHORT = -4, PWD_TOO_LONG, SALT_TOO_SHORT` and the 0.5B, after `case
    ARGON2_OUTPUT_TOO_LONG:`, went on with SALT_TOO_SHORT: nothing showed which member follows
    the one just written."""
    chosen: list[Entry] = []
    seen: set[tuple[str, str]] = set()
    per_name: dict[str, int] = {}
    lines: set[tuple[str, int]] = set()
    paths: set[str] = set()
    left = budget

    def allowed(entry: Entry) -> bool:
        return (entry.path, entry.name) not in seen and per_name.get(entry.name, 0) < PER_NAME

    def cost_of(entry: Entry, also: Entry | None = None) -> int:
        """Tokens `entry` adds (its line, its enclosing lines not shown yet, its file's header);
        `also`: an entry taken with it, whose lines count as shown."""
        shown = lines | ({(also.path, also.line), *((also.path, n) for n, _ in also.head)} if also else set())
        cost = entry.tokens + sum(len(t) // CHARS_PER_TOKEN + 1 for n, t in entry.head if (entry.path, n) not in shown)
        return cost + (FILE_TOKENS if entry.path not in paths and not (also and also.path == entry.path) else 0)

    def take(entry: Entry) -> None:
        chosen.append(entry)
        seen.add((entry.path, entry.name))
        per_name[entry.name] = per_name.get(entry.name, 0) + 1
        lines.add((entry.path, entry.line))
        lines.update((entry.path, n) for n, _ in entry.head)
        paths.add(entry.path)

    for _, entry, anchor in scored:
        if not allowed(entry):
            continue
        cost = cost_of(entry)
        if cost > left:
            continue
        if anchor is not None and (anchor.path, anchor.line) not in lines and allowed(anchor):
            pair = cost_of(anchor) + cost_of(entry, anchor)
            if pair <= left:
                left -= pair
                take(anchor)
                take(entry)
                continue
        left -= cost
        take(entry)
    return sorted(chosen, key=lambda e: (e.path, e.line))


def popularity(ids: Mapping[str, AbstractSet[str]], entries: Iterable[Entry]) -> dict[str, float]:
    """Per defined name, the share of the files in `ids` (path: the identifiers it uses) other
    than the ones defining it that use it (set intersections: a few ms for thousands of names)."""
    homes: dict[str, set[str]] = {}
    for entry in entries:
        homes.setdefault(entry.name, set()).add(entry.path)
    counts: dict[str, int] = {}
    for path, used in ids.items():
        for name in homes.keys() & used:
            if path not in homes[name]:
                counts[name] = counts.get(name, 0) + 1
    out: dict[str, float] = {}
    for name, count in counts.items():
        others = len(ids) - sum(1 for p in homes[name] if p in ids)
        out[name] = count / others
    return out


def unnamed_fields(entries: list[Entry], uses: Mapping[str, int]) -> frozenset[str]:
    """Keys of the C struct and union fields whose struct the current file never names (neither
    its tag nor its typedef name, the `} Name;` line)."""
    names: dict[tuple[str, int], set[str]] = {}
    fields: list[tuple[str, tuple[str, int]]] = []
    languages: dict[str, str | None] = {}
    for entry in entries:
        if not entry.head:
            continue
        language = languages.get(entry.path, "?")
        if language == "?":
            language = languages[entry.path] = language_of(entry.path)
        if language != "c":
            continue
        line, text = entry.head[0]
        tags = _C_TAG.findall(text)
        if not tags:
            continue  # an enum's members are constants of the whole program
        family = (entry.path, line)
        own = names.setdefault(family, set(tags))
        if entry.text.lstrip().startswith("}"):
            own.add(entry.name)
        else:
            fields.append((entry.key, family))
    named = {f for f, ns in names.items() if any(n in uses or n.lstrip("_") in uses for n in ns)}
    return frozenset(key for key, family in fields if family not in named)


def proximity(entry: Entry, anchors: list[tuple[int, float]]) -> float:
    """0 to 1: how close `entry` is, in its file, to a used definition (weighted: near the cursor
    or not). `anchors`: (line, weight), sorted by line."""
    best = 0.0
    i = bisect.bisect_left(anchors, (entry.line - PROXIMITY_LINES, 0.0))
    while i < len(anchors) and anchors[i][0] <= entry.line + PROXIMITY_LINES:
        line, weight = anchors[i]
        best = max(best, weight * (1.0 - abs(entry.line - line) / PROXIMITY_LINES))
        i += 1
    return best


def tokens_of(entries: Iterable[Entry]) -> int:
    """The tokens `entries` take in the prompt, counted as `fill` counts them (each one's line and
    enclosing lines, a header per file), cautiously: an enclosing line two entries share counts twice."""
    entries = list(entries)
    lines = sum(e.tokens + sum(len(t) // CHARS_PER_TOKEN + 1 for _, t in e.head) for e in entries)
    return lines + FILE_TOKENS * len({e.path for e in entries})


def previous_lines(entries: Iterable[Entry]) -> dict[str, tuple[str, int]]:
    """Per entry's key, (path, line) of the definition before it in its file (outline order)."""
    out: dict[str, tuple[str, int]] = {}
    last: dict[str, int] = {}
    for entry in entries:
        if entry.path in last:
            out[entry.key] = (entry.path, last[entry.path])
        last[entry.path] = entry.line
    return out


def private(entry: Entry) -> bool:
    """A definition its language marks as its file's own: a leading underscore (Python, JavaScript),
    `static` in a C source file (not a header)."""
    if entry.path.endswith((".c", ".cc", ".cpp")) and entry.text.lstrip().startswith("static"):
        return True
    return entry.name.startswith("_")


def used_names(text: str) -> dict[str, int]:
    """How often each identifier occurs in `text`."""
    counts: dict[str, int] = {}
    for name in re.findall(r"[A-Za-z_$][\w$]*", text):
        counts[name] = counts.get(name, 0) + 1
    return counts


def as_view(chunks: Iterable[tuple[str, int, str]], entries: Iterable[Entry]) -> list[tuple[str, str]]:
    """(path, text) per file: the lines of its chosen chunks (path, first line, text) and
    definitions (with their enclosing lines), each line once, in the file's order; files by path."""
    lines: dict[str, dict[int, str]] = {}
    for path, start, text in chunks:
        own = lines.setdefault(path, {})
        for i, line in enumerate(text.splitlines(keepends=True)):
            own[start + i] = line if line.endswith("\n") else line + "\n"
    for entry in entries:
        own = lines.setdefault(entry.path, {})
        for n, t in (*entry.head, (entry.line, entry.text)):
            own.setdefault(n, t)
    return [(path, "".join(own[n] for n in sorted(own))) for path, own in sorted(lines.items())]
