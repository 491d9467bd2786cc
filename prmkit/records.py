"""The canonical record, and reading and writing it as JSONL.

One JSON object per line. The fields are fixed (see ARCHITECTURE.md, "Records"):

    id, problem, steps, labels, first_error, answer, reference, is_correct, group,
    step_scores, meta

Every reader reports a bad line as ``FILE:LINE: field 'X': what is wrong`` through
:class:`prmkit.errors.RecordError`. Every writer writes to a temporary file beside the output
and renames it at the end, so a failed run never leaves half a file where the output should be.
Long jobs that must resume use :class:`ResumableWriter` instead: it appends finished records to
``OUT.partial`` as it goes and renames that file to ``OUT`` when the job completes (the commands
reach it through :class:`prmkit.resume.Partial`, which adds the header every resume is checked
against).
"""

from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Iterator

from prmkit.errors import ListElement, PrmkitError, RecordError
from prmkit.tables import is_json_list, is_table, iter_json_list, iter_rows, kind_name

FIELDS = ("id", "problem", "steps", "labels", "first_error", "answer", "reference",
          "is_correct", "group", "step_scores", "meta")


@dataclass
class Record:
    """One solution to one problem, split into steps.

    ``labels[i]`` is the correctness of step i in [0, 1] (None = unlabelled).
    ``first_error`` is the 0-based index of the first wrong step, -1 when all steps are right.
    ``step_scores`` are written by ``prmkit score`` (None = the step could not be scored, for
    example because the solution was longer than the model allows).
    """

    id: str
    problem: str
    steps: list[str]
    labels: list[float | None] | None = None
    first_error: int | None = None
    answer: str | None = None
    reference: str | None = None
    is_correct: bool | None = None
    group: str | None = None
    step_scores: list[float | None] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`RecordError` (naming the field) if the record breaks an invariant."""
        _check_str(self.id, "id", allow_empty=False)
        _check_str(self.problem, "problem", allow_empty=False)
        if not isinstance(self.steps, list):
            raise RecordError(f"expected a list of strings, got {kind_name(self.steps)}", field="steps")
        if not self.steps:
            raise RecordError("empty list: a solution needs at least one step", field="steps")
        for i, s in enumerate(self.steps):
            if not isinstance(s, str):
                raise RecordError(f"step {i} is {kind_name(s)}, expected a string", field="steps")
        n = len(self.steps)
        if self.labels is not None:
            _check_per_step(self.labels, n, "labels", unit_interval=True)
        if self.step_scores is not None:
            _check_per_step(self.step_scores, n, "step_scores", unit_interval=False)
        if self.first_error is not None:
            if isinstance(self.first_error, bool) or not isinstance(self.first_error, int):
                raise RecordError(f"expected an integer, got {kind_name(self.first_error)}",
                                  field="first_error")
            if not -1 <= self.first_error < n:
                raise RecordError(f"{self.first_error} is out of range for {n} steps "
                                  f"(use -1 when every step is correct)", field="first_error")
        for name in ("answer", "reference", "group"):
            value = getattr(self, name)
            if value is not None:
                _check_str(value, name, allow_empty=True)
        if self.is_correct is not None and not isinstance(self.is_correct, bool):
            raise RecordError(f"expected true or false, got {kind_name(self.is_correct)}",
                              field="is_correct")
        if not isinstance(self.meta, dict):
            raise RecordError(f"expected an object, got {kind_name(self.meta)}", field="meta")

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, in field order, without empty optional fields."""
        out: dict[str, Any] = {}
        for name in FIELDS:
            value = getattr(self, name)
            if value is None or (name == "meta" and not value):
                continue
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, obj: Any) -> "Record":
        """Build and validate a record from a parsed JSON object.

        Numbers given for ``id``, ``answer``, ``reference`` or ``group`` are turned into strings
        (nothing is lost). Integer labels and scores become floats. Unknown fields are an error:
        put extra data under ``meta``.
        """
        if not isinstance(obj, dict):
            raise RecordError(f"expected a JSON object, got {kind_name(obj)}")
        unknown = [k for k in obj if k not in FIELDS]
        if unknown:
            raise RecordError(f"unknown field (known fields: {', '.join(FIELDS)}; "
                              f"put anything else under 'meta')", field=unknown[0])
        for name in ("id", "problem", "steps"):
            if name not in obj:
                raise RecordError("missing", field=name)
        values = dict(obj)
        for name in ("id", "answer", "reference", "group"):
            v = values.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values[name] = str(v)
        for name in ("labels", "step_scores"):
            v = values.get(name)
            if isinstance(v, list):
                values[name] = [float(x) if isinstance(x, int) and not isinstance(x, bool) else x
                                for x in v]
        if values.get("meta") is None:
            values["meta"] = {}
        return cls(**values)

    def labels_or_first_error(self) -> list[float | None] | None:
        """Step labels, derived from ``first_error`` when ``labels`` is absent."""
        if self.labels is not None:
            return self.labels
        if self.first_error is not None:
            return labels_from_first_error(len(self.steps), self.first_error)
        return None


