"""Progress of long jobs, on a terminal and in a log file alike.

:func:`progress` is what every long job (score, generate, label, search, train, eval, the demo)
builds its progress with, in place of ``tqdm(..., disable=None)``; it takes tqdm's arguments.

* stderr is a terminal: a tqdm bar, as before;
* stderr is not a terminal (a log file, a cluster job, CI): a plain line every
  ``PRMKIT_PROGRESS_EVERY`` seconds (default 30; 0 = at every update), in the spirit of the
  Hugging Face Trainer's log lines, and one when the job ends (when it ran that long)::

      prmkit: score: 120/400 rec (30%), 4.1 rec/s, elapsed 0:00:29, left 0:01:08
      prmkit: train: 40/54 step (74%), 0.52 step/s, elapsed 0:01:16, left 0:00:26, loss=0.4125

  Nothing is printed for a job with nothing to do, or one shorter than the interval. The rate
  (and so the time left) is measured from the first item done, not from the start: loading a
  model is not work on the items; until a second item is done no rate nor time left is shown.
* ``disable=True`` prints nothing either way (a job run inside another that shows its own).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterable, Iterator

EVERY_ENV = "PRMKIT_PROGRESS_EVERY"
DEFAULT_EVERY = 30.0


def interval() -> float:
    """Seconds between two progress lines (``$PRMKIT_PROGRESS_EVERY``, default 30)."""
    value = os.environ.get(EVERY_ENV, "")
    try:
        return max(0.0, float(value)) if value.strip() else DEFAULT_EVERY
    except ValueError:
        return DEFAULT_EVERY


def on_terminal(stream: Any = None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


_OPEN: list[Any] = []   # the bars made by progress(), innermost last (closed ones dropped)


def note(**items: Any) -> None:
    """Show ``items`` (work done inside the current item, e.g. rollouts of a long record) on the
    innermost open bar: its postfix on a terminal, a log line off one once the interval has
    passed. Nothing happens when no bar is open."""
    while _OPEN and (getattr(_OPEN[-1], "closed", False) or getattr(_OPEN[-1], "disable", False)):
        _OPEN.pop()
    if _OPEN:
        _OPEN[-1].set_postfix(items)
        if isinstance(_OPEN[-1], LogProgress):
            _OPEN[-1].tick()


def progress(iterable: Iterable[Any] | None = None, *, total: int | None = None,
             initial: int = 0, desc: str = "", unit: str = "it", disable: bool | None = None,
             **kwargs: Any) -> Any:
    """A tqdm bar on a terminal, else a :class:`LogProgress` (the module docstring)."""
    if disable is True or on_terminal(kwargs.get("file")):
        from tqdm import tqdm

        bar: Any = tqdm(iterable, total=total, initial=initial, desc=desc, unit=unit,
                        disable=True if disable is True else None, **kwargs)
    else:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        bar = LogProgress(iterable, total=total, initial=initial, desc=desc, unit=unit,
                          file=kwargs.get("file"))
    _OPEN.append(bar)
    return bar


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class LogProgress:
    """tqdm's interface (update, set_postfix, write, close, iteration, ``with``) as log lines."""

    def __init__(self, iterable: Iterable[Any] | None = None, total: int | None = None,
                 initial: int = 0, desc: str = "", unit: str = "it", file: Any = None,
                 every: float | None = None):
        self.iterable, self.total, self.n, self.initial = iterable, total, initial, initial
        self.desc, self.unit, self.file = desc, unit, file
        self.every = interval() if every is None else every
        self.start = self.last = time.monotonic()
        self.first: tuple[float, int] | None = None   # (time, count) when the first item was done
        self.printed_n: int | None = None
        self.postfix = ""
        self.closed = False

    # -- tqdm's interface ------------------------------------------------------------------
    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self.first is None and n > 0:
            self.first = (now, self.n)
        if now - self.last >= self.every and self.n != self.printed_n:
            self.last = now
            self._print(now)

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True,
                    **kwargs: Any) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def tick(self) -> None:
        """A line with the current postfix once the interval has passed, even if no item was
        finished since the last one (:func:`note`: news inside a long item)."""
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._print(now)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def write(self, text: str, file: Any = None, end: str = "\n") -> None:
        print(text, end=end, file=file or self.file or sys.stderr, flush=True)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        now = time.monotonic()
        # the last count, for a job that was long enough to be reported at all
        long_enough = self.printed_n is not None or now - self.start >= self.every
        if self.n != self.printed_n and self.n > self.initial and long_enough:
            self._print(now)

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.iterable or ():
                yield item
                self.update(1)
        finally:
            self.close()

    # -- the line --------------------------------------------------------------------------
    def line(self, now: float | None = None) -> str:
        """``desc: done/total unit (pct), rate, elapsed, left[, postfix]``."""
        now = time.monotonic() if now is None else now
        elapsed = now - self.start
        rate = self.rate(now)
        count = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        parts = [f"{count} {self.unit}" + (f" ({100 * self.n / self.total:.0f}%)"
                                           if self.total else "")]
        if rate:
            parts.append(f"{rate:.3g} {self.unit}/s")
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.total is not None and rate > 0:
            parts.append(f"left {_clock(max(self.total - self.n, 0) / rate)}")
        if self.postfix:
            parts.append(self.postfix)
        return f"prmkit: {self.desc + ': ' if self.desc else ''}{', '.join(parts)}"

    def rate(self, now: float) -> float:
        """Items per second since the first item was done (0 until a second one is)."""
        if self.first is None or now <= self.first[0] or self.n <= self.first[1]:
            return 0.0
        return (self.n - self.first[1]) / (now - self.first[0])

    def _print(self, now: float) -> None:
        self.printed_n = self.n
        print(self.line(now), file=self.file or sys.stderr, flush=True)
