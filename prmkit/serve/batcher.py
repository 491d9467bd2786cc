"""Dynamic micro-batching: concurrent requests share the model's forward passes.

The batcher queues scoring jobs (the solutions of one request) and hands the model one piece at a
time, as large as a token budget allows, as dynamic batching in inference servers does.

* One worker thread owns the model; request handlers :meth:`Batcher.submit` a job and wait on
  its future.
* A piece is one call to the PRM's ``score``. An idle server waits for the first piece until the
  oldest job has waited ``max_wait_ms`` or the jobs waiting fill the token budget. A piece takes
  solutions, oldest job first, while its padded size (longest x count) stays within a cap:
  ``token_budget``, or less where the measured speed says one call would take more than
  ``PIECE_SECONDS``, never less than ``MIN_PIECE``. A piece takes at least one solution; a
  larger job spans several pieces.
* ``together=True`` (the server sets it when it shares prefixes) keeps the solutions of one
  problem in one piece: the run a piece begins with is taken whole past the cap, up to
  ``token_budget``; the answer keeps the caller's order.
* Pieces alternate between oldest job first and least served job first, so a small request waits
  for at most two pieces and a stream of small requests cannot starve a long one.
* The queue is bounded (``max_queue`` solutions); a job past it is refused at once with
  :class:`Overloaded` and a Retry-After estimate (1 to 60 s).
* A job whose caller left (its future cancelled, or :meth:`Batcher.cancel`) is dropped before the
  next piece; its future raises :class:`Abandoned`.
* When the PRM fails on a piece, its jobs' parts are scored one by one, so only the job it
  cannot score gets the error.
* :meth:`Batcher.close` takes no new jobs and finishes every queued one.

Why the cap has a floor and why groups stay together: docs/serving.md, "Design notes: the
batcher".
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
    lengths: list[int]           # tokens of each solution
    future: Future
    arrived: float
    done: int = 0                # solutions scored so far (the first ``done``)
    scores: list = field(default_factory=list)
    served: int = 0              # pieces it had a share of
    abandoned: bool = False      # its caller left (:meth:`Batcher.cancel`)

    order: list[int] | None = None   # by_problem: the caller's index of each solution

    @property
    def longest(self) -> int:
        return max(self.lengths)

    def by_problem(self) -> None:
        """Put the solutions of one problem side by side (stable); the answer is put back in
        the caller's order (:meth:`answer`)."""
        first = {p: k for k, p in reversed(list(enumerate(self.problems)))}
        order = sorted(range(len(self.problems)), key=lambda i: first[self.problems[i]])
        if order != sorted(order):
            self.order = order
            self.problems, self.steps, self.lengths = ([x[i] for i in order] for x in (
                self.problems, self.steps, self.lengths))

    def answer(self) -> list:
        if self.order is None:
            return self.scores
        out: list = [None] * len(self.scores)
        for k, i in enumerate(self.order):
            out[i] = self.scores[k]
        return out

    @property
    def left(self) -> int:
        return len(self.problems) - self.done


def _ends(taken: list[tuple[_Job, int]]) -> list[tuple[_Job, int]]:
    """(job, end) of each job in ``taken``, (job, solution) pairs in order."""
    ends: dict[int, tuple[_Job, int]] = {}
    for job, i in taken:
        ends[id(job)] = (job, i + 1)
    return list(ends.values())


class Abandoned(Exception):
    """The caller of a job left (:meth:`Batcher.cancel`): its solutions were not scored."""


PIECE_SECONDS = 2.0   # aim of one call to the PRM (as measured), so a caller who left costs
MIN_PIECE = 1024      # at most about this long; the least cap, and the first (no measure yet)


