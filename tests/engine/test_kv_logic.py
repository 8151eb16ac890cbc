"""KV bookkeeping against a recording backend (logic only; the real model is in test_model.py)."""

import threading

import numpy as np
import pytest

from engine.backend import Cancelled
from engine.core.placement import common_prefix_length
from engine.local.kv import Decoded, KvCache


class RecordingBackend:
    """KV cells per sequence as lists; a row is [sum of the cells up to that token] * 8."""

    n_ctx = 4096
    chunk_tokens = 4  # as `decode` below

    def __init__(self, fail_at: int | None = None, sequences: int = 1):
        self.sequences = sequences
        self.seqs: list[list[int]] = [[] for _ in range(sequences)]
        self.calls: list[tuple] = []
        self.fail_at = fail_at
        self.refuse_rm = False

    @property
    def cells(self) -> list[int]:
        return self.seqs[0]

    def decode(self, tokens, start, cancelled, outputs=1, seq=0):
        cells = self.seqs[seq]
        assert start == len(cells), "decode must continue exactly where KV ends"
        assert 1 <= outputs <= len(tokens)
        self.calls.append(("decode", tuple(tokens), start) + ((seq,) if seq else ()))
        rows = []
        for i in range(0, len(tokens), 4):  # chunks of 4, cancellable between chunks
            if i and cancelled():
                return Decoded(i, None)
            if self.fail_at is not None and start + i <= self.fail_at < start + i + 4:
                raise RuntimeError("decode failed")
            for token in tokens[i : i + 4]:
                cells.append(token)
                rows.append(row_for(cells))
        return Decoded(len(tokens), np.stack(rows[len(tokens) - outputs :]))

    def remove_from(self, position, seq=0):
        self.calls.append(("rm", position) + ((seq,) if seq else ()))
        if self.refuse_rm:
            return False
        del self.seqs[seq][position:]
        return True

    def clear(self):
        self.calls.append(("clear",))
        for cells in self.seqs:
            cells.clear()


def row_for(tokens) -> np.ndarray:
    return np.full(8, float(sum(tokens)), dtype=np.float32)


def test_common_prefix_length_over_blocks():
    a = list(range(1000))
    assert common_prefix_length(a, a[:700] + [-1]) == 700
    assert common_prefix_length(a, a) == 1000
    assert common_prefix_length([], a) == 0


def test_only_the_new_tail_is_decoded_and_an_unchanged_prompt_decodes_nothing():
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3, 4, 5))
    kv.logits_after((1, 2, 3, 4, 5, 6, 7))
    assert backend.calls[-1] == ("decode", (6, 7), 5)
    before = len(backend.calls)
    kv.logits_after((1, 2, 3, 4, 5, 6, 7))
    assert len(backend.calls) == before and kv.decoded == 7


def test_a_prompt_sharing_less_than_a_chunk_is_decoded_from_0():
    """Another document that shares only the BOS with the sequence: decoded from position 0, in a
    cold decode's chunks, as llama-server is asked to (engine.core.placement `kept`), when more than
    a chunk is left to decode anyway; with less left, what it shares is kept."""
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3, 4, 5))
    kv.logits_after((1, 7, 8, 9, 10, 11, 12))  # more than a chunk (4) left to decode anyway
    assert backend.calls[-2:] == [("rm", 0), ("decode", (1, 7, 8, 9, 10, 11, 12), 0)]
    kv.logits_after((1, 7, 8))
    assert backend.calls[-2:] == [("rm", 2), ("decode", (8,), 2)]
    kv.logits_after((1, 7, 20, 21))  # a chunk or less left: what it shares is kept
    assert backend.calls[-2:] == [("rm", 2), ("decode", (20, 21), 2)]


def test_a_changed_tail_is_removed_then_decoded():
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3, 4, 5))
    kv.logits_after((1, 2, 9))
    assert backend.calls[-2:] == [("rm", 2), ("decode", (9,), 2)]
    assert backend.cells == [1, 2, 9]


def test_a_forgotten_row_re_decodes_only_the_last_token():
    backend = RecordingBackend()
    kv = KvCache(backend, remembered_rows=1)
    kv.logits_after((1, 2, 3))
    kv.logits_after((1, 2, 3, 4))  # evicts the row for (1, 2, 3)
    kv.logits_after((1, 2, 3))
    assert backend.calls[-2:] == [("rm", 2), ("decode", (3,), 2)]


