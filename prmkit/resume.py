"""The partial-output contract: what every resuming command (generate, label, score, search,
eval with a model) writes at the head of ``OUT.partial``, and what it refuses to continue.

A long job appends its finished rows to ``OUT.partial`` (:class:`prmkit.records.ResumableWriter`,
through :class:`Partial`) and writes ``OUT`` from them when it completes; a rerun after a kill
continues there. The first line of ``OUT.partial`` is its header, never a line of ``OUT``::

    {"id": "__prmkit_partial__", "command": "score", "identity": {"model": "/abs/m", ...}}

``identity`` is the command's whole configuration: every option of its parser
(:func:`args_identity`), or every field of its config for a library call
(:func:`config_identity`). An option that cannot change the output (progress, chunk size,
workers, concurrency, where the output goes, the resume flag itself) is marked so where it is
declared: ``field(metadata={"identity": False})`` on a config's field, :func:`add_outside` (or
:func:`outside_identity`) on an argparse option. Anything unmarked is in the identity, so a new
option is too.

A rerun refuses (:class:`~prmkit.errors.PrmkitError`, one line, exit 2) a partial that holds
finished rows but no header, and a header whose command or any identity field differs, naming
the field and both values; ``--no-resume`` starts again. Each command keeps its own row checks
on top (:func:`check_resume`: a row of another input record is refused).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from prmkit.errors import PrmkitError
from prmkit.records import Record, ResumableWriter

HEADER_ID = "__prmkit_partial__"   # the id of the header line (never an input record's id)
_OUTSIDE: "weakref.WeakSet[argparse.Action]" = weakref.WeakSet()
_NOT_SET = object()


# ---------------------------------------------------------------------------------------------
# the identity: declared with the options


def outside_identity(action: argparse.Action) -> argparse.Action:
    """Mark an argparse option that cannot change the command's output (it is left out of the
    identity); returns the option, so it wraps ``parser.add_argument(...)``."""
    _OUTSIDE.add(action)
    return action


def add_outside(parser: Any, *flags: str, **kwargs: Any) -> argparse.Action:
    """``parser.add_argument(*flags, **kwargs)`` for an option outside the identity."""
    return outside_identity(parser.add_argument(*flags, **kwargs))


def in_identity(f: dataclasses.Field) -> bool:
    """Whether a config field is in the identity (unless ``metadata={"identity": False}``)."""
    return bool(f.metadata.get("identity", True))


def resumable(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` a resuming command's: when it runs, :func:`args_identity` takes every
    option the parser has then (one added after this call too) but those marked outside."""
    def options() -> list[str]:
        return [a.dest for a in parser._actions
                if a.dest not in (argparse.SUPPRESS, "help") and a not in _OUTSIDE]
    parser.set_defaults(identity_options=options)


def args_identity(args: argparse.Namespace, **resolved: Any) -> dict[str, Any]:
    """The identity of a command run from its options (:func:`resumable`): each option's value
    as given, but where ``resolved`` gives the value of an option known better than as typed (a
    model folder by its absolute path, a server by what it serves)."""
    given = vars(args)
    names = args.identity_options()
    unknown = set(resolved) - set(names)
    if unknown:
        raise ValueError(f"not options of the identity: {sorted(unknown)}")
    return {name: resolved[name] if name in resolved else given[name] for name in names}


def config_identity(config: Any) -> dict[str, Any]:
    """The identity of a dataclass config: its fields (nested configs as dicts) but those
    marked ``metadata={"identity": False}``."""
    return {f.name: (config_identity(getattr(config, f.name))
                     if dataclasses.is_dataclass(getattr(config, f.name))
                     else getattr(config, f.name))
            for f in dataclasses.fields(config) if in_identity(f)}


def as_path(value: Any) -> Any:
    """A string that names an existing file or folder as its absolute path (a rerun from
    another folder names the same model); anything else (None, a hub id) as it is."""
    if isinstance(value, str) and value and os.path.exists(value):
        return os.path.abspath(value)
    return value


# ---------------------------------------------------------------------------------------------
# the header and its check


@dataclass(frozen=True)
class Header:
    """The first line of a command's ``OUT.partial``: the command and its identity."""

    command: str
    identity: dict[str, Any]

    def row(self) -> dict[str, Any]:
        return {"id": HEADER_ID, "command": self.command,
                "identity": json.loads(json.dumps(self.identity, default=str))}