class Batcher:
    """Queue scoring jobs and run them in pieces on one worker thread. See the module docstring.

    ``score`` is the PRM's protocol method (``prmkit.models.base.PRM.score``); it is only ever
    called from the worker thread.
    """

    def __init__(self, score: ScoreFn, config: BatcherConfig | None = None,
                 together: bool = False):
        self.score_fn = score
        self.config = config or BatcherConfig()
        self.together = together   # a problem's solutions in one piece (see the docstring)
        self.stats = BatcherStats()
        self._queue: deque[_Job] = deque()     # not started
        self._active: list[_Job] = []          # started, not finished
        self._queued = 0                       # solutions not yet scored (queued or active)
        self._seconds_per_solution = 0.05      # refined by measurement, for Retry-After
        self._seconds_per_token: float | None = None  # measured, for the size of a piece
        self._turn = 0
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
        sizes = [max(1, int(x)) for x in lengths] if lengths else [1] * n
        with self._cond:
            if self._closing:
                raise Closed("the server is shutting down")
            if self._queued + n > self.config.max_queue:
                self.stats.refused += 1
                wait = math.ceil(self._queued * self._seconds_per_solution)
                raise Overloaded(f"the server is busy: {self._queued} solutions are queued (at "
                                 f"most {self.config.max_queue}); retry later",
                                 retry_after=min(60, max(1, wait)))
            job = _Job(list(problems), [list(s) for s in steps], sizes, future, time.monotonic())
            if self.together:
                job.by_problem()
            self._queue.append(job)
            self._queued += n
            self._cond.notify()
        return future

    def cancel(self, future: Future) -> None:
        """The caller of ``future`` left: drop its job before its next piece (a piece being
        scored finishes); its future then raises :class:`Abandoned`."""
        with self._cond:
            for job in (*self._queue, *self._active):
                if job.future is future:
                    job.abandoned = True
                    future.cancel()  # succeeds only while the job has not started
            self._cond.notify()

    @property
    def queued(self) -> int:
        """Solutions waiting to be scored (not in the piece being scored)."""
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
            piece = self._next_piece()
            if piece is None:
                return
            if piece:
                self._score(piece)

    def _next_piece(self) -> list[tuple[_Job, int, int]] | None:
        """Wait for work and cut the next piece (see the module docstring); None when closed
        and drained."""
        cfg = self.config
        with self._cond:
            self._drop_abandoned()
            while not self._queue and not self._active:
                if self._closing:
                    return None
                self._cond.wait()
                self._drop_abandoned()
            if not self._active and self._queue:  # idle: let company gather for max_wait
                deadline = self._queue[0].arrived + cfg.max_wait_ms / 1000.0
                while not self._closing and self._padded(self._queue) < cfg.token_budget:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                self._drop_abandoned()
            return self._cut()

    def _drop_abandoned(self) -> None:
        for job in [j for j in (*self._queue, *self._active) if j.abandoned]:
            (self._queue if job in self._queue else self._active).remove(job)
            self._queued -= job.left
            self.stats.dropped += 1
            if not job.future.done():  # done: cancelled while it waited
                job.future.set_exception(Abandoned("the caller left"))

    def _cap(self) -> int:
        """The token cap of the next piece (module docstring)."""
        budget = self.config.token_budget
        if self._seconds_per_token is None:
            return min(budget, MIN_PIECE)
        aim = int(PIECE_SECONDS / max(self._seconds_per_token, 1e-12))
        return min(budget, max(MIN_PIECE, aim))

    def _cut(self) -> list[tuple[_Job, int, int]]:
        """The next piece: (job, first, end) ranges of solutions under the cap, at least one
        solution; turns alternate between oldest first and least served first."""
        self._turn += 1
        order = (lambda j: j.arrived) if self._turn % 2 else (lambda j: (j.served, j.arrived))
        jobs = sorted([*self._active, *self._queue], key=order)
        if self.together:   # a job whose next problem an earlier job holds goes right after it
            first: dict[str, int] = {}
            for k, job in enumerate(jobs):
                for p in job.problems[job.done:]:
                    first.setdefault(p, k)
            jobs.sort(key=lambda j: first[j.problems[j.done]])
        piece = []
        for job, end in self._plan(jobs):
            if job in self._queue:
                self._queue.remove(job)
                if not job.future.set_running_or_notify_cancel():  # the caller left
                    self._queued -= len(job.problems)
                    self.stats.dropped += 1
                    continue
                self._active.append(job)
            piece.append((job, job.done, end))
            self._queued -= end - job.done  # in a piece: no longer waiting
        return piece

    def _plan(self, jobs: list[_Job]) -> list[tuple[_Job, int]]:
        """(job, end) per job of the next piece: its solutions from the first not scored to
        ``end``, taken in turn while the padded size stays within the cap (at least one).
        Together, a piece that cannot take the next solution of the problem it is taking ends
        before that problem's run instead, and the run that a piece begins with is taken whole
        past the cap, up to ``token_budget``."""
        cap, budget = self._cap(), self.config.token_budget
        taken: list[tuple[_Job, int]] = []
        longest = run = 0   # run: solutions taken before the current problem's run
        for job in jobs:
            for i in range(job.done, len(job.problems)):
                prev = taken[-1][0].problems[taken[-1][1]] if taken else None
                if taken and job.problems[i] != prev:
                    run = len(taken)
                size = max(longest, job.lengths[i]) * (len(taken) + 1)
                if taken and size > cap:
                    if not self.together or run == len(taken):
                        return _ends(taken)
                    if run:
                        return _ends(taken[:run])
                    if size > budget:
                        return _ends(taken)
                taken.append((job, i))
                longest = max(longest, job.lengths[i])
        return _ends(taken)

    @staticmethod
    def _padded(jobs: deque[_Job]) -> int:
        return max(j.longest for j in jobs) * sum(len(j.problems) for j in jobs)

    def _score(self, piece: list[tuple[_Job, int, int]]) -> None:
        """Score a piece in one call. If it fails, score its jobs' parts one by one, so a job
        the PRM cannot score fails alone and the others still get their answers."""
        problems = [p for job, a, b in piece for p in job.problems[a:b]]
        steps = [s for job, a, b in piece for s in job.steps[a:b]]
        padded = max(job.lengths[i] for job, a, b in piece for i in range(a, b)) * len(problems)
        start = time.monotonic()
        try:
            scores = self._call(problems, steps)
        except Exception as e:
            if len(piece) == 1:
                self._fail(piece[0], e)
                return
            for part in piece:
                self._score_alone(part)
            return
        except BaseException as e:  # KeyboardInterrupt and the like: tell every caller, stop
            for part in piece:
                self._fail(part, e)
            raise
        self._record(piece, scores, padded, time.monotonic() - start)

    def _score_alone(self, part: tuple[_Job, int, int]) -> None:
        job, a, b = part
        padded = max(job.lengths[a:b]) * (b - a)
        start = time.monotonic()
        try:
            scores = self._call(job.problems[a:b], job.steps[a:b])
        except Exception as e:
            self._fail(part, e)
            return
        self._record([part], scores, padded, time.monotonic() - start)

    def _fail(self, part: tuple[_Job, int, int], error: BaseException) -> None:
        job, _, end = part
        with self._cond:
            if job in self._active:
                self._active.remove(job)
                self._queued -= len(job.problems) - end  # what no piece has taken yet
        if not job.future.done():
            job.future.set_exception(error)

    def _call(self, problems: list[str], steps: list[list[str]]) -> list[list[float | None]]:
        scores = self.score_fn(problems, steps)
        if len(scores) != len(problems):
            raise RuntimeError(f"the PRM returned {len(scores)} score lists for "
                               f"{len(problems)} solutions")
        return scores

    def _record(self, piece: list[tuple[_Job, int, int]], scores: list[list[float | None]],
                padded: int, elapsed: float) -> None:
        """Hand the scores to their jobs (a finished job gets its answer) and measure."""
        finished, at = [], 0
        with self._cond:
            n = len(scores)
            self._seconds_per_solution = 0.8 * self._seconds_per_solution + 0.2 * elapsed / n
            rate = elapsed / max(1, padded)
            self._seconds_per_token = rate if self._seconds_per_token is None else \
                0.7 * self._seconds_per_token + 0.3 * rate
            for job, a, b in piece:
                job.scores += scores[at:at + b - a]
                at += b - a
                job.done, job.served = b, job.served + 1
                if job.done == len(job.problems) and job in self._active:
                    self._active.remove(job)
                    finished.append(job)
            self.stats.groups += 1
            self.stats.jobs += len(finished)
            self.stats.solutions += n
            self.stats.max_group_jobs = max(self.stats.max_group_jobs, len(piece))
        for job in finished:
            if not job.future.done():
                job.future.set_result(job.answer())
