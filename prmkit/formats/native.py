"""The prmkit record format itself: one JSON object per line with the fields of
:class:`prmkit.records.Record` (id, problem, steps, labels, first_error, answer, reference,
is_correct, group, step_scores, meta). See ARCHITECTURE.md, section "Records".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

from prmkit.records import Record, iter_records, write_records

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("prmkit records, JSONL: id, problem, steps (list of strings), and optional labels "
        "(per step, 0..1 or null), first_error (0-based, -1 = all correct), answer, reference, "
        "is_correct, group, step_scores, meta. Read and written as is.")

def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    """Validated records; a bad line raises ``FILE:LINE: field 'X': ...``."""
    return iter_records(path)


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    """Write records as prmkit JSONL, atomically; returns how many were written."""
    return write_records(path, records)