def check_header(output: str, head: dict[str, Any] | None, rows: dict[str, Any],
                 header: Header) -> None:
    """Refuse to continue ``OUTPUT.partial`` when it holds finished ``rows`` but no header
    (``head``), or a header that differs from this run's in any field."""
    if head is None:
        if rows:
            raise PrmkitError(f"{output}.partial holds {len(rows)} finished rows but no header "
                              f"naming the command and settings that wrote them; use "
                              f"--no-resume to start again")
        return
    was = {"command": head.get("command"), **(head.get("identity") or {})}
    now = {"command": header.command, **header.row()["identity"]}
    name, old, new = _difference(was, now)
    if name is not None:
        raise PrmkitError(f"{output}.partial was written with {name}={_shown(old)}, this run has "
                          f"{name}={_shown(new)}; use --no-resume to start again")


def _difference(was: dict[str, Any], now: dict[str, Any], prefix: str = "") -> tuple[Any, ...]:
    """(the first field that differs, its old value, its new one), a nested dict's entry named
    ``outer.inner``; (None, None, None) when they agree."""
    for key in list(now) + [k for k in was if k not in now]:
        old, new = was.get(key, _NOT_SET), now.get(key, _NOT_SET)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            return _difference(old, new, f"{prefix}{key}.")
        return f"{prefix}{key}", old, new
    return None, None, None


def _shown(value: Any) -> str:
    return "(not set)" if value is _NOT_SET else json.dumps(value, ensure_ascii=False)


def read_checked(output: str, header: Header) -> dict[str, dict[str, Any]]:
    """The finished rows of ``OUTPUT.partial`` by id (none when there is no such file), its
    header checked (:func:`check_header`); the file is read, never changed."""
    rows = read_partial(output)
    head = rows.pop(HEADER_ID, None)
    check_header(output, head, rows, header)
    return rows


class Partial:
    """``OUT.partial`` under the contract: its header checked against ``header`` (a refused
    file is left as it was), then opened (resumed unless ``resume`` is False), ``header``
    written first when the file starts empty; :meth:`close` writes ``OUT`` from the finished
    rows in ``order``, without the header."""

    def __init__(self, output: str, header: Header, resume: bool = True, sync: bool = False):
        if resume:
            read_checked(output, header)
        self.writer = ResumableWriter(output, resume=resume, sync=sync)
        if HEADER_ID not in self.writer.done_ids():
            self.writer.write(header.row())

    def done_rows(self) -> dict[str, dict[str, Any]]:
        rows = self.writer.done_rows()
        rows.pop(HEADER_ID, None)
        return rows

    def write(self, row: Record | dict[str, Any]) -> None:
        self.writer.write(row)

    def discard(self) -> None:
        """Close and remove the partial file (a run that failed before its first row)."""
        self.writer.discard()

    def close(self, order: list[str]) -> None:
        self.writer.close(order=order)


# ---------------------------------------------------------------------------------------------
# reading a partial, and the rows' own checks


def read_partial(path: str) -> dict[str, dict[str, Any]]:
    """The finished rows of ``path``'s partial file by id, the header among them (empty when
    there is none), read without changing it."""
    rows: dict[str, dict[str, Any]] = {}
    if not os.path.isfile(path + ".partial"):
        return rows
    with open(path + ".partial", "rb") as f:
        for raw in f:
            try:
                obj = json.loads(raw.decode("utf-8")) if raw.endswith(b"\n") else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                obj = None
            if not isinstance(obj, dict) or "id" not in obj:
                break
            rows[str(obj["id"])] = obj
    return rows


def check_resume(output: str, done: dict[str, dict[str, Any]], belongs: Callable[[dict[str, Any]], bool],
                 settings: dict[str, Any],
                 stored: Callable[[dict[str, Any]], dict[str, Any]] = lambda row: row.get("meta") or {},
                 ) -> None:
    """Refuse to continue ``OUTPUT.partial`` when a finished row there is not one this run would
    write (``belongs``), or was made with other ``settings`` (compared with ``stored(row)``, by
    default the row's ``meta``): the rows' own checks, beside the header's."""
    for rid, row in done.items():
        if not belongs(row):
            raise PrmkitError(f"{output}.partial holds record {rid!r}, which this run would not "
                              f"write (other input or settings?); use --no-resume to start again")
        check_settings(output, stored(row), settings)


def check_settings(output: str, old: dict[str, Any], settings: dict[str, Any]) -> None:
    """Refuse when a setting in ``old`` (what a row of ``OUTPUT.partial`` was written with)
    differs from this run's, naming it (for a dict of settings, the entry that differs)."""
    for name, value in settings.items():
        if name not in old or old[name] == value:
            continue
        was = old[name]
        if isinstance(was, dict) and isinstance(value, dict):
            name = next(k for k in sorted(set(was) | set(value)) if was.get(k) != value.get(k))
            was, value = was.get(name), value.get(name)
        raise PrmkitError(f"{output}.partial was written with {name}={json.dumps(was)}, this "
                          f"run has {name}={json.dumps(value)}; use --no-resume to start again")
