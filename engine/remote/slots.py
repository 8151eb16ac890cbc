"""Which llama-server slot holds which of our prompts (engine.remote.rows).

Prompts go into one slot per document, chosen as the in-process engine chooses a sequence
(engine.core.placement), so both backends keep the same prefixes and decode the same ubatches. A
slot is named once the server has named it (`learn`); a fresh prompt goes to the server's pick
(id_slot -1) and waits, unplaced, for its answer to name the slot.

Whether we are alone on the server is a small state machine (`Sharing`): a named slot that gives
back far less than we left in it was taken by another client, and from then on each call's first
request goes to the server's pick, which restores the document from its RAM prompt cache.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.core.placement import SLOT_SHARE, common_prefix_length, kept, placement

# A named slot that gives back this many tokens fewer than we left in it was taken by another
# client (a token or two can be ours: the last token of a stream closed early may not be decoded).
TAKEN_MIN_TOKENS = 8


@dataclass
class Sharing:
    """Are we alone on the server? `shared`: another client has taken a slot we held (a team on
    one server). `blind`: a prefill sent to the server's pick was given up unanswered, so where it
    landed (perhaps one of our slots) is not known, and the next taken slot may be our own doing.

    ALONE --slot taken--> SHARED; any --gave up an unplaced prefill--> blind;
    blind --slot taken--> not blind (the loss was perhaps ours: no change of `shared`);
    forget --> ALONE, not blind."""

    shared: bool = False
    blind: bool = False
    taken: int = 0  # named requests that found their slot taken

    def lost_track(self) -> None:
        self.blind = True

    def slot_taken(self) -> None:
        self.taken += 1
        if self.blind:
            self.blind = False
        else:
            self.shared = True

    def reset(self) -> None:
        self.shared, self.blind = False, False


class SlotBook:
    """Our slots on one server: what we last left in each, the live one, the unplaced prompts."""

    def __init__(self, total_slots: int, fixed_slot: int | None) -> None:
        self.total_slots = total_slots
        self.fixed_slot = fixed_slot
        self._slots: dict[int, tuple[int, ...]] = {}  # slot -> the tokens we last left in it
        self._live: int | None = None  # the slot of the last request (the live sequence's part)
        self._unplaced: deque[tuple[int, ...]] = deque(maxlen=4)  # sent with id_slot -1, slot not named yet
        self.sharing = Sharing()
        self.placed = False  # the server has placed the current call's document (`slot_for`)
        self.claims = 0  # requests sent (`claim`), numbered
        self._named_at: dict[int, int] = {}  # slot -> the number of the last request naming it

    @property
    def kept_prompts(self) -> int:
        """Prompts kept decoded at once, as the in-process engine keeps sequences: one a slot of
        ours; one in all with a fixed slot, or on a server another client uses (its slots are
        theirs too: a document takes one)."""
        if self.fixed_slot is not None or self.sharing.shared:
            return 1
        return max(1, self.total_slots)

    def cached_prefix(self, tokens: tuple[int, ...]) -> int:
        """The longest prefix of `tokens` a slot holds, as far as we know."""
        return max((common_prefix_length(held, tokens) for held in self._slots.values()), default=0)

    def held(self, slot: int) -> tuple[int, ...]:
        """What we last left in `slot` (nothing known: empty)."""
        return self._slots.get(slot, ())

    def hold(self, slot: int, tokens: tuple[int, ...], live: bool = False) -> None:
        """`slot` holds `tokens` now (`live`: it is the current call's)."""
        self._slots[slot] = tokens
        if live:
            self._live = slot

    def slot_for(self, tokens: tuple[int, ...], beside: bool = False) -> tuple[int, bool]:
        """(id_slot, cache_prompt) for a prompt: where the in-process engine would decode it
        (engine.core.placement, our slots standing for its sequences), so both keep the same
        prefixes and decode the same ubatches. Staying or moving names the slot and reuses its KV;
        a fresh prompt goes to any idle slot (-1: the server picks, so users sharing it do not
        take each other's) and is decoded whole, from position 0."""
        if self.fixed_slot is not None:  # one slot: like one sequence, whatever it shares is kept
            return self.fixed_slot, self._reuses(self.fixed_slot, tokens)
        live = self._slots.get(self._live) if self._live is not None else None
        others = [(slot, held) for slot, held in self._slots.items() if slot != self._live]
        others += [(slot, ()) for slot in range(self.total_slots) if slot not in self._slots and slot != self._live]
        where, target = placement(live, others, tokens, beside)
        if self.sharing.shared and not self.placed and where != "fresh":
            # A team (`shared`): between two calls another user may have taken the slot; named,
            # it would be decoded again over whatever it holds now (llama-server's RAM prompt
            # cache is consulted for a named slot only at a non-zero similarity, which is unsafe:
            # docs/shared-server.md). So the call's first request goes to the server's pick, an
            # idle slot, into which the RAM cache restores the document; the answer names it.
            return -1, True
        if where == "stay" and self._live is not None:
            return self._live, self._reuses(self._live, tokens)
        if where == "move":
            return target, self._reuses(target, tokens)
        # A prompt sent with -1 whose slot the server has not named yet (its prefill failed
        # before answering): -1 again, with the cache on. (A prefill still running is waited on
        # instead: RemoteRows `query`.) With `--slot-prompt-similarity 0`, as the README runs the
        # server, -1 takes the least recently used idle slot; with the server's default 0.1 it
        # takes the idle slot most like the prompt, which can be another user's (bench.llama_server).
        if any(common_prefix_length(held, tokens) >= SLOT_SHARE * len(tokens) for held in self._unplaced):
            return -1, True
        return -1, False

    def _reuses(self, slot: int, tokens: tuple[int, ...]) -> bool:
        """Whether the server may keep what `slot` shares with `tokens` (`cache_prompt`): not
        when the in-process engine would decode them from 0 instead (engine.core.placement
        `kept`), so both cut their ubatches at the same places."""
        shared = common_prefix_length(self._slots.get(slot, ()), tokens)
        return kept(shared, len(tokens)) == shared

    def expect(self, slot: int, warm: bool, tokens: tuple[int, ...]) -> int | None:
        """How many of `tokens` the server should report reused from a named slot (it
        always evaluates the last one again); None when nothing is expected of it."""
        if slot < 0 or not warm:
            return None
        return min(self.cached_in(slot, warm, tokens), len(tokens) - 1)

    def cached_in(self, slot: int, warm: bool, tokens: tuple[int, ...]) -> int:
        """How much of `tokens` the server will reuse in `slot`, as far as we know."""
        if not warm:
            return 0
        if slot >= 0:
            return common_prefix_length(self._slots.get(slot, ()), tokens)
        return max((common_prefix_length(held, tokens) for held in self._unplaced), default=0)

    def claim(self, slot: int, tokens: tuple[int, ...]) -> None:
        """A request sends `tokens` to `slot` (-1: to the server's pick, unplaced until named)."""
        self.claims += 1
        if slot >= 0:
            self.hold(slot, tokens, live=True)
            self._named_at[slot] = self.claims
        else:
            self._unplaced.append(tokens)

    def note_content(self, slot: int, tokens: tuple[int, ...]) -> None:
        """The slot now holds `tokens` (a stream went on past its prompt)."""
        if slot >= 0:
            self._slots[slot] = tokens
        elif self._unplaced:
            self._unplaced[-1] = tokens

    def learn(self, tokens: tuple[int, ...], event: dict, live: bool = True) -> bool:
        """The server named the slot holding `tokens` (True); later requests for it name it too,
        so every request of a document reads KV computed the same way. `live`: the slot is the
        current call's (not a detached prefill's, answering later)."""
        slot = event.get("id_slot")
        if not (isinstance(slot, int) and 0 <= slot < max(1, self.total_slots)):
            return False
        self._slots[slot] = tokens
        if live:
            self._live = slot
            self.placed = True
        if tokens in self._unplaced:
            self._unplaced.remove(tokens)
        for other, held in list(self._slots.items()):
            if other != slot and held == tokens:
                del self._slots[other]
        return True

    def named_since(self, slot: object, claim: int) -> bool:
        """We have named `slot` in a request sent after claim number `claim` (an answer naming it
        for what that claim sent is out of date). Not what the slot held before: a prefill sent to
        the server's pick lands in any idle slot, one of ours that held another document too, and
        taken for out of date its answer was given up, the slot never learnt, and the document's
        whole prompt sent again from 0 at every keystroke."""
        return isinstance(slot, int) and self._named_at.get(slot, 0) > claim

    def give_up(self, slot: int, tokens: tuple[int, ...]) -> None:
        """A prefill of `tokens` to `slot` was given up: what the slot holds is not known."""
        if slot >= 0:
            if self._slots.get(slot) == tokens:
                del self._slots[slot]
        elif tokens in self._unplaced:
            self._unplaced.remove(tokens)
            self.sharing.lost_track()

    def reused(self, expected: int | None, reused: object) -> None:
        """The server reused `reused` tokens where we expected `expected` from a named slot:
        far fewer, another client took it."""
        if expected is not None and isinstance(reused, int) and reused + TAKEN_MIN_TOKENS < expected:
            self.sharing.slot_taken()

    def clear(self) -> None:
        self._named_at.clear()
        self._slots.clear()
        self._live = None
        self._unplaced.clear()
        self.sharing.reset()
