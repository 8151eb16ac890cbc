"""Everything a covering proof still needs, in one request to llama-server.

llama-server takes a list of prompts in one `/completion` (one task each, every one with the same
parameters) and runs them one after another on the slot the request names, each reusing what the
one before left in its KV cache. So the frontier of the covering search (engine.remote.frontier: the
unknown rows and the nodes whose consistent tokens are known only by a bound) goes out as one
request of many prompts, each generating one token:

- every prompt is the document's prompt plus a token path; sorted, with the path's missing
  ancestors put in before it, so the server decodes exactly one new token per prompt, as the
  in-process engine decodes every token past the prompt (a path of four tokens decoded as one
  batch moved a row by up to 0.38 nats on Gemma 3 270M);
- one grammar serves every prompt of a request, so it is the remaining bytes of one group of
  prompts that share them (the most promising one's): under it the greedy token at such a node is
  the best token consistent with those bytes, a bound for all of them (a "cap"). The other prompts
  bring their rows only (the top `n_probs` exactly, the rest below the last listed). A union of
  every prompt's bytes was tried and gave loose caps: after 13 of 17 spaces, "max" (which finishes
  the word's own node) beat the "    " the node's own bytes allow, -7.2 against -11.8. It is not
  sent as a grammar but as a logit_bias that raises the tokens consistent with those bytes
  (`boosted_tokens`): the same greedy pick, without the pass over the whole vocabulary llama.cpp
  makes under a grammar at every prompt whose greedy token it refuses, which was most of them;
- at a known node asked for the values of its consistent tokens (a "value node": a token that
  would finish the covering is known only by a bound), the consistent tokens it already lists are
  not raised (or, under a grammar, banned), so there the greedy token is the best of those it does
  not list;
- a frontier of one entry goes as one streamed request instead, the old way (`single`), which
  goes on into the suggestion when that entry is the answer;
- before any of that, the most probable covering by its bounds, when a token of it is known only
  by a bound, is made exact with one streamed request (engine.remote.bounded `refine`): it most often is
  the answer, so that stream is the suggestion too, and its exact value leaves less to ask;
- the batch that spends the search's budget also carries the rows of the greedy descent the
  search then makes (`continuation`, `_likely`, `_walk_down` under `prove`), so the descent most
  often needs no request of its own.

Each answer is recorded as a streamed token is (engine.remote.nodes `record`), with that cap. A token
the server holds back (one ending inside a UTF-8 character) gives no event: its path stays unknown
and is not asked again in the same call.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from engine.backend import Cancelled
from engine.core.covering import Covering, CoveringSearch
from engine.core.placement import common_prefix_length
from engine.core.vocab import VocabIndex
from engine.remote.bounded import BoundedRows, Server
from engine.remote.frontier import Frontier, Path, frontier
from engine.remote.http import StreamCancelled
from engine.remote.request import GENERATION_SLACK, Inexpressible, gbnf_literal

# Listed tokens per prompt: a branch's row is read for its bound (the last listed value) and the
# values of the few tokens that continue its spelling. Measured on bench.tail's 220-token document
# (Gemma 3 270M, `max_h`, `max_help_p`, `max_help_po` after 17 spaces): 40, 20 and 10 took the same
# round trips and chose the same coverings; the three keystrokes' answers were 61/79/76 kB with 40
# (before the descent listed one), 51/69/64 with 20 and 50/54/52 with 10.
BATCH_N_PROBS = 10
# The cap of a group of prompts: the tokens consistent with its bytes are raised by BOOST (a
# logit_bias the greedy pick reads; the listed values are the raw softmax), so the greedy token is
# the best of them whenever one of them is within BOOST of the best token. Logits plus BOOST are
# rounded to float32 (a step of at most 6.1e-5 below 1024): a cap is that pick's value plus
# BOOST_SLACK. At most BOOST_MAX tokens (12 bytes each in the request), else the grammar.
BOOST = 100.0
BOOST_SLACK = 1e-4
BOOST_MAX = 256


def asks(prompt: tuple[int, ...], held: tuple[int, ...], wanted: list[Path]) -> list[Path]:
    """`wanted` in the order the server should decode them, each preceded by whatever ancestors
    the slot will not hold, so every prompt adds exactly one token to the one before it (the
    slot holds `held` first; a prompt it holds whole has its last token decoded again)."""
    order: list[Path] = []
    previous = held
    for path in sorted(set(wanted)):
        full = prompt + path
        common = common_prefix_length(previous, full)
        order.extend(full[len(prompt) : k] for k in range(max(common + 1, len(prompt)), len(full)))
        order.append(path)
        previous = full
    return order


def banned_tokens(remote: Server, prompt: tuple[int, ...], front: Frontier, spoken: bytes) -> frozenset[int]:
    """Tokens consistent with `spoken` that every node asked with those bytes already lists:
    banned, the greedy token there is the best of those it does not list. Only value nodes list
    anything; with an unknown row among them nothing is banned."""
    vocab = remote.vocab
    found = [remote.nodes.node(prompt + path) for path, r in front.rows + front.values if r == spoken]
    nodes = [node for node in found if node is not None]
    if not nodes or len(nodes) < len(found):
        return frozenset()
    consistent = (int(t) for t in vocab.candidates(spoken).all_ids())
    return frozenset(t for t in consistent if all(t in node.exact for node in nodes))


def fetch(
    remote: Server,
    prompt: tuple[int, ...],
    front: Frontier,
    cancel: threading.Event | None,
    rows: BoundedRows,
    ahead: tuple[Path, ...] = (),
) -> set[Path]:
    """Ask for all of `front` in one request; returns the paths asked. Nothing is asked (empty set)
    when the document has no slot of its own yet. A frontier of one goes as one streamed request
    that goes on into the suggestion when its path is the one chosen (`single`)."""
    prompt = tuple(prompt)
    if len(front.rows) + len(front.values) == 1:
        return single(remote, rows, front)
    remote.stream.settle(True)
    remote.reap()
    slot, warm = remote.slots.slot_for(prompt)
    if slot < 0 or remote.filling or remote.slots.cached_in(slot, warm, prompt) < len(prompt) - 1:
        remote.prefill(prompt, cancel)
        slot, warm = remote.slots.slot_for(prompt)
    if slot < 0 or not warm:
        return set()
    remaining = dict(front.rows) | dict(front.values)
    order = asks(prompt, remote.slots.held(slot), list(remaining) + list(ahead))
    capped = remaining | {path: rows.remaining(path) for path in ahead if path not in remaining}
    spoken = _grammar_group(front)
    banned = banned_tokens(remote, prompt, front, spoken) if spoken is not None else frozenset()
    boosted = boosted_tokens(remote.vocab, spoken, banned)
    literal = gbnf_literal(spoken) if spoken is not None and boosted is None else None
    if boosted is None and literal is None:
        spoken, banned = None, frozenset()
    body = {
        "prompt": [list(prompt + path) for path in order],
        "n_predict": 1,
        "cache_prompt": True,
        "id_slot": slot,
        "temperature": 0.0,
        "samplers": ["temperature"],
        "n_probs": min(BATCH_N_PROBS, remote.n_probs),
        "stream": True,
        # Each prompt's final event, trimmed to which prompt it was and how many tokens the server
        # decoded for it (a progress event per prompt would cost about 250 bytes more each).
        "response_fields": ["index", "stop", "timings/prompt_n"],
    }
    if boosted:
        body["logit_bias"] = [[t, BOOST] for t in sorted(boosted)]
    elif literal is not None:
        body["grammar"] = f"root ::= {literal} .*"
        if banned:
            body["logit_bias"] = [[t, False] for t in sorted(banned)]
    # What the slot holds is known prompt by prompt as their answers come (a request cut short
    # leaves it at the last one answered, or one later): later requests put what it holds past the
    # prompt in their own prompt, so an overestimate would have the server decode several tokens
    # in one batch.
    remote.slots.hold(slot, prompt, live=True)
    try:
        stream = remote.client.stream("/completion", body, remote.call.deadline, cancel.is_set if cancel else None)
    except StreamCancelled:
        raise Cancelled() from None
    _read(
        remote,
        stream,
        prompt,
        order,
        capped,
        spoken if boosted or literal is not None else None,
        banned,
        boosted,
        cancel,
        slot,
    )
    remote.slots.hold(slot, prompt + order[-1])
    return set(remaining)


def single(remote: Server, rows: BoundedRows, front: Frontier) -> set[Path]:
    """One entry: an unknown row is expanded as a branch (engine.remote.bounded `BoundedRows.expand`: its
    last token forced, so its value is exact too); a value node is asked with its own bytes as the
    grammar and what it lists banned, and the stream goes on (with the generation budget) when that
    node's best token finishes the covering."""
    if front.rows:
        path = front.rows[0][0]
        rows.expand(path)
        rows.decodes -= 1  # counted by the caller, as a batch is
        rows.rows_asked -= 1
        return {path}
    path, left = front.values[0]
    banned = banned_tokens(remote, rows.prompt, front, left)
    try:
        remote.query(
            rows.prompt + path,
            len(left) + remote.call.predict + GENERATION_SLACK,
            rows.cancel,
            literal=left,
            exclude=banned,
        )
    except Inexpressible:
        return set()
    return {path}