def labels_from_first_error(n_steps: int, first_error: int) -> list[float | None]:
    """ProcessBench's rule: steps before the first error are 1, the first error is 0, later
    steps are unlabelled (None). ``first_error == -1`` means every step is 1."""
    if first_error == -1:
        return [1.0] * n_steps
    if not 0 <= first_error < n_steps:
        raise RecordError(f"{first_error} is out of range for {n_steps} steps", field="first_error")
    return [1.0] * first_error + [0.0] + [None] * (n_steps - first_error - 1)


def first_error_from_labels(labels: list[float | None], threshold: float = 0.5) -> int | None:
    """The index of the first step labelled below ``threshold``; -1 if every step is labelled
    and at or above it; None if an unlabelled step comes before any error (unknown)."""
    for i, label in enumerate(labels):
        if label is None:
            return None
        if label < threshold:
            return i
    return -1


# ---------------------------------------------------------------------------------------------
# validation helpers


def _check_str(value: Any, name: str, allow_empty: bool) -> None:
    if not isinstance(value, str):
        raise RecordError(f"expected a string, got {kind_name(value)}", field=name)
    if not allow_empty and not value.strip():
        raise RecordError("empty", field=name)


def _check_per_step(values: Any, n: int, name: str, unit_interval: bool) -> None:
    if not isinstance(values, list):
        raise RecordError(f"expected a list, got {kind_name(values)}", field=name)
    if len(values) != n:
        raise RecordError(f"has {len(values)} entries but there are {n} steps", field=name)
    for i, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RecordError(f"entry {i} is {v!r}, expected a finite number or null", field=name)
        if unit_interval and not 0.0 <= v <= 1.0:
            raise RecordError(f"entry {i} is {v}, expected a value in [0, 1]", field=name)


# ---------------------------------------------------------------------------------------------
# reading


