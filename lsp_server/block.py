"""Where a multi-line suggestion ends: the block being written, and nothing the document already has.

Pure text logic, no protocol and no model. `at` says, for the `multiLine` mode, whether a
suggestion at the cursor may span lines, and returns what `shape` needs: `context` reads the
document around the cursor once, `expects_block` says whether a line that opens a block was just
written (Copilot's cue for going multi-line). `shape` cuts what the model added, in this order:

1. **Indentation**: the first line (after the cursor's own) indented less than the block's
   `floor` ends the block. Blank lines never do. The floor is the cursor line's indentation, or one
   column deeper than a line that opens a block when the cursor ends that line.
2. **Retyping**: a line equal (trimmed) to the next non-blank line after the cursor's line ends
   the suggestion before it: accepting it would write that line twice.
3. **Brackets**: a closer that would close a bracket which the text after the cursor already
   closes ends the suggestion before it (``foo(|)`` gets ``a, b``, not ``a, b)``); so does a
   closer matching nothing. Then the suggestion is cut back to the last place where every bracket
   it opened is closed again, preferring a line end.
4. **Confidence** (the gate, per line): given how many characters the gate keeps, whole lines
   only; within the first line, what the gate keeps.
5. **No block left open**: a suggestion of several lines never ends with a line that opens a
   block (`if (!res.ok) {`, `if x:`, `foo(`): the block it opens has nothing in it yet, so the
   suggestion ends before that line (a budget or the gate cut it there; the block, whole, would
   have been kept by rule 3).

At the end of a line where no block is expected, a model that ends the line at once gets to
write the next line (`ends_line`, `below`): one line, at any indentation, by rules 2 and 3 (it
may leave a bracket open or open a block, as a single line may).

Brackets inside string literals (a line's ``'``, ``"`` or backtick quotes) and after a line
comment (``//``, or ``#`` followed by a space) do not count. Everything is measured in code points;
an indentation is its count of leading spaces and tabs (a file indents one way).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

OPEN = {"(": ")", "[": "]", "{": "}"}
CLOSE = {")": "(", "]": "[", "}": "{"}
QUOTES = "'\"`"
BLOCK_OPENERS = (":", "{", "(", "[", "=>")  # a line ending so expects an indented block under it
BEFORE_CHARS = 4_000  # the brackets before the cursor are read from this far back (a line start)
AFTER_LINES = 64  # the text after the cursor is read this far, for what it closes
AFTER_CHARS = 8_000


def indent_of(line: str) -> int:
    """Leading spaces and tabs."""
    return len(line) - len(line.lstrip(" \t"))


@dataclass(frozen=True)
class Block:
    """What `shape` needs to know about the document around the cursor (see `context`)."""

    floor: int  # a later line indented less than this ends the block
    opener: bool  # the text before the cursor ends a line that opens a block
    next_line: str  # the first non-blank line after the cursor's line, trimmed ("" if none)
    next_indent: int | None  # its indentation (None if there is none)
    suffix: str  # the rest of the cursor's line
    open_before: tuple[str, ...]  # brackets open at the cursor, innermost last
    closed_after: int  # how many of them the text after the cursor closes
    quote: str = ""  # the string literal the cursor is in ("" if none)
    lines: int | None = None  # at most this many later lines with something on them (None: the block's)


class _Scanner:
    """Brackets and quotes along a text, one character at a time, with line-local strings and comments."""

    def __init__(self, quote: str = "") -> None:
        self.quote = quote  # the open string literal's quote, "" outside one
        self.comment = False
        self.escaped = False
        self.hash = False  # the previous character was a "#" that may start a comment
        self.prev = "\n"

    def step(self, ch: str) -> str | None:
        """The bracket `ch` is, if it counts (not in a string or comment); None otherwise."""
        prev, self.prev = self.prev, ch
        if ch == "\n":
            self.quote, self.comment, self.escaped, self.hash = "", False, False, False
            return None
        if self.comment:
            return None
        if self.quote:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == self.quote:
                self.quote = ""
            return None
        hash_before, self.hash = self.hash, ch == "#" and prev in " \t\n"
        if (ch == "/" and prev == "/") or (ch in " \t!" and hash_before):
            self.comment = True  # "// ...", "# ..." and "#!": a comment; "#fff" is not one
            return None
        if ch in QUOTES:
            self.quote = ch
            return None
        return ch if ch in OPEN or ch in CLOSE else None


def _line_start(text: str, at: int) -> int:
    return text.rfind("\n", 0, at) + 1


def context(text: str, cursor: int) -> Block:
    """Read the document around `cursor` (bounded on both sides, whatever the document's size)."""
    cursor = max(0, min(cursor, len(text)))
    line_start = _line_start(text, cursor)
    line_end = text.find("\n", cursor)
    line_end = len(text) if line_end < 0 else line_end
    head = text[line_start:cursor]
    suffix = text[cursor:line_end].rstrip("\r")
    opener, floor = _opener(text, line_start, head, suffix)

    # Brackets open at the cursor, from a line start at most BEFORE_CHARS back.
    start = _line_start(text, cursor - BEFORE_CHARS) if cursor > BEFORE_CHARS else 0
    scanner = _Scanner()
    stack: list[str] = []
    for ch in text[start:cursor]:
        bracket = scanner.step(ch)
        if bracket in OPEN:
            stack.append(bracket)
        elif bracket in CLOSE and stack and stack[-1] == CLOSE[bracket]:
            stack.pop()
    quote = scanner.quote

    # What the text after the cursor closes of them, and its first non-blank line.
    after = text[cursor : cursor + AFTER_CHARS]
    after_scanner = _Scanner(quote)
    depth = closed = 0
    for ch in after:
        bracket = after_scanner.step(ch)
        if bracket in OPEN:
            depth += 1
        elif bracket in CLOSE:
            if depth:
                depth -= 1
            elif closed < len(stack):
                closed += 1
    next_line, next_indent = "", None
    for line in after.split("\n")[1:AFTER_LINES]:
        if line.strip():
            next_line, next_indent = line.strip(), indent_of(line)
            break
    return Block(floor, opener, next_line, next_indent, suffix, tuple(stack), closed, quote)


def _opener(text: str, line_start: int, head: str, suffix: str) -> tuple[bool, int]:
    """(whether a block is being opened here, the block's floor). Opened: the cursor ends a line
    that opens one (floor: one deeper than that line), or sits, with at most one word typed, on
    the line under one (floor: this line's indentation if deeper, else one deeper than the opener)."""
    if not _closers_only(suffix):
        return False, indent_of(head)
    typed = head.strip()
    if typed.endswith(BLOCK_OPENERS):
        return True, indent_of(head) + 1
    if any(ch.isspace() for ch in typed):
        return False, indent_of(head)
    previous = _previous_line(text, line_start)
    if previous is None or not previous.rstrip().endswith(BLOCK_OPENERS):
        return False, indent_of(head) if typed else len(head)
    indent = indent_of(head) if typed else len(head)
    return True, indent if indent > indent_of(previous) else indent_of(previous) + 1


def _previous_line(text: str, line_start: int, lines: int = 8) -> str | None:
    """The nearest non-blank line before the one starting at `line_start` (at most `lines` back)."""
    end = line_start - 1
    for _ in range(lines):
        if end < 0:
            return None
        start = _line_start(text, end)
        line = text[start:end].rstrip("\r")
        if line.strip():
            return line
        end = start - 1
    return None


def _closers_only(suffix: str) -> bool:
    return all(ch in CLOSE or ch in " \t;," for ch in suffix)


def at(text: str, cursor: int, mode: str) -> Block | None:
    """The block a suggestion at `cursor` writes under `mode` ("off", "block" or "always", the
    `multiLine` setting); None when it stays on one line."""
    if mode == "off":
        return None
    if mode == "block":  # the cheap test first: most keystrokes open no block
        line_start = _line_start(text, cursor)
        line_end = text.find("\n", cursor)
        suffix = text[cursor : len(text) if line_end < 0 else line_end].rstrip("\r")
        if not _opener(text, line_start, text[line_start:cursor], suffix)[0]:
            return None
    block = context(text, cursor)
    return block if mode == "always" or expects_block(block) else None


def ends_line(text: str, cursor: int) -> bool:
    """The cursor ends a line that has something on it (the rest of the line is blank): there a
    model that ends the line at once gets to suggest the next one (engine `next_line`)."""
    line_end = text.find("\n", cursor)
    rest = text[cursor : len(text) if line_end < 0 else line_end]
    return not rest.strip() and bool(text[_line_start(text, cursor) : cursor].strip())


def next_line_at(text: str, cursor: int, mode: str) -> bool:
    """Whether a request at `cursor` under `mode` may go on to the next line (engine `next_line`):
    in "block" mode, where the cursor ends a line (a block found there wins: `request_for`)."""
    return mode == "block" and ends_line(text, cursor)


def below(text: str, cursor: int) -> Block:
    """How to shape a suggestion that is the line after the cursor's (the model ended the cursor's
    line at once): one line with something on it, at any indentation (a closing `}` is dedented),
    and the other rules as for a block, except that it may leave a bracket open or open a block:
    it is a line alone, as a single-line suggestion ending with `{` is."""
    return replace(context(text, cursor), floor=0, opener=False, lines=1)


def expects_block(block: Block) -> bool:
    """A block is expected here: the cursor ends a line that opens one, or sits on the first line
    under such a line, and the block has nothing in it yet (the next line is not inside it)."""
    return block.opener and (block.next_indent is None or block.next_indent < block.floor)


def shape(added: str, block: Block, kept: int | None = None) -> str:
    """`added` (what the suggestion adds after the cursor) cut by the rules of the module
    docstring; `kept`: how many of its characters the confidence gate keeps (None: all)."""
    if block.lines is not None:
        added = _through_lines(added, block.lines)
    lines = added.split("\n")
    end = len(added)
    at = len(lines[0]) + 1
    for line in lines[1:]:
        body = line.rstrip("\r")
        if body.strip():
            if indent_of(body) < block.floor or (block.next_line and body.strip() == block.next_line):
                end = at - 1  # before the line break that starts this line
                break
        at += len(line) + 1
    text = _balanced(added[:end], block)
    if kept is not None and kept < len(text):
        first = _first_content_end(text)
        whole = text.rfind("\n", first, kept + 1)
        text = text[:kept] if kept < first or whole < 0 else text[:whole]
    text = text.rstrip()
    # Dropping a line may leave a bracket open, and balancing may cut a line down to the next
    # line's text: settle both again until neither changes anything.
    close = _closed if block.lines is None else (lambda kept_text: kept_text)
    while (closed := close(_not_retyped(text, block))) != text:
        text = _balanced(closed, block).rstrip()
    return text


def _through_lines(text: str, n: int) -> str:
    """`text` up to the end of its `n`th line after the first that has something on it."""
    seen, at = 0, text.find("\n")
    while at >= 0:
        nxt = text.find("\n", at + 1)
        if text[at + 1 : len(text) if nxt < 0 else nxt].strip():
            seen += 1
            if seen == n:
                return text if nxt < 0 else text[:nxt]
        at = nxt
    return text


def _not_retyped(text: str, block: Block) -> str:
    """Rule 2 again after a cut: drop last lines (never the cursor's own) that now read as the
    line already after the cursor."""
    while block.next_line and (cut := text.rfind("\n")) >= 0 and text[cut + 1 :].strip() == block.next_line:
        text = text[:cut].rstrip()
    return text


def _closed(text: str) -> str:
    """Rule 5: drop last lines that open a block. The cursor's own line is never dropped: a
    suggestion of that line alone ending with `{` is what single-line mode shows too."""
    while True:
        cut = text.rfind("\n")
        if cut < 0 or not opens_block(text[cut + 1 :]):
            return text
        text = text[:cut].rstrip()


def opens_block(line: str) -> bool:
    """The line's code (outside strings and line comments) ends with a block opener."""
    scanner = _Scanner()
    code = []
    for ch in line:
        was_code = not scanner.quote and not scanner.comment
        scanner.step(ch)
        if was_code and not scanner.comment and not (scanner.quote and ch in QUOTES):
            code.append(ch)
    return "".join(code).rstrip().endswith(BLOCK_OPENERS)


def _first_content_end(text: str) -> int:
    """Where the first line with something on it ends."""
    at = 0
    for line in text.split("\n"):
        at += len(line)
        if line.strip():
            return at
        at += 1
    return len(text)


def _balanced(text: str, block: Block) -> str:
    """Rule 3: cut before a closer the text after the cursor already closes (or that matches
    nothing), then back to the last balanced line end (or place) if brackets stay open."""
    scanner = _Scanner(block.quote)
    own: list[str] = []
    outer = list(block.open_before)
    closed_before = 0  # brackets opened before the cursor that the suggestion closed
    last_point = last_line_end = 0
    end = len(text)
    for i, ch in enumerate(text):
        if ch == "\n" and not own:
            last_line_end = i
        bracket = scanner.step(ch)
        if bracket in OPEN:
            own.append(bracket)
        elif bracket in CLOSE:
            if own:
                if own[-1] != CLOSE[bracket]:
                    end = i
                    break
                own.pop()
            else:
                # Closing a bracket from before the cursor: only one the text after does not close.
                may_close = len(outer) - block.closed_after
                if closed_before >= may_close or outer[-1 - closed_before] != CLOSE[bracket]:
                    end = i
                    break
                closed_before += 1
        if not own:
            last_point = i + 1
    else:
        if not own or block.lines is not None:
            return text
    if not own or block.lines is not None:  # a line alone may leave a bracket open, as one line does
        return text[:end]
    cut = last_line_end if last_line_end > 0 else last_point
    return text[: min(cut, end)]
