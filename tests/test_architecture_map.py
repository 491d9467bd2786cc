"""ARCHITECTURE.md is the one map of the layout: every module of prmkit/ has its own row there
(its path relative to prmkit/, in backquotes, with a role), and every row names a module that
exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `([\w/]+\.py)` \| (.+?) \|$", re.M)


def rows() -> dict[str, str]:
    return dict(ROW.findall((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")))


def modules() -> set[str]:
    package = ROOT / "prmkit"
    return {str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "__init__.py"}


def test_every_module_has_a_row_with_a_role():
    mapped = rows()
    assert sorted(modules() - set(mapped)) == []
    assert [m for m, role in mapped.items() if len(role.split()) < 2] == []


def test_every_row_names_a_module_that_exists():
    assert sorted(set(rows()) - modules()) == []
