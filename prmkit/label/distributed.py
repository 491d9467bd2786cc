"""Labelling spread over Ray workers (``--ray auto|local|ADDRESS``): the labelling side of
:mod:`prmkit.distributed`, which holds the workers, the streaming, the replacement of dead
workers and the addresses.

Each worker loads the policy once (``make_policy()``, e.g. :func:`prmkit.generate.load.load_policy`
with the command's options) and labels the batches of ``chunk`` records it is sent with the same
labelling function as a local run (for example :func:`prmkit.label.mc.label_mc`, which batches the
probes of all its records into one generator call). Each record streams back as it is finished
and :func:`prmkit.label.job.run_job` appends it (flushed and fsynced); a killed run loses at most
the records in flight, and the rerun skips every finished record.

Ray is optional: ``pip install 'prmkit[ray]'``.
"""

from __future__ import annotations

import functools
from itertools import islice
from typing import Any, Callable, Iterable, Iterator

from prmkit.distributed import RayConfig, ray_stream
from prmkit.errors import PrmkitError
from prmkit.records import Record

PolicyFactory = Callable[[], tuple[Any, Any]]            # () -> (generator, prompter)
LabelFn = Callable[[Iterable[Record], Any, Any], Iterator[Record]]


def label_with(label_fn: LabelFn, records: list[Record], policy: tuple[Any, Any]) -> Iterator[Record]:
    """The work of one batch: ``label_fn`` with the worker's (generator, prompter)."""
    generator, prompter = policy
    yield from label_fn(records, generator, prompter)


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
    config = RayConfig(ray=address, workers=workers, worker_cpus=cpus, worker_gpus=gpus)

    def label(records: Iterable[Record]) -> Iterator[Record]:
        todo = iter(records)
        batches = iter(lambda: list(islice(todo, chunk)), [])
        yield from ray_stream(make_policy, functools.partial(label_with, label_fn), batches, config)

    return label
