"""Write the options of every `prmkit COMMAND --help` (option strings and defaults, no prose).

    python scripts/help_snapshot.py > tests/data/help_snapshot.json

tests/test_cli_help.py compares the parser with this file: a redesign that changes an option,
its default, its choices or whether it is required fails there.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    return repr(v)


def _options(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    out = []
    for a in parser._actions:
        if isinstance(a, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        out.append({"options": list(a.option_strings) or [a.dest], "dest": a.dest,
                    "default": _value(a.default), "required": bool(a.required),
                    "choices": _value(list(a.choices)) if a.choices is not None else None,
                    "nargs": _value(a.nargs), "action": type(a).__name__})
    return out


def snapshot(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, Any]:
    """{command path: [option, ...]} for PARSER and every subcommand below it."""
    result = {prefix or "prmkit": _options(parser)}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                result.update(snapshot(sub, f"{prefix} {name}".strip()))
    return result


def main() -> int:
    from prmkit.cli import build_parser

    json.dump(snapshot(build_parser()), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
