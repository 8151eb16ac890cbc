"""Definition lines of other files (lsp_server.outline) and the chooser that puts them first (fast: no model)."""

from __future__ import annotations

from pathlib import Path

from lsp_server.context import ContextChooser
from lsp_server.documents import Document
from lsp_server.outline import Entry, as_view, outline, pick, used_names

PY = '''"""A module.

name = "not a definition: inside the docstring"
"""
LIMIT = 3


class Widget:
    """A widget."""

    def __init__(self, size):
        self.size = size

    def frobnicate(self, times):
        return self.size * times


def make_widget(size):
    # def hidden(): a comment
    return Widget(size)
'''

JS = """const debug = require('./debug')
/* function hidden () {} */
class Range {
  constructor (range, options) {
    this.raw = range
  }
  parseRange (range) {
    if (range) {
      return range
    }
  }
}
exports.caretTrimReplace = '$1^'
module.exports = Range
"""

C = """#define LZ4F_VERSION 100
/* int hidden(void); */
typedef enum {
    LZ4F_default=0,
    LZ4F_max64KB=4
} LZ4F_blockSizeID_t;
typedef struct {
    unsigned blockMode;
    int level;
} LZ4F_preferences_t;
LZ4FLIB_API size_t LZ4F_compressBound(size_t srcSize, const LZ4F_preferences_t* prefsPtr);
static int helper(int x)
{
    return x;
}
"""


def names(text: str, language: str) -> list[str]:
    return [name for _, name, _, _ in outline(text, language)]


def test_python_definitions_skip_docstrings_and_comments_and_know_their_class():
    found = outline(PY, "python")
    assert [n for _, n, _, _ in found] == ["LIMIT", "Widget", "__init__", "size", "frobnicate", "make_widget"]
    frobnicate = next(f for f in found if f[1] == "frobnicate")
    assert frobnicate[2] == "    def frobnicate(self, times):\n"
    assert frobnicate[3] == ((7, "class Widget:\n"),)
    assert next(f for f in found if f[1] == "make_widget")[3] == ()


def test_javascript_definitions_methods_and_exports():
    assert names(JS, "javascript") == ["debug", "Range", "constructor", "raw", "parseRange", "caretTrimReplace"]
    parse = next(f for f in outline(JS, "javascript") if f[1] == "parseRange")
    assert parse[3] == ((2, "class Range {\n"),)


def test_c_macros_enumerators_fields_typedefs_and_functions():
    assert names(C, "c") == ["LZ4F_VERSION", "LZ4F_default", "LZ4F_max64KB", "LZ4F_blockSizeID_t", "blockMode", "level",
                             "LZ4F_preferences_t", "LZ4F_compressBound", "helper"]  # fmt: skip
    mode = next(f for f in outline(C, "c") if f[1] == "blockMode")
    assert mode[3] == ((6, "typedef struct {\n"),)


def test_an_unknown_language_has_no_outline():
    assert outline(PY, None) == []


def entry(name: str, line: int, path: str = "a.py", head: tuple = ()) -> Entry:
    return Entry(f"{path}#{line}", path, line, name, f"def {name}():\n", head)


def test_pick_prefers_the_names_used_most_and_near_and_skips_what_the_file_defines():
    entries = [entry("rare", 1), entry("common", 2), entry("mine", 3), entry("near_one", 4), entry("unused", 5, "b.py")]
    uses = {"rare": 1, "common": 5, "mine": 9, "near_one": 1}
    chosen = pick(entries, uses, frozenset({"near_one"}), frozenset({"mine"}), budget=1_000)
    assert [e.name for e in chosen] == ["rare", "common", "near_one"]  # in file order; unused (a file not drawn on) and mine left out
    tight = pick(entries, uses, frozenset({"near_one"}), frozenset({"mine"}), budget=8 + entries[1].tokens + entries[3].tokens)
    assert [e.name for e in tight] == ["common", "near_one"]  # 5 uses, then 1 + 3 for being near


def test_pick_fills_what_is_left_with_the_unused_members_beside_the_used_ones():
    enum = (1, "enum JSTYPES {\n")
    entries = [entry("JT_INT", 2, "u.h", (enum,)), entry("JT_RAW", 3, "u.h", (enum,)), entry("encode", 9, "u.h"),
               entry("other", 4, "v.h"), entry("JT_NULL", 5, "u.h", (enum,))]  # fmt: skip
    chosen = pick(entries, {"JT_INT": 2}, frozenset(), frozenset(), budget=1_000)
    assert [e.name for e in chosen] == ["JT_INT", "JT_RAW", "JT_NULL", "encode"]  # v.h: nothing of it is used
    one_more = 8 + entries[0].tokens + len(enum[1]) // 3 + 1 + entries[1].tokens
    assert [e.name for e in pick(entries, {"JT_INT": 2}, frozenset(), frozenset(), budget=one_more)] == ["JT_INT", "JT_RAW"]


def test_pick_takes_the_name_being_typed_first():
    entries = [entry("common", 1), entry("frobnicate_widget", 2)]
    chosen = pick(entries, {"common": 9}, frozenset(), frozenset(), budget=8 + entries[1].tokens, typed="frob")
    assert [e.name for e in chosen] == ["frobnicate_widget"]


def test_the_view_shows_each_line_once_in_the_file_order():
    head = ((0, "class Widget:\n"),)
    entries = [Entry("k#5", "a.py", 5, "b", "    def b(self):\n", head), Entry("k#2", "a.py", 2, "a", "    def a(self):\n", head)]
    view = as_view([("a.py", 1, "    x = 1\n    def a(self):\n")], entries)
    assert view == [("a.py", "class Widget:\n    x = 1\n    def a(self):\n    def b(self):\n")]


def test_used_names_counts():
    assert used_names("a = b + a(c)")["a"] == 2


def test_the_chooser_puts_the_definition_of_a_name_used_in_the_file_first(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    helpers = "\n".join(f"def helper_{i}(x):\n    return x + {i}\n" for i in range(200)) + "\ndef frobnicate_widget(x):\n    return x\n"
    (root / "helpers.py").write_text(helpers)
    main = "from helpers import frobnicate_widget\n\n\ndef run():\n    frobnicate_widget(1)\n    \n"
    chooser = ContextChooser()
    chooser.workspace.set_roots([str(root)])
    other = Document((root / "helpers.py").as_uri(), helpers)
    doc = Document((root / "main.py").as_uri(), main)
    context = chooser.context_for("main", doc, len(main) - 1, [("helpers", other)], 512)
    assert context is not None
    shown = "".join(f.text for f in context.files)
    assert "def frobnicate_widget(x):\n" in shown
    assert "helper_150" not in shown  # not used by main.py: not worth its tokens