def boosted_tokens(vocab: VocabIndex, spoken: bytes | None, banned: frozenset[int]) -> frozenset[int] | None:
    """The tokens consistent with `spoken` but `banned`, to be raised by BOOST: then a prompt's
    greedy token is the best of them, the cap a grammar of those bytes gave, without the
    grammar's cost (at every prompt whose greedy token a grammar refuses, llama.cpp passes it over
    the whole vocabulary: on Gemma's 262,144 tokens, 2 cores, the 16-prompt batch of `max_help_p`
    after 17 spaces took 730 ms with the grammar, 340 without). None (use the grammar) when they
    are more than BOOST_MAX: a short remainder ("p") is the start of thousands of tokens."""
    if spoken is None:
        return None
    ids = frozenset(int(t) for t in vocab.candidates(spoken).all_ids()) - banned
    return ids if len(ids) <= BOOST_MAX else None


def _grammar_group(front: Frontier) -> bytes | None:
    """The remaining bytes the request's grammar speaks for: a value node's (it needs the cap),
    else the most promising unknown row's."""
    if front.values:
        return front.values[0][1]
    return front.rows[0][1] if front.rows else None


def _read(remote, stream, prompt, order, remaining, spoken, banned, boosted, cancel, slot) -> None:
    """Every task's token event: its row, and (for a path with the bytes spoken for) its cap. A
    boosted pick caps with BOOST_SLACK added, and only when it is one of the boosted tokens."""
    stream.set_limits(
        remote.call.deadline if remote.call.deadline is not None else time.monotonic() + remote.client.timeout_s,
        cancel.is_set if cancel else None,
    )
    progressed: set[int] = set()
    while True:
        try:
            event = stream.next_event()
        except StreamCancelled:
            raise Cancelled() from None
        if event is None:
            return
        index = event.get("index", 0)
        if not isinstance(index, int) or not 0 <= index < len(order):
            stream.close()
            raise remote.client.protocol("an answer for a prompt that was not asked")
        if isinstance(event.get("timings/prompt_n"), int) and index not in progressed:
            # Of what the server decoded for this prompt, the spelling's tokens past the
            # document's prompt are the covering's rows (counted as rows, as in-process), and only
            # the rest is prompt work: none when the slot held the document's prompt.
            progressed.add(index)
            remote.decoded += max(0, event["timings/prompt_n"] - len(order[index]))
        probs = event.get("completion_probabilities")
        if not probs or event.get("stop") is True:
            continue
        token, logprob, top = remote.stream.parse_probs(probs)
        path = order[index]
        cap = None
        if spoken is not None and remaining.get(path) == spoken and (boosted is None or token in boosted):
            cap = (False, spoken, banned)
        remote.nodes.record(prompt + path, token, logprob, top, cap, BOOST_SLACK if boosted else 0.0)
        remote.slots.hold(slot, prompt + path)  # decoded before its answer was sent