def test_a_call_keeps_the_rows_of_its_whole_path():
    """A multi-line suggestion walks 48 tokens: the next letter typed along it reads the prompt's
    row and every row of the path again. With room for 48 rows only, that first row was evicted,
    and each re-decoded row evicted the next one needed: the whole suggestion generated again."""
    backend = RecordingBackend()
    kv = KvCache(backend)
    prompt = (1, 2, 3)
    path = tuple(range(10, 60))  # 50 generated tokens
    for keystroke in range(2):
        kv.begin(None, max_tokens=len(path))
        for i in range(len(path) + 1):
            kv.logits_after(prompt + path[:i])
        kv.end()
        if keystroke == 0:
            decoded = kv.decoded
    assert kv.decoded == decoded  # the second walk is read from memory: nothing decoded


def test_cancel_between_chunks_leaves_a_consistent_cache():
    backend = RecordingBackend()
    kv = KvCache(backend)
    cancel = threading.Event()
    calls = 0

    def cancelled():
        nonlocal calls
        calls += 1
        return True

    backend_decode = backend.decode
    backend.decode = lambda tokens, start, _, outputs=1, seq=0: backend_decode(tokens, start, cancelled, outputs, seq)
    with pytest.raises(Cancelled):
        kv.logits_after(tuple(range(10)), cancel)
    # the first chunk was decoded before the cancel: it stays, and the next request resumes there
    assert backend.cells == [0, 1, 2, 3] and kv.held == 4 and kv.decoded == 4
    backend.decode = backend_decode
    row = kv.logits_after(tuple(range(10)))
    assert backend.calls[-1] == ("decode", tuple(range(4, 10)), 4)
    assert backend.cells == list(range(10)) and row[0] == sum(range(10))


def test_work_survives_every_cancel_of_a_long_prompt():
    """Typing into a cold document: each keystroke's request is cancelled after one chunk, yet
    the prompt is decoded once in total, never from zero again."""
    backend = RecordingBackend()
    kv = KvCache(backend)
    prompt = tuple(range(1, 41))

    def cancelled_after_one_chunk(tokens, start, _, outputs=1, seq=0):
        return RecordingBackend.decode(backend, tokens, start, lambda: True, outputs, seq)

    backend.decode = cancelled_after_one_chunk
    for _ in range(9):
        with pytest.raises(Cancelled):
            kv.logits_after(prompt, threading.Event())
    del backend.decode
    kv.logits_after(prompt)
    assert kv.decoded == 40 and backend.cells == list(prompt)


def _stopped_prefill(backend: RecordingBackend, kv: KvCache, prompt: tuple[int, ...]) -> None:
    """A prefetch of `prompt` cancelled after its first chunk (a request came)."""

    def cancelled_after_one_chunk(tokens, start, _, outputs=1, seq=0):
        return RecordingBackend.decode(backend, tokens, start, lambda: True, outputs, seq)

    backend.decode = cancelled_after_one_chunk
    with pytest.raises(Cancelled):
        kv.prefill(prompt, threading.Event())
    del backend.decode
    assert backend.cells == list(prompt[:4])


def test_a_stopped_prefetch_is_finished_before_a_request_sharing_half_of_it():
    """As llama-server finishes a prefill its client stopped waiting for: the request's prompt is
    then decoded in the same chunks whenever it came (engine.core.placement SLOT_SHARE)."""
    backend = RecordingBackend()
    kv = KvCache(backend)
    prompt = tuple(range(1, 21))
    _stopped_prefill(backend, kv, prompt)
    request = prompt[:14] + (99, 98)
    kv.logits_after(request)
    # up to the end of the prefetch's chunk that holds the cut (16), and one token alone after it
    assert backend.calls[-3:] == [("decode", prompt[4:17], 4), ("rm", 14), ("decode", (99, 98), 14)]


def test_a_request_sharing_all_of_a_stopped_prefetch_finishes_it_whole():
    backend = RecordingBackend()
    kv = KvCache(backend)
    prompt = tuple(range(1, 21))
    _stopped_prefill(backend, kv, prompt)
    kv.logits_after(prompt + (99,))
    assert backend.calls[-2:] == [("decode", prompt[4:], 4), ("decode", (99,), 20)]
    assert kv.remembers(prompt)  # the prefetch's own row, as if it had never stopped


def test_a_stopped_prefetch_is_not_finished_for_a_request_sharing_less():
    backend = RecordingBackend()
    kv = KvCache(backend)
    prompt = tuple(range(1, 21))
    _stopped_prefill(backend, kv, prompt)
    kv.logits_after(prompt[:6] + (99,))
    assert backend.calls[-1] == ("decode", (5, 6, 99), 4) and not kv.remembers(prompt)
    kv.logits_after(prompt)  # cut back since: nothing is finished, the prompt decodes from the cut
    assert backend.calls[-2:] == [("rm", 6), ("decode", prompt[6:], 6)]


