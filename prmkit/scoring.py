"""Scoring records with a PRM, resumably: what ``prmkit score``, ``prmkit eval`` and the
real-data demo share (:func:`score_records`).

Scored records go to ``OUT.partial`` as they finish and a rerun resumes there, under the header
every resume is checked against (:mod:`prmkit.resume`); the PRM is opened only when something is
left to score. With ``share_prefix`` grouped records are scored in chunks of whole groups on
their shared prefixes (:mod:`prmkit.models.sharing.prefix`); with ``ray``
(:mod:`prmkit.distributed`) the same batches go to Ray workers, ``OUT`` in input order. Ray is
not a setting: a run on workers resumes a local run's partial file and the other way round.
"""

from __future__ import annotations

import functools
import sys
import time
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.base import PRM, StreamingPRM
from prmkit.records import Record, check_output_path
from prmkit.resume import Header, Partial, as_path, read_checked
from prmkit.models.spec import BACKENDS, ModelSpec  # noqa: F401 (BACKENDS: the --backend choices)


WRITTEN_META = ("outcome_score", "verifications")   # what scoring adds to a record's meta


@dataclass
class ScoreResult:
    """What a scoring run did: the PRM it used (None when nothing was left to score), how many
    records were resumed from the partial file, and how many solutions were cut."""

    prm: Any
    resumed: int
    truncated: int
    sharing: Any = None   # prmkit.models.sharing.prefix.ShareStats when prefixes were shared
    described: dict[str, Any] | None = None   # the PRM's format and dtype (describe())
    seconds: float = 0.0  # scoring alone: the loop here, or on Ray first batch start to last end


def open_scorer(spec: ModelSpec, config: Any = None, generation: Any = None) -> Any:
    """The PRM a command scores with, from its spec (:func:`prmkit.models.spec.resolve_model`):
    the opener of :data:`prmkit.models.load.OPENERS` for ``hf`` (a folder, a name, a hub id, a
    ``prmkit serve`` URL) and ``vllm``, and for ``generative`` an instruct model that writes
    its verification (:mod:`prmkit.verify`; ``spec.format_given`` its template, ``generation``
    its :class:`prmkit.verify.prm.GenConfig`)."""
    from prmkit.models.load import open_model

    if spec.opener != "generative":
        return open_model(spec, config)
    from prmkit.verify.load import open_generative
    from prmkit.verify.prm import GenConfig

    fmt = spec.format_given if isinstance(spec.format_given, str) or spec.format_given is None \
        else spec.format_given.name
    return open_generative(spec.given, fmt, generation or GenConfig(), config)


def describe(prm: Any) -> dict[str, Any]:
    """The step format and the dtype ``prm`` actually runs in (None where it does not say)."""
    model = getattr(prm, "model", None)
    engine = getattr(getattr(prm, "llm", None), "llm_engine", None)     # vLLM's
    dtype = getattr(getattr(engine, "model_config", None), "dtype", None)
    if hasattr(model, "parameters"):
        dtype = next(model.parameters()).dtype
    dtype = None if dtype is None else str(dtype).replace("torch.", "")
    return {"format": getattr(getattr(prm, "format", None), "name", None), "dtype": dtype}


def model_identity(model: str | None, token: str | None = None) -> Any:
    """A scoring model as a resume knows it (:mod:`prmkit.resume`): the default PRM by its name,
    a folder by its absolute path, a hub id as given, and a ``prmkit serve`` URL by what the
    server serves (``/health``'s model, format and dtype), so the same model served on another
    port resumes and another model is refused."""
    from prmkit.models.backends.remote import RemotePRM, is_remote
    from prmkit.models.pypi import DEFAULT_PRM, is_default

    if is_default(model):
        return DEFAULT_PRM
    if not is_remote(str(model)):
        return as_path(str(model))
    health = RemotePRM(str(model), token=token).health()
    return {"served": {k: health.get(k) for k in ("model", "format", "dtype")}}


def check_rows(out: str, done: dict[str, dict[str, Any]], records: Sequence[Record]) -> None:
    """Refuse to resume ``out.partial`` when it holds a record that is not one of ``records`` as
    given (apart from its scores)."""
    given = {r.id: r for r in records}
    for rid, row in done.items():
        rec = given.get(rid)
        field = "id" if rec is None else _first_difference(rec, row)
        if field is not None:
            raise PrmkitError(f"{out}.partial holds record {rid!r} {'' if rec else 'not '}in the "
                              f"input{f', with another {field!r}' if rec else ''} (other input "
                              f"records?); use --no-resume to start again")


def _first_difference(rec: Record, row: dict[str, Any]) -> str | None:
    """The first field in which a finished row differs from the input record (its scores
    apart), or None."""
    want = rec.to_dict()
    for name in sorted(set(want) | set(row)):
        a, b = want.get(name), row.get(name)
        if name == "step_scores":
            continue
        if name == "meta":
            a = {k: v for k, v in (a or {}).items() if k not in WRITTEN_META}
            b = {k: v for k, v in (b or {}).items() if k not in WRITTEN_META}
        if a != b:
            return name
    return None