BATCH_ROUNDS = 3  # requests of many prompts per keystroke, at most


def prove(rows: BoundedRows) -> None:
    """Before the covering search runs on `rows` (engine.remote.rows.BoundedRows): ask for its frontier
    in one request, again while it is not empty, within BATCH_ROUNDS and the search's budget.

    The rows asked are the in-process engine's budget: each is one of `maxCoverDecodes` (a model
    step, as a decode is; the ancestors put in for the decoding order were decoded before and do
    not count), so the server does the work the in-process search would, in one or a few round
    trips; requests are counted against the same budget (`refine`, which makes a token of the
    chosen covering exact, still has what is left of it). When the rows run out with the proof
    open, the search does what the in-process one does then: it follows an open branch down
    greedily. The branch is the batch's last row (one past the budget: the node the in-process
    search pops when its budget is spent), and the rows that descent most likely reads (the best
    covering known exactly, spelled from where that row's bytes end: `continuation`, as far as
    the descent's value estimated with that covering's values beats it: `_likely`) go with the
    same batch. After it, the descent is read from the known rows (`_walk_down`) as far as they
    show each greedy step, and stops where its value, bounded, falls to the best covering known
    exactly (it could not win from there). When a step does not show, the rows asked ahead are
    forgotten (kept, they let the search choose coverings the in-process one never sees: the seed
    "Once upon a ti" took " ti" after a char-by-char "On|c|e| up|o|n| |a") and the server descends
    as before, from the most promising open row (`_descend`, one request). Before, the
    descent started after the batch from its most promising open row, which the batch itself
    had just opened (a child of a row it asked, on a token known only by a bound): always one
    request more, so a keystroke after 17 spaces of indentation took three round trips (the
    batch, the descent, the suggestion) where it now takes two. Counted by
    request instead (16 rows each), the keystroke `max_help_p` took three batches of 21 to 26
    prompts where the in-process search stops after 8 decodes; counted by row without the
    descent, the seed "Once upon a ti" after an empty prompt spent its 8 on the first tokens
    ("O", "On", "Onc", ...: a batch goes one level deeper per request) and took the masked
    path's "tikz"."""
    remote, prompt, required = rows.remote, rows.prompt, rows.required
    asked: set[Path] = set()
    start: Path | None = None  # where the descent starts, chosen with the batch that asked its rows
    ahead: tuple[Path, ...] = ()  # the rows of that descent asked with the batch

    def exact_at(path: Path):
        node = remote.nodes.node(prompt + path)
        return None if node is None else node.exact

    def row_at(path: Path, remaining: bytes):
        node = remote.nodes.node(prompt + path)
        if node is None:  # the search asks only for rows the batch has answered
            raise KeyError(f"no row after {len(prompt + path)} tokens")
        return remote.nodes.bounded_row(node, remaining, False)

    for _ in range(BATCH_ROUNDS + 1):
        if rows.decodes >= rows.budget:
            return
        known = CoveringSearch(
            remote.vocab,
            BoundedRows(remote, prompt, required, rows.cancel, 0, pessimistic=True),
            1 << 30,
            normalised=True,
        ).run(required)
        floor = known.log_prob if known is not None else float("-inf")
        left = rows.budget - rows.rows_asked
        # One row past the budget: the first step of the descent below, asked with the rest (the
        # in-process descent decodes it too). With it, a descent that cannot win is not made.
        front = frontier(remote.vocab, exact_at, row_at, required, floor, max(1, left + 1), frozenset(asked))
        if not front and (front.best is None or front.best[1] <= floor or rows.exact(Covering(*front.best)) is None):
            return  # proven on what is known
        if left <= 0:
            if front.rows and start is not None and not _walk_down(rows, start, floor):
                # The known rows do not show that descent: as before, the server descends from the
                # most promising open row, on what the search knew without the rows asked ahead
                # (forgotten, so they choose nothing the in-process search would not see either).
                remote.nodes.drop(prompt + path for path in ahead)
                front = frontier(remote.vocab, exact_at, row_at, required, floor, 1, frozenset(asked))
                start = None
            if front.rows and start is None:
                _descend(rows, front.rows[0][0])
            return
        if front.best is not None and front.best[1] > floor and rows.exact(Covering(*front.best)) is not None:
            # The most probable covering by its bounds has a token known only by a bound: ask for
            # that first (one streamed request, engine.remote.bounded `refine`). It most often is the
            # answer: its stream goes on into the suggestion, and its exact value raises the floor,
            # which leaves less for the batch.
            if not rows.refine(Covering(*front.best)):
                return
            continue
        if not front.values and len(front.rows) == max(1, left + 1) and known is not None and start is None:
            # The budget runs out with this batch: the last row is where the descent starts, as the
            # in-process search descends from the node it pops when its budget is spent. Its likely
            # path (the known covering's spelling, from where that row's bytes end) goes with the
            # batch, so the descent most often needs no request of its own (`_walk_down`).
            start = front.rows[-1][0]
            likely = _likely(rows, start, continuation(remote.vocab, start, required, known.path), known.path, floor)
            ahead = tuple(path for path in likely if remote.nodes.node(prompt + path) is None)
        got = fetch(remote, prompt, front, rows.cancel, rows, ahead)
        ahead = tuple(path for path in ahead if path not in got)
        if not got:
            return
        rows.decodes += 1
        rows.rows_asked += len(got)
        asked |= {path for path, _ in front.rows}


