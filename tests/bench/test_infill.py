"""llama.vim's choice of what to show as the user types (bench.infill.LlamaVimSession), on a
stand-in server: the logic of its answer cache, read in llama.vim's source."""

from __future__ import annotations

from bench.infill import AnswerCache, LlamaVimSession, cache_keys, local_context


class _Server:
    """Answers `say(text before the cursor)`; records every request (before, first, indent)."""

    def __init__(self, say) -> None:
        self.say, self.asked = say, []

    def __call__(self, text: str, cursor: int, first: bool, indent: int | None) -> tuple[float, str | None]:
        self.asked.append((text[:cursor], first, indent))
        return 1.0, self.say(text[:cursor])


DOC = "x = 1\n"


def test_typing_along_a_suggestion_shows_its_rest_and_a_newer_answer_is_only_cached():
    server = _Server(lambda before: " total = x" if before.endswith("y =") else "other")
    session = LlamaVimSession(server)
    text = DOC + "y ="
    assert session.shown(text, len(text))[1] == " total = x"
    text += " "
    ms, shown = session.shown(text, len(text))
    # the rest of the suggestion typed along, not the answer to this keystroke's own request ("other"),
    # which was still asked for and is cached
    assert shown == "total = x" and ms == 1.0 and len(server.asked) == 2
    text += "t"
    assert session.shown(text, len(text))[1] == "otal = x"
    # a keystroke off the suggestion: the answer to its own request
    text = text[:-1] + "q"
    assert session.shown(text, len(text))[1] == "other"


def test_an_exact_context_seen_before_is_shown_from_the_cache_with_no_request():
    server = _Server(lambda before: " done")
    session = LlamaVimSession(server)
    text = DOC + "a"
    session.shown(text, len(text))
    session.shown(text + "b", len(text) + 1)
    asked = len(server.asked)
    assert session.shown(text, len(text))[1] == " done" and len(server.asked) == asked


def test_a_rest_of_only_whitespace_is_not_shown_and_the_new_answer_is():
    server = _Server(lambda before: "b " if before.endswith("a") else " next")
    session = LlamaVimSession(server)
    text = DOC + "a"
    assert session.shown(text, len(text))[1] == "b "
    text += "b"
    assert session.shown(text, len(text))[1] == " next"  # the cached rest " " is only whitespace


def test_reaching_the_end_of_a_shown_suggestion_uses_the_request_sent_ahead_for_it():
    server = _Server(lambda before: "cd" if before.endswith("ab") else "zz")
    session = LlamaVimSession(server)
    text = DOC + "ab"
    session.shown(text, len(text))
    text += "cd"  # the whole suggestion accepted
    session.shown(text, len(text))
    assert server.asked[-1] == (text, False, 0)  # the request ahead: more time, the last request's indent
    assert len(server.asked) == 2  # and no other request: its answer is the exact context's


def test_the_cache_drops_its_least_recently_used_key_when_full():
    cache = AnswerCache(max_keys=2)
    cache.insert(b"a", "1")
    cache.insert(b"b", "2")
    assert cache.get(b"a") == "1"  # now the most recent
    cache.insert(b"c", "3")
    assert (cache.get(b"a"), cache.get(b"b"), cache.get(b"c")) == ("1", None, "3")


def test_an_answer_is_cached_under_its_context_and_with_its_first_prefix_lines_dropped():
    ctx = local_context("l1\nl2\nl3\nl4\nl5\nab", 17)
    keys = cache_keys(ctx)
    assert (
        len(keys) == 4 and keys[0].startswith(b"l1\nl2") and keys[1].startswith(b"l2\n") and keys[3].startswith(b"l4\n")
    )
