"""FIM prompts on tiny GGUF models the tests write themselves: the exact tokens sent, in both orders,
the suffix bound, the KV reuse across keystrokes, and a model without FIM tokens left as it was."""

from __future__ import annotations

import pytest

from engine import CompletionRequest, Engine
from engine.core.prompt import PSM, PSM_LINE, SPM, FimTokens, fim_prompt
from engine.local.llama import LlamaContext
from tests.support.tiny_gguf import load

PREFIX = "def value(self):\n    return the"
SUFFIX = "\n    print(x)\nif x"
# Lines before PREFIX when typing along: more than one decode chunk (137 tokens), so the KV reuse
# measured is a real document's (a prompt sharing less than a chunk is decoded from 0: placement `kept`).
HEAD = "# the value of x is the return of the value\n" * 8


@pytest.fixture(scope="module")
def fim_engine(tiny_models):
    engine = load(tiny_models["fim"])
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def plain_engine(tiny_models):
    engine = load(tiny_models["plain"])
    yield engine
    engine.close()


class Sent:
    """What reached llama_decode: the token at every KV position, and the count per request."""

    def __init__(self) -> None:
        self.at: dict[int, int] = {}
        self.count = 0

    def tokens(self, n: int) -> list[int]:
        return [self.at[i] for i in range(n)]


@pytest.fixture()
def sent(monkeypatch) -> Sent:
    record = Sent()
    original = LlamaContext.decode

    def decode(self, tokens, start, *args, **kwargs):
        for i, token in enumerate(tokens):
            record.at[start + i] = token
        record.count += len(tokens)
        return original(self, tokens, start, *args, **kwargs)

    monkeypatch.setattr(LlamaContext, "decode", decode)
    return record


def tok(engine: Engine, text: str) -> list[int]:
    return list(engine._model.tokenize(text.encode(), add_bos=False))


def ids(engine: Engine, *pieces: str) -> list[int]:
    return [engine.vocab.pieces.index(p.encode()) for p in pieces]


def request(required: str, prefix: str = PREFIX, suffix: str | None = SUFFIX, **kw) -> CompletionRequest:
    kw.setdefault("max_tokens", 4)
    kw.setdefault("fim_order", PSM)
    return CompletionRequest(prompt=prefix, required=required, suffix=suffix, **kw)


def test_the_models_fim_tokens_come_from_the_gguf(fim_engine, plain_engine):
    assert fim_engine.fim == FimTokens(*ids_of_fim(fim_engine))
    assert plain_engine.fim is None


def ids_of_fim(engine: Engine) -> tuple[int, int, int]:
    return tuple(engine._model.fim_ids())


def test_layouts():
    fim = FimTokens(10, 11, 12)
    assert fim_prompt((1,), (5, 6), (7,), fim, PSM) == (1, 10, 5, 6, 11, 7, 12)
    assert fim_prompt((1,), (5, 6), (7,), fim, SPM) == (1, 11, 7, 10, 5, 6, 12)
    assert fim_prompt((1,), (5,), (7,), fim, PSM_LINE, (6,)) == (1, 10, 5, 11, 7, 12, 6)
    assert FimTokens.of(3, -1, 5) is None
    with pytest.raises(ValueError):
        fim_prompt((), (), (), fim, "msp")


@pytest.mark.parametrize("order", [PSM, SPM])
def test_the_exact_tokens_sent_and_the_middle_begins_with_the_required_prefix(fim_engine, sent, order):
    fim_engine.kv.forget()
    pre, suf, mid = fim_engine._model.fim_ids()
    prefix, suffix = tok(fim_engine, PREFIX), list(fim_engine.suffix_tokens(SUFFIX))
    assert prefix[-2:] == ids(fim_engine, " return", " the")  # the prompt ends at a word boundary
    result = fim_engine.complete(request(" yest", fim_order=order))
    body = [pre, *prefix, suf, *suffix] if order == PSM else [suf, *suffix, pre, *prefix]
    expected = [1, *body, mid]
    assert sent.tokens(len(expected)) == expected
    assert result.stats.prompt_tokens == len(expected)
    # The middle begins with the required prefix: boundary space + partial word, right after MID.
    assert result.required_satisfied and result.text.startswith(" yest")
    after_mid = b"".join(fim_engine.vocab.pieces[sent.at[i]] for i in range(len(expected), len(sent.at)))
    assert after_mid.startswith(b" yest")


