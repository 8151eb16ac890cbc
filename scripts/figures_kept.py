"""Check that a rewrite of the docs lost no figure: every number in OLD (a previous README.md, e.g.
`git show ccad3fb:README.md > /tmp/old.md`) must still appear in README.md or a page under docs/.

    python scripts/figures_kept.py /tmp/old.md      # exit 1 and the missing numbers, else 0

A number is a run of digits with its thousands commas and decimals (`1,039.6`, `0.06`, `4.139.1`);
each is counted, so a figure quoted three times before must appear at least once now (the set
check), and the multiset check reports figures that now appear fewer times (tables merged, for
information only).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)*")


def numbers(text: str) -> Counter[str]:
    return Counter(m.group().rstrip(",.") for m in NUMBER.finditer(text))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    old = numbers(Path(argv[0]).read_text(encoding="utf-8"))
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    new = numbers("\n".join(p.read_text(encoding="utf-8") for p in pages))
    missing = sorted(n for n in old if n not in new)
    fewer = sorted(n for n in old if n in new and new[n] < old[n])
    print(
        f"{len(old)} distinct numbers ({sum(old.values())} occurrences) in {argv[0]}; "
        f"searched {len(pages)} files: README.md and docs/*.md"
    )
    print(f"missing: {len(missing)} {missing}")
    print(f"present, but fewer times than before (information): {len(fewer)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
