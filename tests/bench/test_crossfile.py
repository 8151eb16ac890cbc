"""bench.crossfile's own judgement of a cross-file cursor (fast: no model, no download)."""

from __future__ import annotations

from pathlib import Path

from bench.crossfile import Project, bound_in, comment_lines, cross_identifiers, defined_in, probes, strip_comments


def test_what_a_file_binds_for_itself_is_not_another_files_name():
    py = "from email import utils\ndef f(a, decode=False, msg: Message = None):\n    value = 3\n    x, size = g()\n" \
         "    for k, v in d.items(): pass\n    self.field = 1\n    utils.unquote(value)\n"  # fmt: skip
    assert bound_in(py, "python") >= {"a", "decode", "msg", "value", "size", "k", "v", "field"}
    assert not bound_in(py, "python") & {"utils", "unquote", "Message"}  # imported, called, a type
    js = "const { comparatorTrimReplace } = require('../internal/re')\nfunction get (cache, key) {\n" \
         "  const { size } = opts\n  let entry = 1\n  this.method = 'GET'\n  items.map((x, idx) => x)\n}\n"  # fmt: skip
    assert bound_in(js, "javascript") >= {"cache", "key", "size", "entry", "method", "x", "idx"}
    assert "comparatorTrimReplace" not in bound_in(js, "javascript")
    c = "static void SetupDictIter(PyObject *dictObj, TypeContext *pc)\n{\n  PyObject *itemValue;\n" \
        "  size_t size = 3, n2;\n  char buf[32];\n  tc->type = JT_RAW;\n  return JT_RAW;\n}\n"  # fmt: skip
    assert bound_in(c, "c") >= {"dictObj", "pc", "itemValue", "size", "n2", "buf"}
    assert not bound_in(c, "c") & {"PyObject", "TypeContext", "JT_RAW", "SetupDictIter"}


def test_cross_probes_skip_the_targets_locals_and_docstrings(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("def unquote(s):\n    return s\n\n\ndef value():\n    return 1\n")
    body = "".join(f"x{i} = {i}\n" for i in range(12))
    target = body + 'def f(value):\n    """Docs: unquote is described here."""\n    return unquote(value)\n'
    (tmp_path / "main.py").write_text(target)
    project = Project("p", "python", "tune", tmp_path, ("helpers.py", "main.py"), ("main.py",))
    assert cross_identifiers(project, "main.py") == frozenset({"unquote"})  # `value` is main.py's parameter
    cross = [(p.word, target.count("\n", 0, p.start) + 1) for p in probes(project, "main.py", 4) if p.cls == "cross"]
    assert cross == [("unquote", 15)]  # the call, not the docstring's mention


def test_a_comment_opener_inside_a_string_is_not_a_comment():
    # pacote's lib/registry.js, line 15: the `*/*` of an Accept header once erased its definitions up to line 136
    js = (
        "const corgiDoc = 'application/vnd.npm.install-v1+json; q=1.0, */*'\n"
        'const other = "a \\" /* still a string"\n'  # an escaped quote does not end it
        "const tpl = `x ${y} /* and\n a template */ across lines`\n"
        "/* a real\n comment */ class RegistryFetcher extends Fetcher {\n"
        "  packument () { return 1 } // a line comment 'with a quote\n"
        "}\n"
    )
    stripped = strip_comments(js, "javascript")
    assert "*/*'" in stripped and "/* still a string" in stripped and "/* and\n a template */" in stripped
    assert "a real" not in stripped and "a line comment" not in stripped
    assert {"corgiDoc", "other", "tpl", "RegistryFetcher", "packument"} <= defined_in(js, "javascript")
    assert comment_lines(js, "javascript") == frozenset({4, 5})  # the real comment's two lines, not the strings'
    c = (
        'static const char *accept = "*/*";\nchar q = \'"\';\n#define AFTER_STRING 1\n'
        '/* a\n * comment */\n#define AFTER_COMMENT 2 // "no string here\n'
    )
    assert defined_in(c, "c") >= {"AFTER_STRING", "AFTER_COMMENT"}
    assert "comment" not in strip_comments(c, "c") and '"*/*"' in strip_comments(c, "c")
    py = (
        "URL = 'http://x/#anchor'  # a real comment\nHASH = \"#\"\n"
        'def f():\n    """A docstring: def not_a_function(): it is prose."""\n    s = \'it\\\'s # not a comment\'\n'
    )
    stripped = strip_comments(py, "python")
    assert "#anchor'" in stripped and '"#"' in stripped and "# not a comment'" in stripped
    assert "a real comment" not in stripped and "docstring" not in stripped
    assert defined_in(py, "python") == frozenset({"URL", "HASH", "f"})


def test_probes_do_not_skip_the_lines_after_a_comment_opener_in_a_string(tmp_path: Path):
    (tmp_path / "lib.js").write_text("function fetchManifest (spec) {\n  return spec\n}\n")
    head = "".join(f"const x{i} = {i}\n" for i in range(12))
    target = head + "const accept = 'application/*'\nconst doc = 1\nfetchManifest(doc)\n"
    (tmp_path / "main.js").write_text(target)
    project = Project("p", "javascript", "tune", tmp_path, ("lib.js", "main.js"), ("main.js",))
    cross = [p.word for p in probes(project, "main.js", 4) if p.cls == "cross"]
    assert cross == ["fetchManifest"]  # the line after `'application/*'` is code, not a comment