def _restore(rec: Record, row: dict[str, Any] | None, kind: str) -> bool:
    """Take a finished row's scores onto ``rec``; False when the row does not belong to it."""
    if row is None or row.get("steps") != rec.steps:
        return False
    if kind == "orm":
        value = (row.get("meta") or {}).get("outcome_score")
        if value is None:
            return False
        rec.meta["outcome_score"] = value
        return True
    if row.get("step_scores") is None:
        return False
    rec.step_scores = row["step_scores"]
    take_written(rec, row.get("meta") or {})   # a generative PRM's texts and outcome
    return True


def take_written(rec: Record, meta: dict[str, Any]) -> None:
    """What scoring wrote into ``meta`` (:data:`WRITTEN_META`), onto ``rec``."""
    for key in WRITTEN_META:
        if key in meta:
            rec.meta[key] = meta[key]


def score_records(records: Sequence[Record], prm: Any, out: str | None = None, resume: bool = True,
                  *, kind: str = "prm", per_prefix: bool = False, chunk: int | None = 64,
                  desc: str = "score", header: Header | None = None,
                  share_prefix: bool = False, ray: Any = None) -> ScoreResult:
    """Score ``records`` with ``prm`` (a PRM, or a function returning one), writing them to
    ``out`` as they finish when given.

    ``kind`` ``orm`` writes the score of a solution's end to ``meta.outcome_score``;
    ``per_prefix`` uses the slow reference scoring. Records are scored ``chunk`` at a time
    (all at once with None), longest first; a PRM with ``score_iter`` gives each batch of a
    chunk as it ends, and each record is written as it comes.
    ``share_prefix``: records with a ``group`` are scored on their group's shared prefix
    (the module docstring); what it computed and saved is the result's ``sharing``.
    With ``out``, ``header`` (the command and its whole identity, :mod:`prmkit.resume`) is the
    first line of ``OUT.partial``; a resume from a partial written with another header, or from
    other input records (:func:`check_rows`), is refused. ``ray``: score on Ray workers, each
    opening the PRM with ``prm`` (then a function that pickles, e.g. a partial of
    :func:`open_scorer`).
    """
    from prmkit.progress import progress

    if chunk is not None and chunk < 1:
        raise PrmkitError(f"--chunk must be positive, got {chunk}")
    if ray is not None and isinstance(prm, PRM):
        raise ValueError("with ray, prm must be a function that opens the PRM on each worker")
    if out and header is None:
        raise ValueError("a resumable output needs its header (prmkit.resume.Header)")
    done: dict[str, dict[str, Any]] = {}
    if out:
        check_output_path(out)
    if out and header is not None and resume:
        done = read_checked(out, header)  # only reads what is finished
        check_rows(out, done, records)
    todo = [r for r in records if not _restore(r, done.get(r.id), kind)]
    if ray is None and callable(prm) and not isinstance(prm, PRM):
        prm = prm() if todo else None  # opened before any output
    writer = Partial(out, header, resume=resume) if out and header is not None else None
    if len(todo) < len(records):
        print(f"resuming: {len(records) - len(todo)} of {len(records)} records already scored"
              f" in {out}.partial", file=sys.stderr)
    from prmkit.models.sharing.policy import sharing_of
    from prmkit.models.sharing.prefix import ShareStats, has_groups

    share = share_prefix and not per_prefix and has_groups(todo)
    tally = Tally(ShareStats() if share and todo else None)
    if ray is not None:
        stream = _scored_on_ray(prm, todo, per_prefix, chunk, share, ray, tally)
    else:
        if share and prm is not None:
            tally.sharing = ShareStats(off=sharing_of(prm).share or "")
        shared = tally.sharing if tally.sharing is not None and not tally.sharing.off else None
        stream = _scored(prm, todo, per_prefix, chunk, shared)
    start = time.time()
    with progress(total=len(records), initial=len(records) - len(todo), desc=desc,
                  unit="rec") as bar:
        for rec, scores in stream:
            if kind == "orm":  # one score for the whole solution, read at its end
                rec.meta["outcome_score"] = scores[-1]
            else:
                rec.step_scores = scores
            keep_written(prm, rec)
            if writer is not None:
                writer.write(rec)
            bar.update(1)
    seconds = tally.span() if ray is not None else time.time() - start
    if writer is not None:
        writer.close(order=[r.id for r in records])
    truncated = tally.truncated if ray is not None else \
        (prm.stats.truncated_solutions if prm is not None else 0)
    if truncated:
        print(f"warning: {truncated} solutions were longer than the model allows; their last "
              f"steps have null scores", file=sys.stderr)
    described = tally.described if ray is not None else (describe(prm) if prm is not None else None)
    return ScoreResult(prm, len(records) - len(todo), truncated, tally.sharing, described, seconds)


def keep_written(prm: Any, rec: Record) -> None:
    """What a generative PRM wrote when it scored ``rec`` (its verifications' texts, and a
    whole verification's solution-level score, ThinkPRM's P(yes)), kept in ``rec.meta``."""
    from prmkit.verify.prm import GenerativePRM

    if isinstance(prm, GenerativePRM):
        rec.meta["verifications"] = prm.verifications_of(rec.problem, rec.steps)
        outcome = prm.outcome_of(rec.problem, rec.steps)
        if outcome is not None:
            rec.meta["outcome_score"] = outcome


