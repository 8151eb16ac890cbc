"""The rest of a shown suggestion, once part of it is in the document: answered with no model work.

After accept-next-word or accept-line (or typing the suggested characters), the document is the
one the suggestion was made for with a prefix of the suggestion inserted at its cursor, and the
new cursor right after it. The rest of that suggestion is then still the answer: the same model
at the same settings would say it again (at temperature 0 the most probable covering of a longer
typed prefix is the path already taken). So the request is answered from what was shown, at once,
and the engine is not asked; the suggestion on screen stays as it was instead of flickering.

A suggestion the token budget cut short is carried after an accept (several characters at once)
but not after one letter typed along it: the engine then answers (from rows it already has,
nearly free) and the suggestion reaches further. Only the last answer of each document is kept.

On a prompt that holds the text after the cursor (FIM: `DecodeStats.fim`), a suggestion is not
carried past one character typed by hand that moves the prompt's end (a space or punctuation after
a word, a line break: `lsp_server.split.prompt_end`). The word typed before it then leaves the
middle of the FIM prompt for its prefix, on the other side of the text after the cursor, and the
engine's answer is another one: on Qwen2.5-Coder 0.5B it differed from the carried rest at 2 of 3
such keystrokes of the typing replay (64 of 92 after a space, 24 of 35 after punctuation, 28 of
47 at a new line's start; 2 of 26 after a space that left the prompt where it was). And the
carried rest's next word is the very one the user just typed past instead of accepting it. Typing
inside a word, or more whitespace, leaves the prompt where it was; an accept (several characters)
keeps the carry, as the engine's answer there was right as often as the carried rest. On a plain
prompt the engine's answer after such a character is the carried rest (the same tokens), so it
stays carried (docs/benchmarks.md, "The typing replay on the code model"). In the `psm-line`
layout (engine.core.prompt) the cursor's line is in the middle, and the word typed stays there: as
on a plain prompt, only a new line moves the prompt (`DecodeStats.fim_line`). Anything else
(another edit, a cursor moved, a different selected completion item, new settings) misses, and
the engine answers as usual.

A suggestion the confidence gate hid (all or part of it) is kept too, whole, with its signals
(`Computed`): a keystroke that types along it is judged again from what was computed
(lsp_server.rejudge), so typing along a hidden suggestion costs no engine work either (on a FIM
prompt: as long as the prompt's end has not moved since it was computed, as above).

Only the first item, the one the gate judged, is carried as shown. Typing along one of the
alternatives instead (items the user cycles to, not gated) does not put that alternative first
unjudged: it is judged again from its own signals like a hidden suggestion (`Computed.along`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine import Completion
from lsp_server.split import prompt_end


@dataclass(frozen=True)
class Shown:
    """Suggestions shown at `cursor` of `text`: each is the text added after the cursor."""

    text: str
    cursor: int
    added: tuple[str, ...]  # most probable first, as the items were sent
    complete: bool = True  # False: cut by the token budget (the engine would go on)
    fim: bool = False  # made from a FIM prompt: not carried past a typed character that moves its end
    fim_line: bool = False  # ... whose middle holds the cursor's line: only a new line moves it


@dataclass(frozen=True)
class Computed:
    """A completion made at `cursor` of `text` for the required prefix `required`, that the gate
    cut: the whole of it, with its signals."""

    text: str
    cursor: int
    required: str
    completion: Completion
    model: str | None = None  # the identity of the model that made it (its gate judges it again)
    cut: bool = True  # the gate hid some of the completion itself (else it is kept for its alternatives)

    def along(self, typed: str) -> Completion | None:
        """What `typed` (typed at the old cursor) goes along: the completion when the gate cut it,
        else the first of its alternatives that `typed` goes along, as a completion of its own
        (its text and signals); None when the completion shown whole goes along it (what was
        shown is carried, or the engine answers) or nothing does."""
        if self.completion.text[len(self.required) :].startswith(typed):
            return self.completion if self.cut else None
        for alternative in self.completion.alternatives:
            if alternative.text.startswith(self.required) and alternative.text[len(self.required) :].startswith(typed):
                return replace(self.completion, text=alternative.text, signals=alternative.signals, alternatives=())
        return None


class Carry:
    def __init__(self) -> None:
        self._shown: dict[str, Shown] = {}
        self._computed: dict[str, Computed] = {}

    def keep(self, uri: str, computed: Computed | None) -> None:
        """The completion the gate cut in `uri` (None: there is none now)."""
        if computed is None:
            self._computed.pop(uri, None)
        else:
            self._computed[uri] = computed

    def kept_at(self, uri: str, text: str, cursor: int) -> bool:
        """The completion kept in `uri` was made at `cursor` of `text`."""
        kept = self._computed.get(uri)
        return kept is not None and kept.text == text and kept.cursor == cursor

    def typed_along(self, uri: str, text: str, cursor: int) -> tuple[Computed, str, Completion] | None:
        """(the completion kept in `uri`, what was typed since, what that goes along: the completion
        the gate cut or one of its alternatives, `Computed.along`), if `text` is its document with
        that typed at the old cursor and `cursor` right after it; None otherwise."""
        kept = self._computed.get(uri)
        if kept is None:
            return None
        inserted = cursor - kept.cursor
        if inserted < 0 or len(text) != len(kept.text) + inserted:
            return None
        if not (text.startswith(kept.text[: kept.cursor]) and text.endswith(kept.text[kept.cursor :])):
            return None
        typed = text[kept.cursor : cursor]
        stats = kept.completion.stats
        if stats.fim and _prompt_end_moved(kept.text, kept.cursor, text, cursor, stats.fim_line):
            return None  # the prompt's end moved: the engine's answer is another one
        along = kept.along(typed)
        return None if along is None else (kept, typed, along)

    def remember(
        self,
        uri: str,
        text: str,
        cursor: int,
        added: tuple[str, ...],
        complete: bool = True,
        fim: bool = False,
        fim_line: bool = False,
    ) -> None:
        if added:
            self._shown[uri] = Shown(text, cursor, added, complete, fim, fim_line)
        else:
            self._shown.pop(uri, None)

    def moved(self, uri: str, text: str, cursor: int, added: tuple[str, ...]) -> None:
        """What is shown now that the rest of the last suggestions (`rest`) is: made as they were."""
        shown = self._shown.get(uri)
        if shown is None:
            self.remember(uri, text, cursor, added)
        else:
            self.remember(uri, text, cursor, added, shown.complete, shown.fim, shown.fim_line)

    def forget(self, uri: str | None = None) -> None:
        """One document's (closed, stale), or every document's (new settings, a new model): what
        was shown and what the gate cut."""
        if uri is None:
            self._shown.clear()
            self._computed.clear()
        else:
            self._shown.pop(uri, None)
            self._computed.pop(uri, None)

    def shown(self, uri: str, text: str, cursor: int) -> tuple[str, ...] | None:
        """What was shown in `uri` at `cursor` of `text` (each item's text added), if that is
        what the document last showed; None otherwise."""
        shown = self._shown.get(uri)
        if shown is None or shown.text != text or shown.cursor != cursor:
            return None
        return shown.added

    def rest(self, uri: str, text: str, cursor: int) -> tuple[str, ...] | None:
        """What is left of the suggestions shown in `uri` (each non-empty, order kept), if `text` is
        its document with a prefix of the first of them inserted at the old cursor and `cursor`
        right after it; None otherwise."""
        shown = self._shown.get(uri)
        if shown is None:
            return None
        inserted = cursor - shown.cursor
        if inserted < 0 or len(text) != len(shown.text) + inserted:
            return None
        if inserted == 1 and not shown.complete:
            return None  # one letter typed along a suggestion the budget cut: the engine goes further
        if not (text.startswith(shown.text[: shown.cursor]) and text.endswith(shown.text[shown.cursor :])):
            return None
        if inserted == 1 and shown.fim and _prompt_end_moved(shown.text, shown.cursor, text, cursor, shown.fim_line):
            return None  # one character typed past the suggestion's word: the engine answers anew
        typed = text[shown.cursor : cursor]
        first = shown.added[0]
        if not (first.startswith(typed) and first[inserted:].strip()):
            return None  # off the gated item (or all of it taken): an alternative is not put first unjudged
        return tuple(a[inserted:] for a in shown.added if a.startswith(typed) and a[inserted:].strip())


def _prompt_end_moved(old_text: str, old_cursor: int, text: str, cursor: int, line: bool = False) -> bool:
    """Whether the prompt ends elsewhere now (on a FIM prompt the engine's answer is then
    another); `line`: the cursor's line is in the middle, and only a new line between the two
    ends moves it. `text` is `old_text` with something inserted at `old_cursor`."""
    old_end, end = prompt_end(old_text, old_cursor), prompt_end(text, cursor)
    if end == old_end:
        return False
    return not line or any(ch in "\r\n" for ch in text[min(end, old_end) : max(end, old_end)])
