"""bench.crossfile's own judgement of a cross-file cursor (fast: no model, no download)."""

from __future__ import annotations

from pathlib import Path

from bench.crossfile import Project, bound_in, cross_identifiers, probes


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
