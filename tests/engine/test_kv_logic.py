"""KV bookkeeping against a recording backend (logic only; the real model is in test_model.py)."""

import threading

import numpy as np
import pytest

from engine.kv import Cancelled, KvCache, common_prefix_length


class RecordingBackend:
    n_ctx = 4096

    def __init__(self, fail_at: int | None = None):
        self.cells: list[int] = []
        self.calls: list[tuple] = []
        self.fail_at = fail_at

    def decode(self, tokens, start, cancelled):
        assert start == len(self.cells), "decode must continue exactly where KV ends"
        self.calls.append(("decode", tuple(tokens), start))
        for i in range(0, len(tokens), 4):  # chunks of 4, cancellable between chunks
            if i and cancelled():
                return None
            if self.fail_at is not None and start + i <= self.fail_at < start + i + 4:
                raise RuntimeError("decode failed")
            self.cells.extend(tokens[i : i + 4])
        return np.full(8, float(sum(self.cells)), dtype=np.float32)

    def remove_from(self, position):
        self.calls.append(("rm", position))
        del self.cells[position:]
        return True

    def clear(self):
        self.calls.append(("clear",))
        self.cells.clear()


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
    backend.decode = lambda tokens, start, _: backend_decode(tokens, start, cancelled)
    with pytest.raises(Cancelled):
        kv.logits_after(tuple(range(10)), cancel)
    assert backend.cells == [] and kv.held == 0
    backend.decode = backend_decode
    kv.logits_after(tuple(range(10)))
    assert backend.cells == list(range(10))


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
