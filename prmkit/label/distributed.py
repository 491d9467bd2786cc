"""Labeling spread over Ray workers, on one machine or many (``--ray auto|local|ADDRESS``).

The driver (the ``prmkit label`` process) starts ``workers`` Ray actors. Each actor loads the
policy once (``make_policy()``, e.g. :func:`prmkit.generate.load.load_policy` with the command's
options, so a vLLM worker holds its model on its GPU for the whole run) and labels the tasks it
is given: ``chunk`` records each, with the same labeling function as a local run (for example
:func:`prmkit.label.mc.label_mc`, which batches the probes of all its records into one generator
call). Every actor has two tasks queued so it never waits for the driver. A task is a Ray
generator: it streams each record back the moment it is finished, and the driver appends it to
the output at once (:func:`prmkit.label.job.run_job`: flushed and fsynced). A killed run loses at
most the records of the queued and running tasks; the rerun skips every finished record.

Addresses: ``auto`` joins the Ray cluster running on this machine (``ray start --head`` on the
head node, ``ray start --address=HEAD:6379`` on the others); ``local`` starts a private Ray
instance for this run (one machine, shut down at the end); anything else is the address of a
cluster (``HOST:6379`` or ``ray://HOST:10001``). prmkit and the policy's dependencies must be
installed on every node. If Ray is already initialised in this process (a notebook, a test),
that instance is used.

Ray is optional: ``pip install 'prmkit[ray]'``.
"""

from __future__ import annotations

import os
from collections import deque
from itertools import islice
from typing import Any, Callable, Iterable, Iterator

from prmkit.errors import PrmkitError
from prmkit.records import Record

PolicyFactory = Callable[[], tuple[Any, Any]]            # () -> (generator, prompter)
LabelFn = Callable[[Iterable[Record], Any, Any], Iterator[Record]]


class _Worker:
    """A Ray actor: holds one policy and labels the records it is sent, streaming them back."""

    def __init__(self, make_policy: PolicyFactory, label_fn: LabelFn):
        self.generator, self.prompter = make_policy()
        self.label_fn = label_fn

    def label(self, rows: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        records = [Record.from_dict(row) for row in rows]
        for rec in self.label_fn(records, self.generator, self.prompter):
            yield rec.to_dict()


def connect(address: str) -> tuple[Any, bool]:
    """The ``ray`` module, initialised for ``address``; and whether this call started it."""
    try:
        import ray
    except ImportError:
        raise PrmkitError("--ray needs Ray: pip install 'prmkit[ray]'") from None
    if ray.is_initialized():
        return ray, False
    try:
        if address == "local":
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False)
        else:
            ray.init(address=address)
    except (ConnectionError, RuntimeError, ValueError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PrmkitError(f"--ray {address}: cannot start or reach Ray ({why})") from None
    return ray, True


def ray_labeler(make_policy: PolicyFactory, label_fn: LabelFn, *, address: str = "auto",
                workers: int = 2, chunk: int = 8, cpus: float = 1.0,
                gpus: float = 0.0) -> Callable[[Iterable[Record]], Iterator[Record]]:
    """A labeler (see :mod:`prmkit.label.job`) that runs ``label_fn`` on Ray workers.

    ``make_policy`` and ``label_fn`` are sent to the workers, so they must pickle (module-level
    functions, :func:`functools.partial` of them). ``cpus`` and ``gpus`` are what each worker
    reserves (``gpus=1`` puts one worker on each GPU).
    """
    if workers < 1 or chunk < 1:
        raise PrmkitError(f"workers and chunk must be positive, got {workers} and {chunk}")

    def label(records: Iterable[Record]) -> Iterator[Record]:
        ray, started = connect(address)
        from ray.exceptions import RayTaskError

        remote = ray.remote(num_cpus=cpus, num_gpus=gpus)(_Worker)
        actors = [remote.remote(make_policy, label_fn) for _ in range(workers)]
        todo = iter(records)
        free = deque(actors * 2)                       # two tasks queued per worker
        running: dict[Any, Any] = {}                   # streaming task -> its actor
        try:
            while True:
                while free:
                    batch = list(islice(todo, chunk))
                    if not batch:
                        break
                    actor = free.popleft()
                    running[actor.label.remote([r.to_dict() for r in batch])] = actor
                if not running:
                    return
                [ready], _ = ray.wait(list(running), num_returns=1)
                try:
                    row = ray.get(next(ready))
                except StopIteration:                  # the task is over: its actor is free
                    free.append(running.pop(ready))
                    continue
                except RayTaskError as e:              # a user error inside a worker
                    if isinstance(e.cause, PrmkitError):
                        raise PrmkitError(str(e.cause)) from None
                    raise
                yield Record.from_dict(row)
        finally:
            for actor in actors:
                ray.kill(actor)
            if started:
                ray.shutdown()

    return label
