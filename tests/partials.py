"""Partial files as a killed run leaves them (prmkit/resume.py's contract), made in this process.

``header_of(argv, partial)``: the header line ``prmkit ARGV`` writes first to its partial file
(the run is stopped as soon as the file is open). ``killed(argv, partial, keep)``: the run is
stopped just before it writes ``OUT``, so its partial file holds the header and every row; it is
then cut back to the header and its first ``keep`` rows (and a torn line, with ``torn``).
"""

from __future__ import annotations

import os

import pytest

from prmkit import cli
from prmkit.resume import Partial


def _stopped(argv, where: str) -> None:
    """Run ``prmkit ARGV`` with :class:`Partial` raising KeyboardInterrupt at ``where`` (after
    ``__init__`` or instead of ``close``): exit 130, the partial file left as it was."""
    with pytest.MonkeyPatch.context() as mp:
        if where == "open":
            opened = Partial.__init__

            def stop(self, *a, **k):
                opened(self, *a, **k)
                raise KeyboardInterrupt
            mp.setattr(Partial, "__init__", stop)
        else:
            def stop(self, order):
                raise KeyboardInterrupt
            mp.setattr(Partial, "close", stop)
        rc = cli.main([str(a) for a in argv])
    assert rc == 130, f"prmkit {' '.join(map(str, argv))} ended {rc}, not at the kill"


def header_of(argv, partial) -> str:
    """The header line (with its newline) that ``prmkit ARGV`` writes to ``partial``."""
    assert not os.path.exists(partial)
    _stopped(argv, "open")
    with open(partial, encoding="utf-8") as f:
        head = f.readline()
    os.unlink(partial)
    return head


def killed(argv, partial, keep: int, torn: bool = False) -> list[str]:
    """Leave ``partial`` as a run of ``prmkit ARGV`` killed after its first ``keep`` rows (a
    torn line after them with ``torn``); returns every line the whole run wrote there."""
    assert not os.path.exists(partial)
    _stopped(argv, "close")
    with open(partial, encoding="utf-8") as f:
        lines = f.readlines()
    assert len(lines) > keep, f"{partial}: {len(lines) - 1} rows, cannot keep {keep}"
    with open(partial, "w", encoding="utf-8") as f:
        f.write("".join(lines[:1 + keep]) + (lines[1 + keep][:20] if torn else ""))
    return lines
