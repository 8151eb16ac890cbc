"""A suggestion never starts another file (engine.core.prompt.header_line).

Without repository tokens, other files go before the current one after a comment line naming
each (`// notes.md`). Open files that end where the current one does teach the model that a file
ends there: at the end of a line it went on to write a next line `// long.txt`, a file name it
made up, shown as ghost text in a real VS Code; after other files it wrote `# restart.txt`."""

from __future__ import annotations

from engine import CompletionRequest, ContextFile, RepoContext, SamplingConfig
from engine.core.generation import cut_text
from engine.core.prompt import header_line

TYPED = "Thanks for sending over the draft yest"


def test_a_line_like_a_files_header_ends_the_suggestion(model_engine):
    files = (ContextFile("notes.md", f"# Notes\n\n{TYPED}"), ContextFile("short.txt", TYPED))
    request = CompletionRequest(
        "Hi Sam,\n\nThanks for sending over the draft",
        required=" yest",
        max_tokens=16,
        next_line=True,
        context=RepoContext(files, path="restart.txt"),
    )
    completion = model_engine.complete(request)
    assert completion.text.startswith(" yest")
    assert "//" not in completion.text, completion.text
    assert completion.stop_reason in ("stop", "line", "eos"), completion.stop_reason


def test_header_lines_are_a_comment_mark_and_one_path_like_word():
    assert header_line(" yest\n\n// long.txt\n") == 5
    assert header_line(" Wedn\n\n# restart.txt") == 5  # at the end of what was generated so far
    assert header_line("x\n-- q.sql\n") == 1
    assert header_line("x\r\n// pkg/util.js\r\n") == 1
    assert header_line("x\n# Notes\n") is None  # a markdown heading: no path in it
    assert header_line("x\n# see util.py for the rest\n") is None  # a comment that names a file
    assert header_line("x\n    # util.py\n") is None  # indented: not a header
    assert header_line("// util.js") is None  # the first line: what the user is typing


def test_only_a_prompt_that_names_files_ends_there():
    """Without other files laid out, a comment line naming a file is the user's own text."""
    request = CompletionRequest("x", max_tokens=12, sampling=SamplingConfig(single_line=False))
    text = "a = 1\n// b.js\nb = 2\n"
    assert cut_text(text, 0, request) is None
    assert cut_text(text, 0, request, headers=True) == ("a = 1", "stop")