def _open_input(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise PrmkitError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PrmkitError(f"{path}: is a directory, expected a JSONL file") from None
    except OSError as e:
        raise PrmkitError(f"{path}: cannot open ({e.strerror})") from None


def json_error(e: json.JSONDecodeError, line: str) -> str:
    """One JSONL line's error at the parser's column; a line cut off mid-write is said to be."""
    where = f"{e.msg.removesuffix(' at')} at column {e.colno}"
    if e.pos < len(line.rstrip()) and not e.msg.startswith("Unterminated string"):
        return f"invalid JSON: {where}"
    return (f"invalid JSON: the line ends (column {len(line.rstrip()) + 1}) before its JSON "
            f"does, cut off?: {where}")


def iter_jsonl(path: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, parsed_object)`` for each non-blank line of a JSONL file.

    A line that is not valid UTF-8 or not valid JSON raises :class:`RecordError` naming the
    file and the line. A UTF-8 byte-order mark at the start is accepted. A table (a datasets
    folder, an Arrow or Parquet file, ``hf:NAME``; :mod:`prmkit.tables`) yields its rows the
    same way (numbered by ``TableRow``), and a JSON list its elements (``ListElement``).
    """
    if is_table(path):
        yield from iter_rows(path)
        return
    if is_json_list(path):
        for index, obj in iter_json_list(path):
            yield ListElement(index + 1), obj
        return
    f = _open_input(path)
    try:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise RecordError(f"not valid UTF-8 (byte {e.start + 1})", path, lineno) from None
            if not text.strip():
                continue
            try:  # without its newline, a line cut inside a string reads as unterminated
                yield lineno, json.loads(text.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                raise RecordError(json_error(e, text), path, lineno) from None
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def iter_records(path: str) -> Iterator[Record]:
    """Validated records of a prmkit JSONL file or JSON list; duplicate ids are an error, and a
    record without ``id`` gets ``rec-N`` (N: line - 1, or list index), as TRL rows get ``trl-N``."""
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        if isinstance(obj, dict) and "id" not in obj:
            obj = {"id": f"rec-{lineno - 1}", **obj}
        try:
            rec = Record.from_dict(obj)
        except RecordError as e:
            raise e.at(path, lineno) from None
        if rec.id in seen:
            raise RecordError(f"duplicate id {rec.id!r} (first seen on line {seen[rec.id]})",
                              path, lineno, "id")
        seen[rec.id] = lineno
        yield rec


def read_records(path: str) -> list[Record]:
    """All records of a prmkit JSONL file, validated."""
    return list(iter_records(path))


# ---------------------------------------------------------------------------------------------
# writing


@contextmanager
def atomic_output(path: str) -> Iterator[IO[str]]:
    """Open ``path`` for writing through a temporary file that replaces it only on success.

    ``-`` writes to standard output (not atomic). If the body raises, the temporary file is
    removed and ``path`` is left as it was.
    """
    if path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise PrmkitError(f"{path}: the folder {directory} does not exist")
    if os.path.isdir(path):
        raise PrmkitError(f"{path}: is a directory, expected a file")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        f = open(tmp, "w", encoding="utf-8")
    except OSError as e:
        raise PrmkitError(f"{path}: cannot write ({e.strerror})") from None
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dump_line(obj: Any) -> str:
    """One JSONL line (UTF-8 kept as is, no trailing spaces)."""
    return json.dumps(obj, ensure_ascii=False) + "\n"


def write_jsonl(path: str, rows: Iterable[Any]) -> int:
    """Write JSON objects, one per line, atomically. Returns the number written."""
    n = 0
    with atomic_output(path) as f:
        for row in rows:
            f.write(dump_line(row))
            n += 1
    return n


def write_records(path: str, records: Iterable[Record]) -> int:
    """Write records as prmkit JSONL, atomically. Returns the number written."""
    return write_jsonl(path, (r.to_dict() for r in records))


def check_output_path(path: str) -> None:
    """Fail early (before any model is loaded) when ``path`` cannot be written: its folder is
    missing or it is a folder."""
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise PrmkitError(f"{path}: the folder does not exist")
    if os.path.isdir(path):
        raise PrmkitError(f"{path}: is a directory, expected a file")


class ResumableWriter:
    """Write records as a long job finishes them, and resume after a kill.

    Records go to ``OUT.partial``, one flushed line each. :meth:`done_ids` tells a restarted
    job which records are already finished, so it neither redoes nor loses them. :meth:`close`
    renames ``OUT.partial`` to ``OUT`` when the job is complete. A torn last line (from a kill
    in the middle of a write) is dropped on resume, and that record is redone. With ``sync``,
    every record is also fsynced (slow records, such as a labeler's, survive a power loss).
    """

    def __init__(self, path: str, resume: bool = True, sync: bool = False):
        self.path, self.sync = path, sync
        self.partial = path + ".partial"
        self._done: dict[str, dict[str, Any]] = {}
        check_output_path(path)
        if resume and os.path.exists(self.partial):
            # Cut the file back to its last complete record (in place: nothing finished is lost).
            os.truncate(self.partial, self._load_partial())
        self._f = open(self.partial, "a" if resume else "w", encoding="utf-8")

    def _load_partial(self) -> int:
        """Read finished records; return the byte length of the complete ones."""
        good = 0
        with open(self.partial, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # torn write: redo that record
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    break
                if not isinstance(obj, dict) or "id" not in obj:
                    break
                self._done[str(obj["id"])] = obj
                good += len(raw)
        return good

    def done_ids(self) -> set[str]:
        return set(self._done)

    def done_rows(self) -> dict[str, dict[str, Any]]:
        return dict(self._done)

    def write(self, row: Record | dict[str, Any]) -> None:
        obj = row.to_dict() if isinstance(row, Record) else row
        self._f.write(dump_line(obj))
        self._f.flush()
        if self.sync:
            os.fsync(self._f.fileno())
        self._done[str(obj.get("id"))] = obj

    def discard(self) -> None:
        """Close and remove the partial file (a run that failed before its first record)."""
        self._f.close()
        os.unlink(self.partial)

    def close(self, order: list[str] | None = None) -> None:
        """Finish: write ``OUT`` (in ``order`` of ids, if given) and remove the partial file."""
        self._f.close()
        if order is None:
            os.replace(self.partial, self.path)
            return
        missing = [i for i in order if i not in self._done]
        if missing:
            raise PrmkitError(f"{self.path}: {len(missing)} records are not finished "
                              f"(first: {missing[0]!r})")
        write_jsonl(self.path, (self._done[i] for i in order))
        os.unlink(self.partial)
