"""Converters between prmkit records and the formats people already have.

One module per external format, each with ``read(path, options)`` (yields
:class:`prmkit.records.Record`) and ``write(path, records, options)`` (writes atomically,
returns the count). :func:`read` and :func:`write` dispatch on the format name through a plain
dict. Every bad source record raises :class:`prmkit.errors.RecordError` naming the file, the
line (or record index / parquet row) and the source field; nothing is dropped silently.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from prmkit.errors import PrmkitError
from prmkit.formats import (gsm8k, hendrycks_math, math_shepherd, native, prm800k, prmbench,
                            processbench, trl)
from prmkit.formats.options import SHEPHERD_LABEL_STYLES, ConvertOptions

__all__ = ["FORMAT_HELP", "FORMAT_NAMES", "SHEPHERD_LABEL_STYLES", "ConvertOptions", "read", "write"]
from prmkit.records import Record

Reader = Callable[[str, ConvertOptions], Iterator[Record]]
Writer = Callable[[str, Iterable[Record], ConvertOptions], int]

_FORMATS: dict[str, tuple[Reader, Writer]] = {
    "prmkit": (native.read, native.write),
    "trl": (trl.read, trl.write),
    "math-shepherd": (math_shepherd.read, math_shepherd.write),
    "prm800k": (prm800k.read, prm800k.write),
    "processbench": (processbench.read, processbench.write),
    "prmbench": (prmbench.read, prmbench.write),
    "gsm8k": (gsm8k.read, gsm8k.write),
    "math": (hendrycks_math.read, hendrycks_math.write),
}

FORMAT_NAMES: list[str] = list(_FORMATS)

# One paragraph per format for ``prmkit convert --help``: the fields and the label rules.
FORMAT_HELP: dict[str, str] = {
    "prmkit": native.HELP,
    "trl": trl.HELP,
    "math-shepherd": math_shepherd.HELP,
    "prm800k": prm800k.HELP,
    "processbench": processbench.HELP,
    "prmbench": prmbench.HELP,
    "gsm8k": gsm8k.HELP,
    "math": hendrycks_math.HELP,
}


def _lookup(fmt: str) -> tuple[Reader, Writer]:
    if fmt not in _FORMATS:
        raise PrmkitError(f"unknown format {fmt!r}; known formats: {', '.join(FORMAT_NAMES)}")
    return _FORMATS[fmt]


def read(fmt: str, path: str, options: ConvertOptions | None = None) -> Iterator[Record]:
    """Records read from ``path`` in format ``fmt``. Ids must be unique within the file."""
    reader = _lookup(fmt)[0]  # an unknown name fails here, not at the first next()
    return _unique_ids(path, reader(path, options or ConvertOptions()))


def _unique_ids(path: str, records: Iterator[Record]) -> Iterator[Record]:
    seen: dict[str, int] = {}
    for n, rec in enumerate(records, start=1):
        if rec.id in seen:
            raise PrmkitError(f"{path}: duplicate id {rec.id!r} (records {seen[rec.id]} and {n}, "
                              f"counting from 1)")
        seen[rec.id] = n
        yield rec


def write(fmt: str, path: str, records: Iterable[Record],
          options: ConvertOptions | None = None) -> int:
    """Write ``records`` to ``path`` in format ``fmt``, atomically; returns how many."""
    writer = _lookup(fmt)[1]
    return writer(path, records, options or ConvertOptions())
