"""The README's Python examples run as written, and its commands exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from prmkit.cli import build_parser

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("block", re.findall(r"```python\n(.*?)```", README, re.S))
def test_python_examples_run(block):
    exec(compile(block, "README.md", "exec"), {})


def test_every_prmkit_command_in_the_readme_parses():
    shell = "\n".join(re.findall(r"```sh\n(.*?)```", README, re.S))
    commands = re.findall(r"^prmkit ([a-z-]+(?: [a-z-]+)?)", shell, re.M)
    assert len(commands) >= 20
    top = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in commands:
        name, _, sub = command.partition(" ")
        assert name in top, f"README names an unknown command: prmkit {command}"
        subs = top[name]._subparsers
        if subs is not None and sub and not sub.startswith("-"):
            assert sub in subs._group_actions[0].choices, f"unknown: prmkit {command}"


def test_every_prmkit_command_line_in_the_readme_is_accepted_whole():
    """Options too, not only the command names: each `prmkit ...` line (continuations joined)
    goes through the real argument parser."""
    shell = "\n".join(re.findall(r"```sh\n(.*?)```", README, re.S)).replace("\\\n", " ")
    lines = [x for x in shell.splitlines() if x.startswith("prmkit ") and "..." not in x]
    assert len(lines) >= 20  # lines with "..." are shortened on purpose and are left out
    parser = build_parser()
    bad = []
    for line in lines:
        words = shlex.split(line.split(" #")[0].replace("|", " # "), comments=True)
        try:
            parser.parse_args(words[1:])
        except SystemExit:
            bad.append(line)
    assert not bad, "README commands that do not parse:\n" + "\n".join(bad)