@pytest.mark.parametrize("after", [SUFFIX, "erday the", ")", "  x"])
def test_the_suffix_spells_exactly_the_text_after_the_cursor(fim_engine, after):
    """The tiny models' SentencePiece-style tokenizer prepends a space to a text's start: the
    suffix continues the document, so it must not get one (" print" where "print" follows)."""
    pieces = [fim_engine.vocab.pieces[t] for t in fim_engine.suffix_tokens(after)]
    assert b"".join(pieces) == after.encode()
    assert b"".join(fim_engine.vocab.pieces[t] for t in tok(fim_engine, after)) == b" " + after.encode()


def test_the_suffix_keeps_its_first_tokens_only(fim_engine, sent):
    fim_engine.kv.forget()
    pre, suf, mid = fim_engine._model.fim_ids()
    fim_engine.complete(request(" yest", suffix_tokens=3))
    n = 2 + len(tok(fim_engine, PREFIX))
    assert sent.tokens(n + 5)[n:] == [suf, *list(fim_engine.suffix_tokens(SUFFIX))[:3], mid]
    fim_engine.kv.forget()
    fim_engine.complete(request(" yest", suffix_tokens=0))
    assert sent.tokens(n + 2)[n:] == [suf, mid]


def test_an_empty_suffix_still_makes_a_fim_prompt(fim_engine, sent):
    """At the end of a document the suffix is empty, and the layout is the same (no flip-flop)."""
    fim_engine.kv.forget()
    pre, suf, mid = fim_engine._model.fim_ids()
    fim_engine.complete(request(" yest", suffix=""))
    prefix = tok(fim_engine, PREFIX)
    assert sent.tokens(len(prefix) + 4) == [1, pre, *prefix, suf, mid]


def keystrokes(engine: Engine, order: str) -> list[tuple[str, int, int]]:
    """Type " yesterday the" after HEAD + PREFIX with SUFFIX after the cursor: (required, decoded, reused)."""
    engine.kv.forget()
    typed = HEAD + PREFIX
    steps = []
    for ch in " yesterday th":
        typed += ch
        word = typed.rsplit(" ", 1)
        prompt, required = word[0], " " + word[1]
        r = engine.complete(request(required, prefix=prompt, fim_order=order))
        steps.append((required, r.stats.decoded_tokens, r.stats.reused_tokens))
    return steps


@pytest.mark.parametrize("order", [PSM, SPM])
def test_typing_inside_a_word_reuses_the_whole_prompt(fim_engine, order):
    steps = keystrokes(fim_engine, order)
    inside = [s for s in steps if len(s[0]) > 1 and s[0] != " yesterday" and s[0] != " t"]
    assert inside and all(decoded == 0 for _, decoded, _ in inside), steps


def test_a_new_word_decodes_the_suffix_again_in_psm_but_not_in_spm(fim_engine):
    """Where the suffix goes decides what a new word costs: after " yesterday" is typed and a space
    starts the next word, PSM decodes the word, SUF, the suffix and MID again; SPM the word and MID."""
    word = len(tok(fim_engine, PREFIX + " yesterday")) - len(tok(fim_engine, PREFIX))
    assert word == 1
    suffix = len(list(fim_engine.suffix_tokens(SUFFIX)))
    psm = dict((req, dec) for req, dec, _ in keystrokes(fim_engine, PSM))
    spm = dict((req, dec) for req, dec, _ in keystrokes(fim_engine, SPM))
    assert psm[" "] == word + 1 + suffix + 1
    assert spm[" "] == word + 1


def test_psm_line_puts_the_cursors_line_after_mid(fim_engine, sent):
    """`psm-line`: the text before the cursor's line is the prefix, the line's own text up to the
    word boundary goes after MID (llama.cpp's /infill with llama.vim's `prompt`)."""
    fim_engine.kv.forget()
    pre, suf, mid = fim_engine._model.fim_ids()
    head, line = PREFIX.rsplit("\n", 1)
    result = fim_engine.complete(request(" yest", fim_order=PSM_LINE))
    before, whole = tok(fim_engine, head + "\n"), tok(fim_engine, PREFIX)
    assert whole[: len(before)] == before  # this tokenizer keeps the line's start a token boundary
    expected = [1, pre, *before, suf, *fim_engine.suffix_tokens(SUFFIX), mid, *whole[len(before) :]]
    assert sent.tokens(len(expected)) == expected
    assert result.required_satisfied and result.text.startswith(" yest")


