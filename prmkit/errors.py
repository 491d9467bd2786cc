"""User-facing errors.

Anything a user can cause (a bad input line, a missing file, a wrong option) raises a
:class:`PrmkitError`. The CLI prints its message on one line and exits with status 2; it never
shows a traceback for these. Bugs in prmkit itself still raise ordinary exceptions.
"""

from __future__ import annotations


class PrmkitError(Exception):
    """An error caused by the user's input or options, reported without a traceback."""


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
        elif self.line is not None:
            where = f"line {self.line}: "
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}{field}{self.reason}"

    def at(self, path: str | None = None, line: int | None = None) -> "RecordError":
        """The same error, located in a file and line (keeps what is already known)."""
        return RecordError(self.reason, path if self.path is None else self.path,
                           line if self.line is None else self.line, self.field)
