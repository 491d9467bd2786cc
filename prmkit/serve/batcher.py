"""Dynamic micro-batching: concurrent requests share the model's forward passes.

An RL trainer sends many small scoring requests at once (one per rollout worker). Scored one at
a time, each costs a forward pass of batch size 1, which wastes most of the hardware. The
batcher queues requests and hands the model one group at a time, as large as a token budget
allows, the same idea as dynamic batching in inference servers (NVIDIA Triton's dynamic
batcher; Orca / vLLM's continuous batching at the request level).

How it works:

* **one worker thread owns the model.** Request handlers never touch it: they
  :meth:`Batcher.submit` a job (the solutions of one request) and wait on its future;
* **a group** is formed when the oldest waiting job has waited ``max_wait_ms``, or as soon as
  the waiting jobs fill the token budget, whichever comes first (and at once while closing).
  Jobs are taken whole, oldest first, while the group's padded size (its longest solution x its
  number of solutions, as :func:`prmkit.models.hf.token_budget_batches` counts it) stays within
  ``token_budget``; the first job is always taken, however large. The group goes to the PRM's
  ``score`` in one call, which sorts it by length and packs it into token-budget forward passes;
* while the worker runs a group, new jobs wait; a busy server therefore forms larger groups by
  itself, and an idle one answers a lone request after at most ``max_wait_ms``;
* **the queue is bounded** by the number of solutions waiting (``max_queue``). A job that would
  go past it is refused at once with :class:`Overloaded`, which carries a Retry-After estimate
  (queued solutions x the measured seconds per solution, 1 to 60 s). Nothing waits unbounded;
* a job whose caller gave up (its future was cancelled) before its group formed is dropped
  without being scored;
* when the PRM fails on a group, its jobs are scored again one by one, so only the job it
  cannot score gets the error;
* :meth:`Batcher.close` stops taking jobs and finishes every job already queued, so a graceful
  shutdown loses no accepted request.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

from prmkit.errors import PrmkitError

ScoreFn = Callable[[list[str], list[list[str]]], list[list[float | None]]]


class Overloaded(Exception):
    """The queue is full; try again after ``retry_after`` seconds (HTTP 503)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class Closed(Exception):
    """The batcher is shutting down and takes no new jobs (HTTP 503)."""


@dataclass
class BatcherConfig:
    """How requests are grouped into forward passes."""

    token_budget: int = field(default=16384, metadata={
        "help": "most padded tokens (longest solution x solutions) in one group of requests; "
                "1 scores every request on its own (no dynamic batching)"})
    max_wait_ms: float = field(default=10.0, metadata={
        "help": "longest time the oldest queued request waits for others to share its forward "
                "pass, in milliseconds (0: take whatever is queued at once)"})
    max_queue: int = field(default=1024, metadata={
        "help": "most solutions waiting to be scored; a request that would go past it gets "
                "503 with Retry-After"})

    def __post_init__(self) -> None:
        if self.token_budget < 1:
            raise PrmkitError(f"token budget must be positive, got {self.token_budget}")
        if not (self.max_wait_ms >= 0 and math.isfinite(self.max_wait_ms)):
            raise PrmkitError(f"max wait must be 0 or more milliseconds, got {self.max_wait_ms}")
        if self.max_queue < 1:
            raise PrmkitError(f"max queue must be positive, got {self.max_queue}")


@dataclass
class BatcherStats:
    """What the worker did (shown by ``GET /health`` and the benchmark)."""

    groups: int = 0          # calls to the PRM's score
    jobs: int = 0            # requests scored
    solutions: int = 0
    max_group_jobs: int = 0  # most requests that shared one group
    dropped: int = 0         # jobs whose caller left before they were scored
    refused: int = 0         # jobs refused because the queue was full

    def as_dict(self) -> dict[str, float]:
        d = dict(self.__dict__)
        d["mean_group_jobs"] = round(self.jobs / self.groups, 3) if self.groups else 0.0
        return d


@dataclass
class _Job:
    problems: list[str]
    steps: list[list[str]]
    longest: int                 # tokens of its longest solution
    future: Future
    arrived: float


