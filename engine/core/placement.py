"""Where a prompt is decoded: the same rule for an in-process sequence (engine.local.kv) and a
llama-server slot (engine.remote.slots), so both backends reuse the same prefixes and decode the
same ubatches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The decode chunk: the in-process engine's (engine.local.llama CHUNK_TOKENS) and llama-server's
# `--ubatch-size`. Where a decode starts fixes its chunk boundaries, and a row depends on them.
UBATCH_TOKENS = 64
MOVE_MIN_GAIN = 32  # a prompt goes to a sequence sharing at least this many more tokens with it
MOVE_MIN_DROP = 128  # else one that would cut the live sequence back this far may go to a free one
# A prompt sharing at least this part of another: it goes to the slot that holds that one (a
# server's), and a prompt decode stopped mid-way is finished before it (both backends: llama-server
# finishes a prefill its client stopped waiting for, engine.remote.fills; engine.local.kv `_finish_stopped`).
SLOT_SHARE = 0.5


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    # Compare in blocks first: prompts share long prefixes, so this is mostly one slice compare.
    # As tuples: the held tokens are a list and prompts are tuples, and a list never equals a tuple.
    step = 256
    while i + step <= n and tuple(a[i : i + step]) == tuple(b[i : i + step]):
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def placement(
    live: Sequence[int] | None,
    others: Sequence[tuple[Any, Sequence[int]]],
    tokens: Sequence[int],
    beside: bool = False,
) -> tuple[str, Any]:
    """Where a prompt is decoded, for both backends (a sequence here, a llama-server slot in
    engine.remote.rows), so both reuse the same prefixes and decode the same ubatches:
    ("move", key) to the other sequence that shares clearly more with it; ("fresh", None) to an
    empty or the least recently used one, from position 0, when staying would cut the live one
    back by many tokens and keep less than it must decode anyway; else ("stay", None), keeping
    the prefix the live sequence shares. `live` None: nothing used yet (fresh); no `others`:
    there is nowhere else to go (stay). `beside` (the whole prompt prefetched after a first
    answer from another): never cut the live one back, fresh instead of staying."""
    if live is None:
        return "fresh", None
    if not others:
        return "stay", None
    keep = common_prefix_length(live, tokens)
    shared, best = max((common_prefix_length(held, tokens), key) for key, held in others)
    if shared >= keep + MOVE_MIN_GAIN:
        return "move", best
    if len(live) - keep >= MOVE_MIN_DROP and keep < len(tokens) - keep:
        return "fresh", None
    if beside and keep < len(live):
        return "fresh", None
    return "stay", None


def kept(shared: int, prompt: int, ubatch: int = UBATCH_TOKENS) -> int:
    """How many of the `shared` tokens a sequence (or slot) has in common with a prompt of `prompt`
    tokens a decode keeps, on both backends: all of them, or none when they are fewer than one
    `ubatch` (the decode chunk) and more than one ubatch of the prompt is left to decode anyway.

    Why: the two backends place a new document by the same rule (`placement`) but on what each
    holds, which can differ by the few tokens a stream decoded past its prompt; one then stays in a
    sequence that shares only the BOS with the prompt and decodes from position 1, the other goes
    to a fresh one and decodes from 0. Their ubatches are then cut at other places and rows parted
    by up to 0.28 nats on Gemma 3 270M. Decoding from 0 makes both cold decodes, for at most 63
    tokens more where a ubatch or more is decoded anyway: once per new document. A prompt with less
    than that left (a new word in a short document) keeps what it shares, on both sides."""
    if 0 < shared < ubatch and prompt - shared > ubatch:
        return 0
    return shared