def test_a_cancel_while_finishing_a_stopped_prefetch_leaves_it_to_the_next_request():
    backend = RecordingBackend()
    kv = KvCache(backend)
    prompt = tuple(range(1, 21))
    _stopped_prefill(backend, kv, prompt)
    plain = backend.decode

    def cancelled_after_one_chunk(tokens, start, _, outputs=1, seq=0):
        return RecordingBackend.decode(backend, tokens, start, lambda: True, outputs, seq)

    backend.decode = cancelled_after_one_chunk
    with pytest.raises(Cancelled):
        kv.logits_after(prompt[:12] + (99,), threading.Event())
    backend.decode = plain
    assert backend.cells == list(prompt[:8])
    kv.logits_after(prompt[:12] + (99,))
    assert backend.calls[-3:] == [("decode", prompt[8:13], 8), ("rm", 12), ("decode", (99,), 12)]


def test_a_set_cancel_flag_stops_before_any_decode():
    kv = KvCache(RecordingBackend())
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        kv.logits_after((1, 2), cancel)


def test_a_failed_decode_clears_the_cache_instead_of_trusting_it():
    backend = RecordingBackend(fail_at=6)
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3))
    with pytest.raises(RuntimeError):
        kv.logits_after(tuple(range(1, 12)))
    assert ("clear",) in backend.calls and kv.held == 0
    backend.fail_at = None
    kv.logits_after((1, 2, 3))  # nothing is reused from uncertain memory
    assert backend.calls[-1] == ("decode", (1, 2, 3), 0)


def test_the_lock_guards_the_remembered_rows_too():
    """Rows are read and written under the same lock as the KV bookkeeping (issue 12)."""
    backend = RecordingBackend()
    kv = KvCache(backend, remembered_rows=4)
    errors = []

    def worker(base):
        try:
            for i in range(200):
                kv.logits_after((1, 2, base + i % 7))
        except Exception as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(b,)) for b in (100, 200, 300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_refused_kv_removal_clears_the_cache():
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3, 4, 5))
    backend.refuse_rm = True
    kv.logits_after((1, 2, 9))
    assert ("clear",) in backend.calls and backend.cells == [1, 2, 9] and kv.held == 3


def test_rows_along_a_draft_are_decoded_in_one_batch_and_remembered():
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3))
    kv.rows_along((1, 2, 3, 4), (5, 6))
    assert backend.calls[-1] == ("decode", (4, 5, 6), 3)
    calls = len(backend.calls)
    for context in ((1, 2, 3, 4), (1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6)):
        assert kv.remembers(context)
        assert kv.logits_after(context)[0] == sum(context)
    assert len(backend.calls) == calls
    kv.logits_after((1, 2, 3, 4, 5, 6, 7))  # the draft's tokens are in KV: one more token decoded
    assert backend.calls[-1] == ("decode", (7,), 6)
    kv.logits_after((1, 2, 3, 4, 8))  # a rejected draft token is cut like any changed tail
    assert backend.calls[-2:] == [("rm", 4), ("decode", (8,), 4)]


def test_rows_along_when_the_context_row_is_needed_again():
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3))
    kv.rows_along((1, 2, 3), (4,))  # KV holds the whole context: its last token is decoded again
    assert backend.calls[-2:] == [("rm", 2), ("decode", (3, 4), 2)]


def doc(base: int, n: int = 200) -> tuple[int, ...]:
    return (1,) + tuple(range(base, base + n))


def test_coming_back_to_a_document_finds_it_still_decoded_in_another_sequence():
    backend = RecordingBackend(sequences=3)
    kv = KvCache(backend)
    a, b = doc(1000), doc(5000)
    kv.logits_after(a)
    kv.logits_after(b)  # A would be cut back to BOS: B goes to an empty sequence instead
    assert backend.seqs[0] == list(a) and backend.seqs[1] == list(b)
    decoded = kv.decoded
    kv.logits_after(a + (7, 8))
    assert kv.decoded - decoded == 2 and backend.seqs[0] == list(a + (7, 8)) and kv.switches == 1
    assert kv.sequences() == [len(a) + 2, len(b), 0]


def test_a_small_change_stays_in_the_live_sequence():
    backend = RecordingBackend(sequences=3)
    kv = KvCache(backend)
    a = doc(1000)
    kv.logits_after(a)
    kv.logits_after(a[:-10] + (3,))
    assert backend.seqs[1] == [] and backend.seqs[0] == list(a[:-10] + (3,))


