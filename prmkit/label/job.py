"""The resumable labeling job, shared by ``label mc`` and ``label judge``, local or on Ray.

A labeler is a function ``label(records) -> iterator of labelled records`` that yields each
record as soon as it is finished (in any order). :func:`run_job` feeds it the records that are
not finished yet and appends each yielded record to ``OUT.partial``, flushed and fsynced, so a
kill loses at most the records in flight. A rerun of the same command reads ``OUT.partial``,
skips the finished records and labels only the others; at the end ``OUT`` is written in input
order. Because rollouts and judge samples are seeded per (seed, prompt, sample), the records a
rerun labels come out as they would have in an uninterrupted run (bit for bit with exact
backends such as the scripted and lab policies or float32; a bfloat16 model can differ in the
last bits when a record shares its batch with other records than before).

A rerun whose settings differ from those in ``OUT.partial`` (its header, :mod:`prmkit.resume`,
and ``meta[key]`` of its records), or whose records differ from its rows, is refused: labels
made two ways must not be mixed silently. Start again with ``resume=False``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from prmkit.records import Record
from prmkit.resume import Header, Partial, check_resume

Labeler = Callable[[Iterable[Record]], Iterator[Record]]


@dataclass
class JobSummary:
    records: int = 0          # in the input
    resumed: int = 0          # already finished in OUT.partial
    labelled: int = 0         # in this run
    seconds: float = 0.0


def run_job(records: Sequence[Record], label: Labeler, output: str, *, key: str,
            settings: dict[str, Any], resume: bool = True, desc: str = "label",
            progress: bool = True, header: Header | None = None,
            ) -> tuple[list[dict[str, Any]], JobSummary]:
    """Label ``records`` into ``output`` with ``label`` (see the module docstring).

    ``key`` is the ``meta`` entry each labelled record carries its ``settings`` in; ``header``
    is the partial file's (the command's whole identity; by default ``label KEY`` and
    ``settings``). Returns the output rows (input order) and a summary.
    """
    ids = [r.id for r in records]
    fresh = not (resume and os.path.exists(output + ".partial"))
    writer = Partial(output, header or Header(f"label {key}", settings), resume=resume, sync=True)
    done = writer.done_rows()
    given = {r.id: (r.problem, r.steps) for r in records}
    check_resume(output, done, lambda row: given.get(row.get("id")) == (
        row.get("problem"), row.get("steps")), settings,
        stored=lambda row: (row.get("meta") or {}).get(key) or {})
    todo = [r for r in records if r.id not in done]
    summary = JobSummary(records=len(records), resumed=len(records) - len(todo))
    if summary.resumed:
        print(f"resuming: {summary.resumed} of {len(records)} records already labelled",
              file=sys.stderr)
    from prmkit.progress import progress as bar_of

    start = time.perf_counter()
    wanted = set(r.id for r in todo)
    try:
        with bar_of(total=len(records), initial=summary.resumed, desc=desc, unit="rec",
                    disable=None if progress else True) as bar:
            for rec in label(iter(todo)) if todo else ():
                if rec.id not in wanted:
                    raise RuntimeError(f"the labeler returned record {rec.id!r} twice or unasked")
                wanted.discard(rec.id)
                writer.write(rec)
                summary.labelled += 1
                bar.update(1)
    except BaseException:
        if fresh and not summary.labelled:   # failed before any record (e.g. loading the
            writer.discard()                  # model): leave no empty partial file behind
        raise
    summary.seconds = time.perf_counter() - start
    rows = writer.done_rows()
    writer.close(order=ids)
    return [rows[i] for i in ids], summary