def test_in_psm_line_a_new_word_decodes_only_itself_and_a_new_line_the_suffix(fim_engine):
    word = len(tok(fim_engine, PREFIX + " yesterday")) - len(tok(fim_engine, PREFIX))
    steps = dict((req, dec) for req, dec, _ in keystrokes(fim_engine, PSM_LINE))
    assert steps[" "] <= word  # 0 when the word typed is what the KV holds after MID already
    suffix = len(list(fim_engine.suffix_tokens(SUFFIX)))
    fim_engine.complete(request(" yest", fim_order=PSM_LINE))
    below = fim_engine.complete(request(" yest", prefix=PREFIX + " now\n    x =", fim_order=PSM_LINE))
    assert below.stats.decoded_tokens >= suffix  # the prefix before the line changed


def test_a_model_without_fim_tokens_ignores_the_suffix(plain_engine, sent):
    """Exactly as before: the same tokens sent and the same text, with or without a suffix."""
    plain_engine.kv.forget()
    without = plain_engine.complete(request(" yest", suffix=None))
    first = sent.tokens(without.stats.prompt_tokens)
    plain_engine.kv.forget()
    sent.at.clear()
    with_suffix = plain_engine.complete(request(" yest", suffix=SUFFIX))
    assert sent.tokens(with_suffix.stats.prompt_tokens) == first == [1, *tok(plain_engine, PREFIX)]
    assert with_suffix.text == without.text
    assert with_suffix.stats.prompt_tokens == without.stats.prompt_tokens


def test_the_fim_prompt_fits_the_context(fim_engine, sent):
    """A long prefix is windowed from its head; the FIM tokens and the suffix are always kept."""
    fim_engine.kv.forget()
    pre, suf, mid = fim_engine._model.fim_ids()
    long_prefix = "x = the value\n" * 400
    result = fim_engine.complete(request(" yest", prefix=long_prefix.rstrip("\n") + " return", max_tokens=8))
    n = result.stats.prompt_tokens
    assert n <= fim_engine.n_ctx - 8
    tokens = sent.tokens(n)
    assert tokens[:2] == [1, pre] and tokens[-1] == mid
    assert tokens[-2 - len(list(fim_engine.suffix_tokens(SUFFIX))) : -1] == [
        suf,
        *list(fim_engine.suffix_tokens(SUFFIX)),
    ]


def test_a_suffix_bound_larger_than_the_context_still_leaves_room_for_the_prefix(fim_engine, sent):
    """`fimSuffixTokens` may be up to 4096 whatever `contextTokens` is: a long text after the cursor
    is then cut to half of the context's room, instead of failing the request with a message about
    `maxTokens`."""
    fim_engine.kv.forget()
    pre, suf, mid = fim_engine._model.fim_ids()
    long_suffix = "\n    print(x)" * 300
    result = fim_engine.complete(request(" yest", suffix=long_suffix, suffix_tokens=4096, max_tokens=8))
    tokens = sent.tokens(result.stats.prompt_tokens)
    prefix = tok(fim_engine, PREFIX)
    assert tokens[: 2 + len(prefix) + 1] == [1, pre, *prefix, suf] and tokens[-1] == mid
    assert result.stats.prompt_tokens <= fim_engine.n_ctx - 8
    assert len(tokens) - len(prefix) - 4 >= (fim_engine.n_ctx - 8) // 2 - 32  # the suffix got its half


@pytest.mark.parametrize("which", ["plain", "fim"])
def test_typing_into_a_word_of_a_windowed_prompt_decodes_nothing(fim_engine, plain_engine, which):
    """A prompt longer than the context is windowed; the required prefix grows with every letter
    typed, and the window's start must not move with it (it did every few letters: a whole
    window decoded again)."""
    engine = fim_engine if which == "fim" else plain_engine
    engine.kv.forget()
    prefix = "x = the value\n" * 300 + "return the"
    decoded = [
        engine.complete(request(" yesterda"[:n], prefix=prefix, max_tokens=4)).stats.decoded_tokens
        for n in range(2, 10)
    ]
    assert decoded[0] > 100 and decoded[1:] == [0] * 7, decoded