def test_the_least_recently_used_document_is_the_one_replaced():
    backend = RecordingBackend(sequences=3)
    kv = KvCache(backend)
    a, b, c, d = doc(1000), doc(2000), doc(3000), doc(4000)
    for tokens in (a, b, c, a + (5,), d):  # A was used again after C, so B goes
        kv.logits_after(tokens)
    held = sorted(map(tuple, backend.seqs))
    assert held == sorted([a + (5,), c, d])


def test_a_single_sequence_cache_never_switches():
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after(doc(1000))
    kv.logits_after(doc(2000))
    assert backend.cells == list(doc(2000)) and kv.switches == 0


def test_an_empty_token_sequence_is_refused_and_the_cache_is_untouched():
    backend = RecordingBackend()
    kv = KvCache(backend)
    kv.logits_after((1, 2, 3))
    with pytest.raises(ValueError):
        kv.logits_after(())
    assert kv.held == 3 and backend.cells == [1, 2, 3]


def test_the_cursor_moved_up_in_the_same_document_stays_in_its_sequence():
    """A prompt that is a prefix of what the live sequence holds (a cursor further up, or the
    prefetch of the document's end before a request in its middle) decodes one token, not the
    whole prompt again in another sequence."""
    backend = RecordingBackend(sequences=3)
    kv = KvCache(backend)
    a = doc(1000, 1000)
    kv.logits_after(a)
    decoded = kv.decoded
    kv.logits_after(a[:500])
    assert kv.decoded - decoded == 1 and backend.seqs[0] == list(a[:500]) and backend.seqs[1] == []
    kv.logits_after(a[:300] + (7, 8))  # an edit further up: only the edit is decoded
    assert kv.decoded - decoded == 3 and backend.seqs[0] == list(a[:300] + (7, 8))


def test_another_document_with_the_same_long_header_still_moves():
    backend = RecordingBackend(sequences=3)
    kv = KvCache(backend)
    header = doc(100, 300)
    a, b = header + tuple(range(2000, 2600)), header + tuple(range(5000, 5600))
    kv.logits_after(a)
    kv.logits_after(b)  # shares 301 tokens but adds 600: A stays decoded
    assert backend.seqs[0] == list(a) and backend.seqs[1] == list(b)


def test_a_draft_is_never_batched_with_more_of_the_context_than_its_last_token():
    """Verification batches stay at the last token + the draft (bitwise the rows of single steps);
    a longer missing context is decoded alone first, as plain decoding would decode it."""
    backend = RecordingBackend()
    kv = KvCache(backend)
    head = (90, 91, 92, 93)  # one chunk: a shorter shared prefix would be decoded again (placement `kept`)
    kv.logits_after(head + (1, 2, 3))
    kv.rows_along(head + (1, 2, 3, 4, 5), (6, 7))
    assert backend.calls[-1] == ("decode", (4, 5), 7) and kv.remembers(head + (1, 2, 3, 4, 5))
    kv.rows_along(head + (1, 2, 3, 4, 5, 6), (7, 8))
    assert backend.calls[-1] == ("decode", (6, 7, 8), 9)


def test_common_prefix_length_of_a_held_list_and_a_prompt_tuple():
    """The cache holds a list and prompts are tuples: the block compare must still match them."""
    held = list(range(1000))
    assert common_prefix_length(held, tuple(held[:700]) + (-1,)) == 700
    assert common_prefix_length(held, tuple(held)) == 1000


def test_a_prefill_beside_the_live_prompt_never_cuts_it_back():
    """A first answer's prompt (engine.Engine.first_prompt) stays decoded while the whole one that
    shares its start decodes beside it; without `beside` the whole one would continue the live one."""
    backend = RecordingBackend(sequences=3)
    kv = KvCache(backend)
    lean = doc(100, 80) + (7, 7, 7)
    whole = doc(100, 80) + tuple(range(3000, 3200))
    kv.logits_after(lean)
    kv.prefill(whole, beside=True)
    assert backend.seqs[0] == list(lean) and backend.seqs[1] == list(whole)
    assert kv.cached_prefix(lean) == len(lean) and kv.cached_prefix(whole) == len(whole)
    kv.forget()
    kv.logits_after(lean)
    kv.prefill(whole)  # staying: the shared start is kept, the rest of the live one cut
    assert [s for s in backend.seqs if s] == [list(whole)] and kv.cached_prefix(lean) == 81
    kv.prefill(whole + (1, 2), beside=True)  # the live one is a prefix: it just grows
    assert [s for s in backend.seqs if s] == [list(whole + (1, 2))]
