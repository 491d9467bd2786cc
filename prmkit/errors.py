"""User-facing errors.

Anything a user can cause (a bad input line, a missing file, a wrong option) raises a
:class:`PrmkitError`. The CLI prints its message on one line and exits with status 2; it never
shows a traceback for these. Bugs in prmkit itself still raise ordinary exceptions.
"""

from __future__ import annotations


class PrmkitError(Exception):
    """An error caused by the user's input or options, reported without a traceback."""


class TableRow(int):
    """A row of a table (Arrow, Parquet, a datasets folder) where a line number would go: its
    value counts from 1 like a line's (so ids made from it match the JSONL form's), and an error
    names it as ``row N``, counting from 0 as the table does."""

    @property
    def row(self) -> int:
        return int(self) - 1


class ListElement(TableRow):
    """An element of a file that holds one JSON list, where a line number would go: counted
    from 1 like a line, named ``record N`` counting from 0, as ``data[N]``."""


class RecordError(PrmkitError):
    """A bad input record. The message names the file, the line and the field."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.path, self.line, self.field, self.reason = path, line, field, message
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
            if isinstance(self.line, ListElement):
                where = f"{self.path}: record {self.line.row}: "
            elif isinstance(self.line, TableRow):
                where = f"{self.path}: row {self.line.row}: "
        elif self.line is not None:
            where = f"line {self.line}: "
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}{field}{self.reason}"

    def at(self, path: str | None = None, line: int | None = None) -> "RecordError":
        """The same error, located in a file and line (keeps what is already known)."""
        return RecordError(self.reason, path if self.path is None else self.path,
                           line if self.line is None else self.line, self.field)