def _descend(rows: BoundedRows, path: Path) -> None:
    """The budget is spent with the proof open: as the in-process search then descends greedily
    from its most promising open node, the server does, from `path`: every token of it forced (so
    each one's value is exact), then the remaining bytes under the grammar, in one streamed
    request, read to its end (the few tokens after the spelling: closed instead, the next request
    would need a new connection). A grammar that ends with the bytes, so the model must stop
    there, would not do: it refuses the last token that runs past them, which the in-process
    search's descent may take. One token is listed per step: what the descent reads is the value
    of each token it takes (always sent), and its path most often loses; with 40 listed, its
    events were a third of the keystroke's 128 kB."""
    remote = rows.remote
    left = rows.remaining(path)
    rows.decodes += 1
    try:
        remote.query(
            rows.prompt + path[:-1], len(left) + GENERATION_SLACK, rows.cancel, forced=path[-1:], literal=left, listed=1
        )
        remote.stream.settle(True)
    except Inexpressible:
        rows.fallback = "inexpressible"


AHEAD = 6  # rows of a descent's likely path asked with the batch, at most


def continuation(vocab: VocabIndex, path: Path, required: bytes, covering: Path) -> tuple[Path, ...]:
    """The rows a greedy descent from `path` likely reads: `covering`'s strict-prefix tokens from
    where `path`'s bytes end (the bytes up to its next token boundary spelled by one token, when
    one spells them), each as the path after it."""
    pieces = vocab.pieces
    offset = sum(len(pieces[t]) for t in path)
    guess: list[int] = []
    end = 0
    for token in covering[:-1]:
        start, end = end, end + len(pieces[token])
        if end <= offset:
            continue
        if start < offset:
            gap = end - offset
            ids = [t for t, n in vocab.strict_prefixes_of(required[offset:]) if n == gap]
            if not ids:
                break
            token = ids[0]
        guess.append(token)
        offset = end
    guess = guess[:AHEAD]
    return tuple(path + tuple(guess[:i]) for i in range(1, len(guess) + 1))


