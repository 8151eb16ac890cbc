"""The context layouts of engine.prompt: other files first, in the model's own layout (fast, no model)."""

from __future__ import annotations

from engine.core.prompt import PSM, SPM, FimTokens, RepoTokens, comment_line, context_tokens, layout
from engine.types import ContextFile, RepoContext

FIM = FimTokens(1001, 1002, 1003)
REPO = RepoTokens(2001, 2002)


def chars(text: str) -> tuple[int, ...]:
    """A tokenizer with one token per character (code point), so tokens read back as text."""
    return tuple(ord(c) for c in text)


def spelled(tokens: tuple[int, ...]) -> str:
    names = {1001: "<PRE>", 1002: "<SUF>", 1003: "<MID>", 2001: "<REPO>", 2002: "<SEP>", 7: "<BOS>"}
    return "".join(names.get(t, chr(t)) for t in tokens)


CONTEXT = RepoContext(
    (ContextFile("pkg/a.py", "def alpha():\n    return 1\n"), ContextFile("pkg/b.py", "BETA = 2")),
    path="pkg/main.py",
    name="proj",
)


def test_repo_level_layout_is_qwens():
    ctx = context_tokens(CONTEXT, chars, REPO, 10_000)
    prompt = layout((), ctx, chars("x = "), chars("\nprint(x)"), FIM, REPO)
    assert spelled(prompt) == (
        "<REPO>proj\n<SEP>pkg/a.py\ndef alpha():\n    return 1\n<SEP>pkg/b.py\nBETA = 2\n"
        "<SEP>pkg/main.py\n<PRE>x = <SUF>\nprint(x)<MID>"
    )


def test_plain_layout_names_each_path_in_a_comment_inside_the_fim_prefix():
    ctx = context_tokens(CONTEXT, chars, None, 10_000)
    prompt = layout((7,), ctx, chars("x = "), chars("\n"), FIM, None)
    assert spelled(prompt) == (
        "<BOS><PRE># pkg/a.py\ndef alpha():\n    return 1\n\n# pkg/b.py\nBETA = 2\n\n# pkg/main.py\nx = <SUF>\n<MID>"
    )
    spm = layout((7,), ctx, chars("x = "), chars("\n"), FIM, None, SPM)
    assert spelled(spm).startswith("<BOS><SUF>\n<PRE># pkg/a.py\n") and spelled(spm).endswith("x = <MID>")


def test_without_fim_the_context_is_the_prompts_start():
    ctx = context_tokens(CONTEXT, chars, None, 10_000)
    assert spelled(layout((7,), ctx, chars("x"), None, None, None)).startswith("<BOS># pkg/a.py\n")
    repo = context_tokens(CONTEXT, chars, REPO, 10_000)
    assert spelled(layout((), repo, chars("x"), None, FIM, REPO)).endswith("<SEP>pkg/main.py\nx")


def test_files_that_do_not_fit_are_dropped_from_the_end_so_the_kept_ones_stay_a_prefix():
    full = context_tokens(CONTEXT, chars, REPO, 10_000)
    first_only = len(chars("proj\n")) + 1 + len(chars("pkg/a.py\ndef alpha():\n    return 1\n")) + 1
    tail = 1 + len(chars("pkg/main.py\n"))
    cut = context_tokens(CONTEXT, chars, REPO, first_only + tail + 3)
    assert spelled(cut) == "<REPO>proj\n<SEP>pkg/a.py\ndef alpha():\n    return 1\n<SEP>pkg/main.py\n"
    assert full[:first_only] == cut[:first_only]
    assert context_tokens(CONTEXT, chars, REPO, 4) == ()  # not even the headers fit: no context at all


def test_the_file_that_does_not_fit_keeps_the_first_lines_that_do():
    tail = 1 + len(chars("pkg/main.py\n"))
    head = len(chars("proj\n")) + 1
    one_line = head + 1 + len(chars("pkg/a.py\ndef alpha():\n"))
    cut = context_tokens(CONTEXT, chars, REPO, one_line + tail + 2)  # room for one line of pkg/a.py, not two
    assert spelled(cut) == "<REPO>proj\n<SEP>pkg/a.py\ndef alpha():\n<SEP>pkg/main.py\n"  # and pkg/b.py is not tried


def test_comment_syntax_follows_the_files_language():
    assert comment_line("a/b.py") == "# a/b.py\n"
    assert comment_line("src/x.c") == "// src/x.c\n"
    assert comment_line("lib/index.js") == "// lib/index.js\n"
    assert comment_line("q.sql") == "-- q.sql\n"
    assert comment_line("Makefile") == "# Makefile\n"


def test_psm_order_is_unchanged_without_context():
    assert layout((7,), (), chars("a"), chars("b"), FIM, REPO, PSM) == (7, 1001, ord("a"), 1002, ord("b"), 1003)


def test_ranked_lines_that_do_not_fit_are_the_worst_ranked_wherever_they_are():
    ranked = RepoContext(
        (ContextFile("pkg/a.py", "def alpha():\n    return 1\nGAMMA = 3\n", (2, 3, 0)), ContextFile("pkg/b.py", "BETA = 2", (1,))),
        path="pkg/main.py", name="proj",
    )  # fmt: skip
    full = context_tokens(ranked, chars, REPO, 10_000)
    assert spelled(full).count("<SEP>") == 3  # everything fits: as without ranks
    cut = context_tokens(ranked, chars, REPO, len(full) - 5)  # one line has to go: the worst (rank 3)
    assert (
        spelled(cut)
        == "<REPO>proj\n<SEP>pkg/a.py\ndef alpha():\nGAMMA = 3\n<SEP>pkg/b.py\nBETA = 2\n<SEP>pkg/main.py\n"
    )
    two = len(full) - len(chars("def alpha():\n    return 1\n"))  # rank 2 and 3 go; not BETA (1) at the list's end
    assert (
        spelled(context_tokens(ranked, chars, REPO, two))
        == "<REPO>proj\n<SEP>pkg/a.py\nGAMMA = 3\n<SEP>pkg/b.py\nBETA = 2\n<SEP>pkg/main.py\n"
    )
    only = len(chars("proj\n")) + 1 + 1 + len(chars("pkg/a.py\nGAMMA = 3\n")) + 1 + len(chars("pkg/main.py\n"))
    assert (
        spelled(context_tokens(ranked, chars, REPO, only)) == "<REPO>proj\n<SEP>pkg/a.py\nGAMMA = 3\n<SEP>pkg/main.py\n"
    )  # b.py, empty, goes
    assert context_tokens(ranked, chars, REPO, 4) == ()
    # ranks that do not cover every line: the plain rule (the last lines of the list go)
    partial = RepoContext(
        (ContextFile("pkg/a.py", "def alpha():\n    return 1\n", (0,)), CONTEXT.files[1]),
        path="pkg/main.py",
        name="proj",
    )
    assert spelled(context_tokens(partial, chars, REPO, len(full) - 14)).count("BETA") == 0
