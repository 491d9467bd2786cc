"""Converters between prmkit records and the formats people already have.

One module per external format, each with ``read(path, options)`` (yields
:class:`prmkit.records.Record`) and ``write(path, records, options)`` (writes atomically,
returns the count). :func:`read` and :func:`write` dispatch on the format name through a plain
dict. Every bad source record raises :class:`prmkit.errors.RecordError` naming the file, the
line (or record index / parquet row) and the source field; nothing is dropped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, Iterator

from prmkit.errors import PrmkitError
from prmkit.formats import (gsm8k, hendrycks_math, math_shepherd, native, prm800k, prmbench,
                            processbench, trl)
from prmkit.records import Record

SHEPHERD_LABEL_STYLES = ("text", "tokens", "floats")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class ConvertOptions:
    """Options of ``prmkit convert``. Each field's help text is in its metadata."""

    prm800k_neutral: float | None = field(default=1.0, metadata=_help(
        "label for a PRM800K rating of 0 (neutral). Let's Verify Step by Step counted neutral "
        "steps as correct (1); use 0 to count them as wrong, or none to leave them unlabelled"))
    soft_threshold: float = field(default=0.5, metadata=_help(
        "when writing a hard-label format (TRL true/false, Math-Shepherd +/-, PRM800K -1/1) "
        "from float labels: a label >= this is correct"))
    strip_calculator: bool = field(default=False, metadata=_help(
        "GSM8K: remove the calculator annotations <<a*b=c>> from the steps"))
    math_shepherd_labels: str = field(default="text", metadata=_help(
        "writing Math-Shepherd: 'text' (label = the input with each tag replaced by +/-, the "
        "original dataset), 'tokens' (label = a list of '+'/'-', OpenRLHF) or 'floats' "
        "(label = a list of float labels, OpenRLHF soft labels)"))
    prm800k_alternatives: bool = field(default=False, metadata=_help(
        "PRM800K: besides each labelling session's path, one record per rated alternative "
        "step: the path up to that step, then the alternative as the last step (the "
        "trl-lib/prm800k expansion). Phase-1 paths hold almost no wrong step; the wrong "
        "steps are among the alternatives"))
    skip_empty: bool = field(default=False, metadata=_help(
        "PRM800K: leave out labelling sessions with no step to keep (the labeller rated and "
        "chose nothing), with a warning that counts them; by default such a session is an "
        "error"))
    prmbench_later_steps: float | None = field(default=None, metadata=_help(
        "PRMBench: label for steps after the first error that are not error steps. Default "
        "none (unlabelled, as ProcessBench and PRM800K); PRMBench's own evaluation counts "
        "them as correct, which is 1"))

    def __post_init__(self) -> None:
        for name in ("prm800k_neutral", "prmbench_later_steps"):
            value = getattr(self, name)
            if value is not None and not _unit(value):
                raise PrmkitError(f"option {name}: {value!r} is not a number in [0, 1] or none")
        if not _unit(self.soft_threshold):
            raise PrmkitError(f"option soft_threshold: {self.soft_threshold!r} is not a number "
                              f"in [0, 1]")
        for name in ("strip_calculator", "prm800k_alternatives", "skip_empty"):
            if not isinstance(getattr(self, name), bool):
                raise PrmkitError(f"option {name}: expected true or false, got "
                                  f"{getattr(self, name)!r}")
        if self.math_shepherd_labels not in SHEPHERD_LABEL_STYLES:
            raise PrmkitError(f"option math_shepherd_labels: {self.math_shepherd_labels!r} is "
                              f"not one of {', '.join(SHEPHERD_LABEL_STYLES)}")

    @staticmethod
    def help() -> dict[str, str]:
        """Each option's help text, by field name."""
        return {f.name: f.metadata["help"] for f in fields(ConvertOptions)}


def _unit(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and 0.0 <= value <= 1.0)


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
