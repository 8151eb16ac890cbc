"""Definition lines of other files (lsp_server.outline) and the chooser that puts them first (fast: no model)."""

from __future__ import annotations

from pathlib import Path

from lsp_server.context import ContextChooser
from lsp_server.documents import Document
from lsp_server.outline import (
    Entry,
    as_view,
    outline,
    pick,
    popularity,
    previous_lines,
    private,
    unnamed_fields,
    used_names,
)

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


# Allman braces (the brace on the line after the header) and pointers to functions, as ujson writes them
C_ALLMAN = """enum JSTYPES
{
  JT_NULL,      // NULL
  JT_RAW,
};
typedef int (*JSPFN_ITERNEXT)(JSOBJ obj, JSONTypeContext *tc);
typedef struct __JSONObjectEncoder
{
  void (*beginTypeContext)(JSOBJ obj, JSONTypeContext *tc);
  JSPFN_ITERNEXT iterNext;
} JSONObjectEncoder;
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


def test_c_blocks_with_the_brace_on_the_next_line_and_pointers_to_functions():
    found = {name: (line, head) for line, name, _, head in outline(C_ALLMAN, "c")}
    assert list(found) == ["JSTYPES", "JT_NULL", "JT_RAW", "JSPFN_ITERNEXT", "__JSONObjectEncoder", "beginTypeContext",
                           "iterNext", "JSONObjectEncoder"]  # fmt: skip
    assert found["JT_RAW"][1] == ((0, "enum JSTYPES\n"),)  # the member knows its enum's header line
    assert found["iterNext"][1] == ((6, "typedef struct __JSONObjectEncoder\n"),)


def test_an_unknown_language_has_no_outline():
    assert outline(PY, None) == []


def entry(name: str, line: int, path: str = "a.py", head: tuple = ()) -> Entry:
    return Entry(f"{path}#{line}", path, line, name, f"def {name}():\n", head)


def test_pick_prefers_the_names_used_most_and_near_and_skips_what_the_file_defines():
    entries = [entry("rare", 1), entry("common", 2), entry("mine", 3), entry("near_one", 4), entry("unused", 5, "b.py")]
    uses = {"rare": 1, "common": 5, "mine": 9, "near_one": 1}
    chosen = pick(entries, uses, frozenset({"near_one"}), frozenset({"mine"}), budget=1_000)
    assert [e.name for e in chosen] == [
        "rare",
        "common",
        "near_one",
    ]  # in file order; unused (a file not drawn on) and mine left out
    tight = pick(
        entries, uses, frozenset({"near_one"}), frozenset({"mine"}), budget=8 + entries[1].tokens + entries[3].tokens
    )
    assert [e.name for e in tight] == ["common", "near_one"]  # 5 uses, then 1 + 3 for being near


def test_pick_fills_what_is_left_with_the_unused_members_beside_the_used_ones():
    enum = (1, "enum JSTYPES {\n")
    entries = [entry("JT_INT", 2, "u.h", (enum,)), entry("JT_RAW", 3, "u.h", (enum,)), entry("encode", 9, "u.h"),
               entry("other", 4, "v.h"), entry("JT_NULL", 5, "u.h", (enum,))]  # fmt: skip
    chosen = pick(entries, {"JT_INT": 2}, frozenset(), frozenset(), budget=1_000)
    assert [e.name for e in chosen] == ["JT_INT", "JT_RAW", "JT_NULL", "encode"]  # v.h: nothing of it is used
    one_more = 8 + entries[0].tokens + len(enum[1]) // 3 + 1 + entries[1].tokens
    assert [e.name for e in pick(entries, {"JT_INT": 2}, frozenset(), frozenset(), budget=one_more)] == [
        "JT_INT",
        "JT_RAW",
    ]


def test_pick_takes_the_name_being_typed_first():
    entries = [entry("common", 1), entry("frobnicate_widget", 2)]
    chosen = pick(entries, {"common": 9}, frozenset(), frozenset(), budget=8 + entries[1].tokens, typed="frob")
    assert [e.name for e in chosen] == ["frobnicate_widget"]


def test_a_name_the_file_shows_already_counts_less_than_one_it_does_not():
    entries = [entry("shown_often", 1), entry("used_far_above", 2)]
    uses = {"shown_often": 6, "used_far_above": 1}
    budget = 8 + max(e.tokens for e in entries)  # room for one
    assert [e.name for e in pick(entries, uses, frozenset(), frozenset(), budget)] == ["shown_often"]
    # the model copies a name the prompt shows; the one used only above the window it cannot see
    chosen = pick(entries, uses, frozenset(), frozenset(), budget, visible=frozenset({"shown_often"}))
    assert [e.name for e in chosen] == ["used_far_above"]


def test_unused_names_come_from_the_imported_files_the_used_classes_and_code_like_the_cursors():
    klass = (10, "class Policy:\n")
    entries = [entry("Policy", 10, "p.py"), entry("handle_defect", 11, "p.py", (klass,)), entry("loner", 1, "q.py"),
               entry("called_alike", 2, "r.py"), entry("_private", 3, "q.py"), entry("public", 4, "q.py")]  # fmt: skip
    chosen = pick(entries, {"Policy": 1}, frozenset(), frozenset(), 1_000)
    assert [e.name for e in chosen] == ["Policy", "handle_defect"]  # a used class: its methods are siblings
    chosen = pick(
        entries, {"Policy": 1}, frozenset(), frozenset(), 1_000, drawn=["q.py"], related={"called_alike": 0.5}
    )
    assert {e.name for e in chosen} == {"Policy", "handle_defect", "loner", "called_alike", "_private", "public"}
    one = 8 + entries[5].tokens
    assert [e.name for e in pick(entries[2:], {}, frozenset(), frozenset(), one, drawn=["q.py"])] == [
        "loner"
    ]  # path, line
    two = [entries[4], entries[5]]
    assert [e.name for e in pick(two, {}, frozenset(), frozenset(), one, drawn=["q.py"])] == [
        "public"
    ]  # `_private` counts half
    assert private(Entry("k", "a.c", 1, "helper", "static int helper(int x)\n")) and not private(entries[5])
    assert not private(Entry("k", "a.h", 1, "helper", "static inline int helper(int x)\n"))  # a header's is shared


def test_an_unused_definition_beside_a_used_one_wins_over_the_files_first_line():
    # re.js keeps a regex's token and its replacement string together; the line order alone took the first lines
    entries = [entry("first", 1, "re.js"), entry("TILDETRIM", 178, "re.js"), entry("tildeTrimReplace", 179, "re.js")]
    one = 8 + max(e.tokens for e in entries)
    chosen = pick(entries[::2], {}, frozenset(), frozenset(), one, drawn=["re.js"])
    assert [e.name for e in chosen] == ["first"]  # nothing used: the file's order
    chosen = pick(entries, {"TILDETRIM": 1}, frozenset({"TILDETRIM"}), frozenset(), one + entries[1].tokens)
    assert [e.name for e in chosen] == ["TILDETRIM", "tildeTrimReplace"]


def test_a_member_chosen_beside_a_used_one_brings_that_one_along_though_the_file_shows_it():
    # argon2.c's switch over the error codes: the members just written count little (the file shows
    # them), so the enum read `OK, PWD_TOO_SHORT, ...` and nothing said which one follows the last case
    head = ((1, "typedef enum codes {\n"),)
    member = lambda name, line: Entry(f"e.h#{line}", "e.h", line, name, f"    {name} = -{line},\n", head)  # noqa: E731
    entries = [member("E_OK", 2), member("E_ONE", 3), member("E_TWO", 4), member("E_THREE", 5)]
    three = 8 + len(head[0][1]) // 3 + 1 + 3 * entries[0].tokens
    shown = dict(visible=frozenset({"E_ONE"}))  # E_ONE is in the file's text: it scores a tenth, below its siblings
    args = (entries, {"E_ONE": 1}, frozenset({"E_ONE"}), frozenset())
    assert [e.name for e in pick(*args, three, **shown)] == ["E_OK", "E_ONE", "E_TWO"]  # not E_OK, E_TWO, E_THREE
    # no room for the pair: the member alone, as before
    assert [e.name for e in pick(*args, three - 2 * entries[0].tokens, **shown)] == ["E_OK"]


def test_the_definition_before_an_entry_is_the_previous_one_of_its_own_file():
    entries = [entry("a", 1), entry("x", 1, "b.py"), entry("b", 4), entry("c", 9)]
    assert previous_lines(entries) == {"a.py#4": ("a.py", 1), "a.py#9": ("a.py", 4)}


def test_fields_count_as_used_only_when_the_file_names_their_struct():
    enc, dec = (10, "typedef struct __JSONObjectEncoder\n"), (20, "typedef struct __JSONObjectDecoder\n")
    field = lambda name, line, head: Entry(f"u.h#{line}", "u.h", line, name, f"  char *{name};\n", (head,))  # noqa: E731
    entries = [field("start", 11, enc), field("indent", 12, enc), Entry("u.h#13", "u.h", 13, "JSONObjectEncoder", "} JSONObjectEncoder;\n", (enc,)),
               field("start", 21, dec), field("s2d", 22, dec), Entry("u.h#23", "u.h", 23, "JSONObjectDecoder", "} JSONObjectDecoder;\n", (dec,))]  # fmt: skip
    # a decoder file: `start` is a parameter there, the encoder is never named
    assert unnamed_fields(entries, {"start": 3, "JSONObjectDecoder": 1}) == {"u.h#11", "u.h#12"}
    chosen = pick(entries, {"start": 3, "JSONObjectDecoder": 1}, frozenset(), frozenset(), 1_000)
    assert {e.key for e in chosen} >= {"u.h#21", "u.h#22", "u.h#23"}  # the decoder's fields
    assert not {e.key for e in chosen} & {"u.h#11", "u.h#12"}  # none of the encoder's
    assert (
        unnamed_fields([entry("JT_NULL", 2, "u.h", ((1, "enum JSTYPES {\n"),))], {}) == frozenset()
    )  # enum members are constants


def test_a_name_the_other_files_use_comes_before_the_files_first_lines():
    entries = [entry("MAX_DEPTH", 1, "u.h"), entry("JSOBJ", 169, "u.h")]
    ids = {"u.h": frozenset({"MAX_DEPTH"}), "enc.c": frozenset({"JSOBJ", "MAX_DEPTH"}), "dec.c": frozenset({"JSOBJ"})}
    assert popularity(ids, entries) == {"JSOBJ": 1.0, "MAX_DEPTH": 0.5}  # its own file does not count
    one = 8 + max(e.tokens for e in entries)
    chosen = pick(entries, {}, frozenset(), frozenset(), one, drawn=["u.h"], popular=popularity(ids, entries))
    assert [e.name for e in chosen] == ["JSOBJ"]


def test_the_view_shows_each_line_once_in_the_file_order():
    head = ((0, "class Widget:\n"),)
    entries = [
        Entry("k#5", "a.py", 5, "b", "    def b(self):\n", head),
        Entry("k#2", "a.py", 2, "a", "    def a(self):\n", head),
    ]
    view = as_view([("a.py", 1, "    x = 1\n    def a(self):\n")], entries)
    assert view == [("a.py", "class Widget:\n    x = 1\n    def a(self):\n    def b(self):\n")]


def test_used_names_counts():
    assert used_names("a = b + a(c)")["a"] == 2


def test_the_chooser_puts_the_definition_of_a_name_used_in_the_file_first(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    helpers = (
        "\n".join(f"def helper_{i}(x):\n    return x + {i}\n" for i in range(200))
        + "\ndef frobnicate_widget(x):\n    return x\n"
    )
    (root / "helpers.py").write_text(helpers)
    preamble = (
        '"""' + "This module is part of the project and does what its name says.\n" * 40 + '"""\n'
    )  # room for 512 tokens
    main = preamble + "from helpers import frobnicate_widget\n\n\ndef run():\n    frobnicate_widget(1)\n    \n"
    chooser = ContextChooser()
    chooser.workspace.set_roots([str(root)])
    other = Document((root / "helpers.py").as_uri(), helpers)
    doc = Document((root / "main.py").as_uri(), main)
    context = chooser.context_for("main", doc, len(main) - 1, [("helpers", other)], 512)
    assert context is not None
    shown = "".join(f.text for f in context.files)
    assert "def frobnicate_widget(x):\n" in shown
    assert (
        "helper_150" not in shown
    )  # after the used name, the imported file's others in its order, as the budget allows