@dataclass
class Tally:
    """What Ray workers report beside their records: prefix sharing, cut solutions, the PRM."""

    sharing: Any = None
    truncated: int = 0
    described: dict[str, Any] | None = None
    times: list[float] = dataclasses.field(default_factory=list)   # batches' starts and ends

    def add(self, note: dict[str, Any]) -> None:
        self.times += note["times"]
        self.truncated += note["truncated"]
        self.described = self.described or note["described"]
        if self.sharing is not None and note["sharing"] is not None:
            self.sharing.add(note["sharing"])

    def span(self) -> float:
        """Seconds from the first batch's start on a worker to the last one's end (one clock
        on one machine; on a cluster, as far as the nodes' clocks agree)."""
        return max(self.times) - min(self.times) if self.times else 0.0


def score_batch(records: list[Record], prm: PRM, per_prefix: bool = False,
                share: bool = False) -> Any:
    """A Ray worker's work (:mod:`prmkit.distributed`): the records of one batch with their
    ``step_scores`` as they finish, scored as one chunk (the batch is one of :func:`batches`),
    then a note for :class:`Tally`."""
    from prmkit.models.sharing.policy import sharing_of
    from prmkit.models.sharing.prefix import ShareStats, has_groups

    sharing = ShareStats(off=sharing_of(prm).share or "") if share and has_groups(records) else None
    before, start = prm.stats.truncated_solutions, time.time()
    for rec, scores in _scored(prm, records, per_prefix, len(records),
                               sharing if sharing is not None and not sharing.off else None):
        rec.step_scores = scores
        keep_written(prm, rec)
        yield rec
    yield {"truncated": prm.stats.truncated_solutions - before, "sharing": sharing,
           "described": describe(prm), "times": [start, time.time()]}


def _scored_on_ray(make_prm: Any, todo: list[Record], per_prefix: bool, chunk: int | None,
                   share: bool, ray: Any, tally: Tally) -> Any:
    """(record, scores) as Ray workers finish them (:func:`score_batch` on :func:`batches`)."""
    if not todo:
        return
    from prmkit.distributed import ray_stream

    given = {r.id: r for r in todo}
    work = functools.partial(score_batch, per_prefix=per_prefix, share=share)
    for rec in ray_stream(make_prm, work, batches(todo, chunk or 64, share), ray, tally.add):
        take_written(given[rec.id], rec.meta)   # what a generative PRM wrote on the worker
        yield given[rec.id], rec.step_scores


def _scored(prm: PRM, todo: list[Record], per_prefix: bool, chunk: int | None,
            sharing: Any) -> Any:
    """(record, scores) as they finish; on shared prefixes when ``sharing`` (its stats)."""
    if not todo:
        return
    if sharing is not None:
        from prmkit.models.sharing.prefix import score_shared

        for part in batches(todo, chunk or 256, True):
            yield from zip(part, score_shared(prm, [r.problem for r in part], [r.steps for r in part],
                                              [r.group for r in part], sharing))
        return
    if not per_prefix and isinstance(prm, StreamingPRM):
        # within a chunk, batches come back as they finish; each is written at once
        for part in batches(todo, chunk, False):
            for i, scores in prm.score_iter([r.problem for r in part], [r.steps for r in part]):
                yield part[i], scores
        return
    score: Callable[..., Any] = prm.score_per_prefix if per_prefix else prm.score
    for part in batches(todo, chunk, False):
        yield from zip(part, score([r.problem for r in part], [r.steps for r in part]))


def batches(records: Sequence[Record], chunk: int | None, groups: bool) -> list[list[Record]]:
    """The chunks ``records`` are scored in: whole groups (:func:`group_chunks`) when
    ``groups``, else longest first across the whole file (tight batches), ``chunk`` at a time
    (all at once when None)."""
    if groups:
        return group_chunks(records, chunk or 256)
    order = sorted(records, key=lambda r: -sum(len(s) for s in r.steps) - len(r.problem))
    step = chunk or len(order) or 1
    return [order[start:start + step] for start in range(0, len(order), step)]


def group_chunks(records: Sequence[Record], chunk: int) -> list[list[Record]]:
    """``records`` in chunks of whole groups (a record without a group is a group of its own),
    the longest groups first, each chunk closed once it holds ``chunk`` records or more."""
    groups: dict[Any, list[Record]] = {}
    for i, r in enumerate(records):
        groups.setdefault(("g", r.group) if r.group is not None else ("r", i), []).append(r)
    order = sorted(groups.values(), key=lambda g: -sum(sum(len(s) for s in r.steps) + len(r.problem)
                                                       for r in g) / len(g))
    chunks: list[list[Record]] = [[]]
    for g in order:
        if len(chunks[-1]) >= chunk:
            chunks.append([])
        chunks[-1].extend(g)
    return [c for c in chunks if c]
