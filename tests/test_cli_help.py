"""Every `prmkit COMMAND --help` lists the options and defaults of tests/data/help_snapshot.json.

The snapshot was taken before the CLI was rebuilt from dataclass configs (issue 18); regenerate it
with `python scripts/help_snapshot.py > tests/data/help_snapshot.json` only for a deliberate
change of the command line.
"""

import importlib.util
import json
from pathlib import Path

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
