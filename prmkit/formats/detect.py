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
# fields a record of another toolkit may carry where prmkit reads another one: (field written,
# field meant, what to do); one table, read by near_miss
NEAR_NAMES: list[tuple[str, str, str]] = [
    ("question", "problem", "rename it"),
    ("query", "problem", "rename it"),
    ("solution", "steps", "steps is a list of strings, one per step: split the solution into its "
                          "steps (one per line, or at 'Step N:' markers; docs/records.md)"),
    ("response", "steps", "steps is a list of strings, one per step: split the response into its "
                          "steps (docs/records.md)"),
    ("step_labels", "labels", "rename it"),
]
NAMES = {"prmkit": "prmkit records", "prm800k": "PRM800K", "prmbench": "PRMBench",
         "processbench": "ProcessBench", "trl": "TRL stepwise", "math-shepherd": "Math-Shepherd",
         "gsm8k": "GSM8K model solutions"}


def columns_of(path: str) -> list[str] | None:
    """The columns of a table, or the fields of a JSONL file's first line or a JSON list's
    first element (None: no lines, or standard input, which cannot be read twice)."""
    if is_table(path):
        return column_names(path)
    if path == "-":
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


def near_miss(path: str, columns: Iterable[str]) -> str | None:
    """One line naming the field a user wrote and the prmkit field they meant, where the
    columns are prmkit's but for names in :data:`NEAR_NAMES` (None otherwise)."""
    cols = set(columns)
    found = [(wrote, meant, how) for wrote, meant, how in NEAR_NAMES
             if wrote in cols and meant not in cols]
    fixed = (cols - {w for w, _, _ in found}) | {m for _, m, _ in found}
    if not found or not ({"problem", "steps"} <= fixed and fixed <= set(FIELDS)):
        return None
    parts = [f"'{wrote}' where prmkit reads '{meant}' ({how})" for wrote, meant, how in found]
    return f"{path}: the records have " + "; and ".join(parts)


def detect(path: str) -> str:
    """The format of the records at ``path``, by its columns."""
    cols = columns_of(path)
    if cols is None:
        return "prmkit"
    fmt = layout_of(cols)
    if fmt is None:
        near = near_miss(path, cols)
        if near:
            raise PrmkitError(near)
        known = ", ".join(dict.fromkeys(NAMES.values()))
        raise PrmkitError(f"{path}: the columns {', '.join(sorted(cols))} are not a known "
                          f"layout ({known}); convert it first with `prmkit convert`")
    return fmt


def read_records(path: str, options: ConvertOptions | None = None) -> list[Record]:
    """All records at ``path`` (any source, any known layout), validated."""
    fmt = detect(path)
    if fmt == "prmkit":
        return list(iter_records(path))
    return list(formats.read(fmt, path, options))