class Batcher:
    """Queue scoring jobs and run them in groups on one worker thread. See the module docstring.

    ``score`` is the PRM's protocol method (``prmkit.models.base.PRM.score``); it is only ever
    called from the worker thread.
    """

    def __init__(self, score: ScoreFn, config: BatcherConfig | None = None):
        self.score_fn = score
        self.config = config or BatcherConfig()
        self.stats = BatcherStats()
        self._queue: deque[_Job] = deque()
        self._queued = 0                      # solutions in the queue
        self._seconds_per_solution = 0.05     # refined by measurement, for Retry-After
        self._cond = threading.Condition()
        self._closing = False
        self._worker = threading.Thread(target=self._run, name="prmkit-batcher", daemon=True)
        self._worker.start()

    # -- the caller's side ----------------------------------------------------------------------
    def submit(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
               lengths: Sequence[int] | None = None) -> Future:
        """Queue one job; its future gets one list of step scores per solution.

        ``lengths`` are the solutions' token counts (for packing); without them every solution
        counts as one token. Raises :class:`Overloaded` when the queue is full and
        :class:`Closed` after :meth:`close`.
        """
        if len(problems) != len(steps):
            raise PrmkitError(f"{len(problems)} problems but {len(steps)} step lists")
        n = len(problems)
        future: Future = Future()
        if n == 0:
            future.set_result([])
            return future
        longest = max(lengths) if lengths else 1
        with self._cond:
            if self._closing:
                raise Closed("the server is shutting down")
            if self._queued + n > self.config.max_queue:
                self.stats.refused += 1
                wait = math.ceil(self._queued * self._seconds_per_solution)
                raise Overloaded(f"the server is busy: {self._queued} solutions are queued (at "
                                 f"most {self.config.max_queue}); retry later",
                                 retry_after=min(60, max(1, wait)))
            self._queue.append(_Job(list(problems), [list(s) for s in steps], int(longest),
                                    future, time.monotonic()))
            self._queued += n
            self._cond.notify()
        return future

    @property
    def queued(self) -> int:
        """Solutions waiting for a group."""
        return self._queued

    def close(self, timeout: float | None = None) -> None:
        """Take no new jobs, finish the queued ones, stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._worker.join(timeout)

    # -- the worker -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            group = self._next_group()
            if group is None:
                return
            if group:
                self._score(group)

    def _next_group(self) -> list[_Job] | None:
        """Wait for a group (see the module docstring); None when closed and drained."""
        cfg = self.config
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = self._queue[0].arrived + cfg.max_wait_ms / 1000.0
            while not self._closing and self._padded(self._queue) < cfg.token_budget:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            group: list[_Job] = []
            longest = count = 0
            while self._queue:
                job = self._queue[0]
                size = max(longest, job.longest) * (count + len(job.problems))
                if group and size > cfg.token_budget:
                    break
                self._queue.popleft()
                self._queued -= len(job.problems)
                if not job.future.set_running_or_notify_cancel():  # the caller left
                    self.stats.dropped += 1
                    continue
                group.append(job)
                longest, count = max(longest, job.longest), count + len(job.problems)
            return group

    @staticmethod
    def _padded(jobs: deque[_Job]) -> int:
        return max(j.longest for j in jobs) * sum(len(j.problems) for j in jobs)

    def _score(self, group: list[_Job]) -> None:
        """Score a group in one call. If it fails, score its jobs one by one, so a job the PRM
        cannot score fails alone and the others still get their answers."""
        problems = [p for job in group for p in job.problems]
        steps = [s for job in group for s in job.steps]
        start = time.monotonic()
        try:
            scores = self._call(problems, steps)
        except Exception as e:
            if len(group) == 1:
                group[0].future.set_exception(e)
                return
            for job in group:
                self._score_alone(job)
            return
        except BaseException as e:  # KeyboardInterrupt and the like: tell every caller, stop
            for job in group:
                job.future.set_exception(e)
            raise
        self._record(group, len(problems), time.monotonic() - start)
        at = 0
        for job in group:
            job.future.set_result(scores[at:at + len(job.problems)])
            at += len(job.problems)

    def _score_alone(self, job: _Job) -> None:
        start = time.monotonic()
        try:
            scores = self._call(job.problems, job.steps)
        except Exception as e:
            job.future.set_exception(e)
            return
        self._record([job], len(job.problems), time.monotonic() - start)
        job.future.set_result(scores)

    def _call(self, problems: list[str], steps: list[list[str]]) -> list[list[float | None]]:
        scores = self.score_fn(problems, steps)
        if len(scores) != len(problems):
            raise RuntimeError(f"the PRM returned {len(scores)} score lists for "
                               f"{len(problems)} solutions")
        return scores

    def _record(self, group: list[_Job], n: int, elapsed: float) -> None:
        with self._cond:
            self._seconds_per_solution = 0.8 * self._seconds_per_solution + 0.2 * elapsed / n
            self.stats.groups += 1
            self.stats.jobs += len(group)
            self.stats.solutions += n
            self.stats.max_group_jobs = max(self.stats.max_group_jobs, len(group))
