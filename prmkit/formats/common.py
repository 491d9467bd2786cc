"""Small helpers shared by the format converters: locating errors, checking source fields,
reading JSON lists, hard labels and the optional parquet dependency.

Every converter reports a bad source record as ``FILE:LINE: field 'X': what is wrong`` (JSONL)
or ``FILE: record N (id X): field 'X': ...`` (a JSON list, N counted from 0 as in ``data[N]``)
or ``FILE: row N: ...`` (parquet, N counted from 0), always through
:class:`prmkit.errors.RecordError`, and always with the name of the *source* field.
"""

from __future__ import annotations

import warnings
from typing import Any

from prmkit.errors import PrmkitError, RecordError
from prmkit.records import Record, kind_name


def where_in_list(path: str, index: int, obj: Any = None) -> str:
    """The location of record ``index`` of a JSON list, used as the error's path."""
    rec_id = obj.get("id") if isinstance(obj, dict) else None
    known = isinstance(rec_id, (str, int)) and not isinstance(rec_id, bool)
    id_part = f" (id {rec_id})" if known else ""
    return f"{path}: record {index}{id_part}"


def relocate(err: RecordError, path: str, line: int | None,
             rename: dict[str, str] | None = None) -> RecordError:
    """``err`` located at ``path:line``, with a record field renamed to its source field."""
    field = err.field
    if rename and field in rename:
        field = rename[field]
    return RecordError(err.reason, err.path or path, err.line if err.line is not None else line,
                       field)


def build(path: str, line: int | None, rename: dict[str, str] | None = None,
          **fields: Any) -> Record:
    """Build and validate a :class:`Record`; an invalid one raises a located RecordError that
    names the source field (``rename`` maps record fields to source fields)."""
    try:
        return Record(**fields)
    except RecordError as e:
        raise relocate(e, path, line, rename) from None


def get(obj: Any, name: str, kind: type | tuple[type, ...], required: bool = True,
        what: str = "") -> Any:
    """``obj[name]``, checked to be of ``kind`` (None is allowed when not ``required``).

    Raises a RecordError naming ``name`` (prefixed by ``what``, e.g. ``question.``)."""
    field = f"{what}{name}"
    if not isinstance(obj, dict):
        raise RecordError(f"expected a JSON object, got {kind_name(obj)}",
                          field=what.rstrip(".") or None)
    if name not in obj or obj[name] is None:
        if required:
            raise RecordError("missing" if name not in obj else "is null", field=field)
        return None
    value = obj[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    bad_bool = isinstance(value, bool) and bool not in kinds
    if bad_bool or not isinstance(value, kinds):
        names = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
        raise RecordError(f"expected {names}, got {kind_name(value)}", field=field)
    return value


_KIND_NAMES = {str: "a string", list: "a list", dict: "an object", int: "an integer",
               float: "a number", bool: "true or false"}


def string_list(obj: Any, name: str, what: str = "") -> list[str]:
    """``obj[name]`` checked to be a list of strings."""
    values = get(obj, name, list, what=what)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise RecordError(f"entry {i} is {kind_name(v)}, expected a string", field=f"{what}{name}")
    return values


def extras(obj: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """The fields of ``obj`` that a converter did not map: kept in ``meta`` so nothing is lost."""
    return {k: v for k, v in obj.items() if k not in used}


def hard_label(value: float | None, threshold: float, path: str, rec_id: str, fmt: str,
               step: int) -> bool:
    """A step label as true/false (``value >= threshold``). An unlabelled step is an error
    naming the output ``path`` and the record id, because ``fmt`` cannot represent it."""
    if value is None:
        raise RecordError(f"step {step} is unlabelled (null), which {fmt} cannot represent; "
                          f"label every step or leave the record out",
                          f"{path}: record {rec_id!r}", None, "labels")
    return value >= threshold


def require_pyarrow() -> Any:
    """Import ``pyarrow.parquet`` (an optional dependency) or explain how to install it."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PrmkitError("reading parquet needs pyarrow: pip install 'prmkit[data]'") from None
    return pq


def warn_skipped(path: str, what: str, places: list[str]) -> None:
    """Say (as a warning) that ``skip_empty`` left records out, so nothing goes silently."""
    if places:
        shown = ", ".join(places[:5]) + (", ..." if len(places) > 5 else "")
        warnings.warn(f"{path}: left out {len(places)} {what} with no step to keep "
                      f"(skip_empty): {shown}", stacklevel=3)
