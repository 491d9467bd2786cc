"""Every `prmkit COMMAND --help` lists the options and defaults of tests/data/help_snapshot.json.

The snapshot was taken before the CLI was rebuilt from dataclass configs (issue 18); regenerate it
with `python scripts/help_snapshot.py > tests/data/help_snapshot.json` only for a deliberate
change of the command line. The help's text itself is checked for what a terminal user should
not read: markup, Python forms where a flag belongs, module paths, sentences cut off.
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from prmkit.cliutil import plain

ROOT = Path(__file__).resolve().parents[1]


def _snapshot_module():
    spec = importlib.util.spec_from_file_location("help_snapshot", ROOT / "scripts" / "help_snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_subcommand_lists_the_snapshot_options():
    from prmkit.cli import build_parser

    expected = json.loads((ROOT / "tests" / "data" / "help_snapshot.json").read_text())
    actual = json.loads(json.dumps(_snapshot_module().snapshot(build_parser())))
    assert sorted(actual) == sorted(expected)
    for command in expected:
        by_dest = lambda opts: {tuple(o["options"]): o for o in opts}  # noqa: E731
        assert by_dest(actual[command]) == by_dest(expected[command]), command


def _parsers():
    """(command, parser) for `prmkit` and every subcommand below it."""
    import argparse

    from prmkit.cli import build_parser

    todo = [("prmkit", build_parser())]
    while todo:
        name, parser = todo.pop()
        yield name, parser
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", p) for sub, p in a.choices.items()]


# what a terminal user should never read in --help: markup, Python where a flag belongs
MARKUP = [(r"\*\*", "Markdown bold"), (r"``", "a reStructuredText literal"),
          (r":(mod|func|class|meth|data|attr):`", "a reStructuredText role"),
          (r"\b[a-z][a-z_]*=\"[^\"]*\"", "a Python keyword argument where a flag belongs"),
          (r"\(\s*prmkit\.[a-z_]+\.[a-z_.]+\)", "a module path in parentheses")]
# an option's help of several sentences ends with one (a sentence cut off by a missing string
# does not); nor does any help end on an article, a conjunction or a comma
SEVERAL_SENTENCES = re.compile(r"\. [A-Z]")
ENDED = re.compile(r"[.)!?`]$")
DANGLING = re.compile(r"(\b(a|an|the|and|or|e\.g\.|i\.e\.)|[,:;(])$")


def test_help_has_no_markup_and_no_cut_sentences():
    bad = []
    for name, parser in _parsers():
        text = parser.format_help()
        bad += [f"{name}: {why}: {m.group(0)!r}" for pattern, why in MARKUP
                for m in [re.search(pattern, text)] if m]
        for a in parser._actions:
            h = plain(a.help or "").strip()
            if SEVERAL_SENTENCES.search(h) and not ENDED.search(h) or DANGLING.search(h):
                bad.append(f"{name} {'/'.join(a.option_strings) or a.dest}: cut off? ...{h[-50:]!r}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("text, says", [
    ("the **kept** ones", "Markdown bold"), ("with last_step=\"rollout\" set", "Python keyword"),
    ("read (prmkit.label.consensus) there", "module path")])
def test_the_markup_check_catches_each_kind(text, says):
    """The patterns above catch what they are for, once plain() has had its turn."""
    hits = [why for pattern, why in MARKUP if re.search(pattern, text)]
    assert any(says in why for why in hits)
    assert not [why for pattern, why in MARKUP if re.search(pattern, plain(text))]
    assert plain(text) in ("the kept ones", "with --last-step rollout set", "read there")
    cut = "It is a CPU example. For real use, pass a public PRM"
    assert SEVERAL_SENTENCES.search(cut) and not ENDED.search(cut)
