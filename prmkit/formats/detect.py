"""Reading the records a command takes, in any known layout, from any source.

:func:`read_records` is what every command that takes a records file calls. The source is a
JSONL file, a ``datasets`` folder (``save_to_disk``), an Arrow or Parquet file, or
``hf:NAME[:CONFIG][:SPLIT]`` (:mod:`prmkit.tables`); the layout is recognised by its columns
(:func:`detect`): prmkit records, Math-Shepherd, PRM800K (raw or one row per step),
ProcessBench, PRMBench, TRL stepwise supervision or GSM8K's model solutions, each read by its
converter in :mod:`prmkit.formats`, so a table converts to the same records as its JSONL form. Errors name
the line or the row, and the column.
"""

from __future__ import annotations

from typing import Iterable

from prmkit import formats
from prmkit.errors import PrmkitError
from prmkit.formats.common import is_json_list, iter_json_list
from prmkit.formats.options import ConvertOptions
from prmkit.formats.prm800k_stepwise import REQUIRED as PRM800K_STEPWISE
from prmkit.records import FIELDS, Record, iter_jsonl, iter_records
from prmkit.tables import column_names, is_table

# (format, the columns that identify it); the first match wins
LAYOUTS: list[tuple[str, frozenset[str]]] = [
    ("prm800k", frozenset(PRM800K_STEPWISE)),
    ("prmbench", frozenset({"modified_process"})),
    ("processbench", frozenset({"problem", "steps", "label"})),
    ("trl", frozenset({"prompt", "completions"})),
    ("math-shepherd", frozenset({"input", "label"})),
    ("prm800k", frozenset({"question", "label"})),
    ("gsm8k", frozenset({"question", "ground_truth"})),  # the GSM8K paper's model solutions
]
NAMES = {"prmkit": "prmkit records", "prm800k": "PRM800K", "prmbench": "PRMBench",
         "processbench": "ProcessBench", "trl": "TRL stepwise", "math-shepherd": "Math-Shepherd",
         "gsm8k": "GSM8K model solutions"}


def columns_of(path: str) -> list[str] | None:
    """The columns of a table, or the fields of a JSONL file's first line (None: no lines, or
    standard input, which cannot be read twice)."""
    if is_table(path):
        return column_names(path)
    if path == "-":
        return None
    if is_json_list(path):   # one JSON list of objects (ProcessBench's released files)
        for _, obj in iter_json_list(path):
            return list(obj) if isinstance(obj, dict) else None
        return None
    for _, obj in iter_jsonl(path):
        return list(obj) if isinstance(obj, dict) else None
    return None


def layout_of(columns: Iterable[str]) -> str | None:
    """The format whose columns these are (None: none known)."""
    cols = set(columns)
    if {"problem", "steps"} <= cols and cols <= set(FIELDS):
        return "prmkit"
    return next((fmt for fmt, need in LAYOUTS if need <= cols), None)


def detect(path: str) -> str:
    """The format of the records at ``path``, by its columns."""
    cols = columns_of(path)
    if cols is None:
        return "prmkit"
    fmt = layout_of(cols)
    if fmt is None:
        known = ", ".join(dict.fromkeys(NAMES.values()))
        raise PrmkitError(f"{path}: the columns {', '.join(sorted(cols))} are not a known "
                          f"layout ({known}); convert it first with `prmkit convert`")
    return fmt


def read_records(path: str, options: ConvertOptions | None = None) -> list[Record]:
    """All records at ``path`` (any source, any known layout), validated."""
    fmt = detect(path)
    if fmt == "prmkit" and path != "-" and not is_table(path) and is_json_list(path):
        return _records_of_list(path)
    if fmt == "prmkit":
        return list(iter_records(path))
    return list(formats.read(fmt, path, options))


def _records_of_list(path: str) -> list[Record]:
    """prmkit records held as one JSON list, each error naming its element."""
    from prmkit.errors import RecordError
    from prmkit.formats.common import where_in_list

    out, seen = [], set()
    for index, obj in iter_json_list(path):
        try:
            rec = Record.from_dict(obj)
        except RecordError as e:
            raise e.at(where_in_list(path, index, obj)) from None
        if rec.id in seen:
            raise PrmkitError(f"{path}: duplicate id {rec.id!r} (element {index})")
        seen.add(rec.id)
        out.append(rec)
    return out
