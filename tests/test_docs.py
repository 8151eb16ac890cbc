"""The docs stay true to the tree: every relative link in README.md, docs/, editors/README.md and
CONTRIBUTING.md resolves (file and heading), the README links every page of docs/, and
docs/messages.md names every message a user can see.

The messages are found in the code, not listed here: the states of `cpcLsp/status`, the kinds of
`ModelServerError`, and the literal text of every error the engine raises for the user
(`ModelLoadError(...)`, `ModelServerError(...)`, a model-server client's `error`/`protocol`/
`unreachable`) and of every message the server shows or logs itself (`tell`, `log`, a settings
problem). A new message fails this test until docs/messages.md says what it means.
"""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest

from engine import ModelServerError
from lsp_server import status

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS, ROOT / "editors" / "README.md", ROOT / "CONTRIBUTING.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            base, n = slug(m.group(1)), 0
            while (name := base if n == 0 else f"{base}-{n}") in found:
                n += 1
            found.add(name)
    return found


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [m.group(1) for m in LINK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor in {resolved.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_links_every_page_of_the_manual():
    readme = set(links(ROOT / "README.md"))
    unlinked = [p.name for p in DOCS if f"docs/{p.name}" not in {t.partition("#")[0] for t in readme}]
    assert not unlinked, f"docs pages the README does not link to (one click away): {unlinked}"


# --- messages ------------------------------------------------------------------------------


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


MESSAGES = _plain((ROOT / "docs" / "messages.md").read_text(encoding="utf-8"))

ENGINE_ERRORS = {"ModelLoadError": 1, "ModelServerError": 2}  # constructor -> index of `problem`
CLIENT_ERRORS = {"error": 1, "protocol": 0, "unreachable": 0}  # ModelServerClient helpers
SERVER_SAYS = {"tell": 1, "log": 1, "_tell_once": 1, "Invalid": 0}  # shown or logged; a bad setting value
SETTINGS_PROBLEMS = {"apply", "from_command_line", "_budget_problem"}  # lsp_server.settings: every text they build


def _fragments(node: ast.AST) -> list[str]:
    """The literal parts of a message argument: a string, an f-string's text between the
    placeholders, a %-format's text between its conversions."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        parts = re.split(r"%[-\d.]*[a-z]", node.value)
    elif isinstance(node, ast.JoinedStr):
        parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return _fragments(node.left)
    else:
        return []
    return [p for p in (_plain(part).strip(" .;:,(") for part in parts) if len(p) >= 6]


def _messages(folder: str, calls: dict[str, int]) -> list[tuple[str, str]]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name in calls and len(node.args) > calls[name]:
                    found += [(f"{path.name}:{node.lineno}", f) for f in _fragments(node.args[calls[name]])]
            if path.name == "settings.py" and isinstance(node, ast.FunctionDef) and node.name in SETTINGS_PROBLEMS:
                texts = [n for n in ast.walk(node) if isinstance(n, ast.JoinedStr)]
                found += [(f"{path.name}:{n.lineno}", f) for n in texts for f in _fragments(n)]
    return found


def test_messages_names_every_status_and_model_server_error_kind():
    states = typing.get_args(status.State)
    missing = [
        s for s in (*states, *ModelServerError.KINDS) if f"`{s}`" not in (ROOT / "docs" / "messages.md").read_text()
    ]
    assert states and not missing, f"docs/messages.md does not explain {missing}"


def test_messages_explains_every_error_the_engine_raises_for_the_user():
    found = _messages("engine", {**ENGINE_ERRORS, **CLIENT_ERRORS})
    assert len(found) > 20  # the scan itself works
    missing = [f"{where}: {text!r}" for where, text in found if text not in MESSAGES]
    assert not missing, "docs/messages.md lacks (cause and what to do): " + "; ".join(missing)


def test_messages_explains_every_message_the_server_shows_or_logs_itself():
    found = _messages("lsp_server", SERVER_SAYS)
    assert len(found) > 5
    missing = [f"{where}: {text!r}" for where, text in found if text not in MESSAGES]
    assert not missing, "docs/messages.md lacks (cause and what to do): " + "; ".join(missing)