def _walk_down(rows: BoundedRows, path: Path, floor: float) -> bool:
    """The descent from `path` on the known rows: True when they show it to its end (each greedy
    step: the consistent token of highest value is known exactly and every other consistent token
    is below it), or to where its value so far, with the best its next step allows, is at most
    `floor` (the best covering known exactly: whatever the descent finds then cannot be chosen).
    False at the first step they do not show."""
    remote, prompt = rows.remote, rows.prompt
    vocab = remote.vocab
    bound = _bound(rows, path)  # the path's value so far
    while True:
        if bound <= floor:
            return True
        node = remote.nodes.node(prompt + path)
        if node is None:
            return False
        remaining = rows.remaining(path)
        ids = vocab.candidates(remaining).all_ids()
        if ids.size == 0:
            return True
        values = remote.nodes.bounded_row(node, remaining, False)[ids]
        best = int(np.argmax(values))
        if bound + float(values[best]) <= floor:
            return True
        token = int(ids[best])
        if token not in node.exact or int(np.count_nonzero(values >= values[best])) > 1:
            return False
        if len(vocab.pieces[token]) >= len(remaining):
            return True  # a covering: the descent ends here
        path = path + (token,)
        bound += float(values[best])


def _bound(rows: BoundedRows, path: Path) -> float:
    """The value of `path` from its exact values and upper bounds (0: a node on it is unknown)."""
    remote, prompt = rows.remote, rows.prompt
    bound = 0.0
    for i, token in enumerate(path):
        node = remote.nodes.node(prompt + path[:i])
        if node is None:
            return 0.0
        bound += float(remote.nodes.bounded_row(node, rows.remaining(path[:i]), False)[token])
    return bound


def _likely(rows: BoundedRows, start: Path, ahead: tuple[Path, ...], covering: Path, floor: float) -> tuple[Path, ...]:
    """The rows of `ahead` (`continuation`) the descent from `start` likely reads: while its value,
    estimated with `covering`'s own values for the tokens that end where its steps end (its guess
    spells the covering's bytes), is above `floor`; `_walk_down` stops reading where it falls to
    it. On `max_help_p` after 17 spaces the descent read one of the three rows asked ahead. A wrong
    estimate costs a request (the descent's own), never a choice."""
    remote, prompt, pieces = rows.remote, rows.prompt, rows.remote.vocab.pieces
    value_at: dict[int, float] = {}  # byte offset where a token of the covering ends -> its value
    end = 0
    for i, token in enumerate(covering):
        node = remote.nodes.node(prompt + covering[:i])
        end += len(pieces[token])
        value_at[end] = node.exact.get(token, 0.0) if node is not None else 0.0
    estimate = _bound(rows, start)
    likely: list[Path] = []
    for path in ahead:
        estimate += value_at.get(sum(len(pieces[t]) for t in path), 0.0)
        if estimate <= floor:
            break
        likely.append(path)
    return tuple(likely)
