"""What every evaluation shares: scoring records with a model (with progress, resumable),
reading predictions made elsewhere, printing a table and writing the results as JSON.

Percentages: every metric is a percentage from 0 to 100, written unrounded to JSON and rounded
to one decimal only when printed. A metric that is not defined (no samples to take it over) is
``None`` in Python and ``null`` in JSON, and prints as ``-``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from prmkit.errors import PrmkitError, RecordError
from prmkit.records import Record, atomic_output, iter_jsonl, kind_name


def pct(value: float | None) -> str:
    """A percentage printed with one decimal; ``-`` when undefined."""
    return "-" if value is None else f"{value:.1f}"


def mean_or_none(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def print_table(header: Sequence[str], rows: Iterable[Sequence[Any]], file: Any = None) -> None:
    """A plain fixed-width table: the first column left-aligned, the others right-aligned."""
    rows = [[str(c) for c in row] for row in rows]
    cols = [str(h) for h in header]
    widths = [max([len(cols[i])] + [len(r[i]) for r in rows]) for i in range(len(cols))]

    def line(cells: Sequence[str]) -> str:
        out = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "  ".join(out).rstrip()

    file = file or sys.stdout
    print(line(cols), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in rows:
        print(line(r), file=file)


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically (NaN is refused: undefined values are null)."""
    with atomic_output(path) as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False))
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# predictions made elsewhere


@dataclass
class Prediction:
    """One line of a predictions file: a first error, or step scores, for the record ``id``."""

    id: str
    first_error: int | None = None
    step_scores: list[float | None] | None = None


def read_predictions(path: str, records: Sequence[Record], allow_first_error: bool = True,
                     ) -> dict[str, Prediction]:
    """Predictions for ``records``, checked against them.

    Each line of ``path`` is a JSON object with ``id`` and ``step_scores`` (a list with one
    number or null per step) or, if ``allow_first_error``, ``first_error`` (an int, -1 = no
    error). Other fields are ignored, so a file written by ``prmkit score`` works as it is.
    Every record must have a prediction; lines whose id is not among the records are skipped
    (a predictions file may cover more than the data evaluated).
    """
    steps = {r.id: len(r.steps) for r in records}
    out: dict[str, Prediction] = {}
    lines: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        try:
            pred = _prediction(obj, allow_first_error)
        except RecordError as e:
            raise e.at(path, lineno) from None
        if pred.id not in steps:
            continue
        if pred.id in out:
            raise RecordError(f"duplicate id {pred.id!r} (first seen on line {lines[pred.id]})",
                              path, lineno, "id")
        n = steps[pred.id]
        if pred.step_scores is not None and len(pred.step_scores) != n:
            raise RecordError(f"has {len(pred.step_scores)} entries but record {pred.id!r} has "
                              f"{n} steps", path, lineno, "step_scores")
        if pred.first_error is not None and not -1 <= pred.first_error < n:
            raise RecordError(f"{pred.first_error} is out of range for record {pred.id!r} with "
                              f"{n} steps (-1 = no error)", path, lineno, "first_error")
        out[pred.id] = pred
        lines[pred.id] = lineno
    missing = [r.id for r in records if r.id not in out]
    if missing:
        raise PrmkitError(f"{path}: no prediction for {len(missing)} of {len(records)} records "
                          f"(first: {missing[0]!r})")
    return out


def _prediction(obj: Any, allow_first_error: bool) -> Prediction:
    if not isinstance(obj, dict):
        raise RecordError(f"expected a JSON object, got {kind_name(obj)}")
    if "id" not in obj:
        raise RecordError("missing", field="id")
    rec_id = obj["id"]
    if isinstance(rec_id, bool) or not isinstance(rec_id, (str, int)):
        raise RecordError(f"expected a string, got {kind_name(rec_id)}", field="id")
    scores, first = obj.get("step_scores"), obj.get("first_error")
    if scores is not None:
        if not isinstance(scores, list):
            raise RecordError(f"expected a list, got {kind_name(scores)}", field="step_scores")
        for i, v in enumerate(scores):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not math.isfinite(v)):
                raise RecordError(f"entry {i} is {v!r}, expected a finite number or null",
                                  field="step_scores")
        return Prediction(str(rec_id), step_scores=[None if v is None else float(v) for v in scores])
    if first is not None and allow_first_error:
        if isinstance(first, bool) or not isinstance(first, int):
            raise RecordError(f"expected an integer, got {kind_name(first)}", field="first_error")
        return Prediction(str(rec_id), first_error=first)
    need = "'step_scores' or 'first_error'" if allow_first_error else "'step_scores'"
    raise RecordError(f"missing: each line needs {need}",
                      field="step_scores" if not allow_first_error else None)


# ---------------------------------------------------------------------------------------------
# scoring with a model


def score_with_model(records: list[Record], args: argparse.Namespace, desc: str,
                     share_prefix: bool = False) -> dict[str, Any]:
    """Set ``step_scores`` on every record with the model in ``args``; show progress.

    Returns what to record beside the figures: the model, its step format and the dtype it
    actually ran in. With ``args.save_scores`` the scored records are written as they finish
    and an interrupted run resumes without rescoring them (:func:`prmkit.scoring.score_records`),
    under a header of the evaluation's options (:mod:`prmkit.resume`).
    ``share_prefix``: records of one group are scored on their shared prefix
    (:mod:`prmkit.models.sharing.prefix`); what it computed and saved is recorded and printed.
    """
    import functools

    from prmkit.distributed import ray_config
    from prmkit.models.reading import HFConfig
    from prmkit.resume import Header, args_identity, read_checked
    from prmkit.models.spec import resolve_model
    from prmkit.scoring import model_identity, open_scorer, score_records

    config = HFConfig(dtype=args.dtype, device=args.device, token_budget=args.token_budget,
                      max_length=args.max_length, trust_remote_code=args.trust_remote_code)
    spec = resolve_model(args.model, getattr(args, "backend", "hf"), args.format, None,
                         args.trust_remote_code)
    ray = ray_config(args)
    from prmkit.verify.load import generation_of

    generation, gen_settings = generation_of(args)
    header = Header(f"eval {args.eval_command}",
                    args_identity(args, model=model_identity(args.model)))
    if args.save_scores and not args.no_resume:
        read_checked(args.save_scores, header)   # refused before the model loads
    prm = functools.partial(open_scorer, spec, config, generation)
    if ray is None:
        prm = prm()    # here, before any output (Ray workers open it themselves)
    result = score_records(records, prm, args.save_scores, resume=not args.no_resume, chunk=None,
                           desc=desc, share_prefix=share_prefix, ray=ray, header=header)
    described = result.described or {"format": args.format, "dtype": None}
    info = {"name": args.model, **described, "device": args.device,
            "truncated_solutions": result.truncated}
    from prmkit.verify.prm import GenerativePRM

    if isinstance(result.prm, GenerativePRM):   # its parse rate, tokens and time
        print(result.prm.stats.summary(), file=sys.stderr)
        info["generative"] = {**gen_settings, **vars(result.prm.stats)}
    if result.sharing is not None:
        print(result.sharing.summary(), file=sys.stderr)
        info["prefix_sharing"] = {k: getattr(result.sharing, k) for k in
                                  ("plain", "computed", "saved", "groups", "fallbacks", "partial")}
    return info


def check_model_or_predictions(args: argparse.Namespace) -> None:
    """At most one of --model and --predictions (neither: the default PRM, as on ``prmkit
    score``); with a model, where the scores are saved."""
    if args.model and args.predictions:
        raise PrmkitError("give either --model (to score the data) or --predictions FILE "
                          "(scores made elsewhere), not both")
    if not args.predictions:
        from prmkit.models.pypi import DEFAULT_PRM

        args.model = args.model or DEFAULT_PRM
    if args.model and not args.save_scores and args.output != "-":
        stem = args.output[:-5] if args.output.endswith(".json") else args.output
        args.save_scores = stem + ".scores.jsonl"


def quick_look(records: Sequence[Any], n: int | None) -> list[Any]:
    """``--limit N``: the first N/2 records with an error and the first N/2 without (N odd: one
    more with an error), in file order, so a quick look holds both kinds and has an F1; where
    one kind runs short, more of the other. All of them when ``n`` is None."""
    if n is None:
        return list(records)
    wrong = [i for i, r in enumerate(records) if r.first_error != -1]
    right = [i for i, r in enumerate(records) if r.first_error == -1]
    take_wrong = min(len(wrong), max(n - len(right), (n + 1) // 2))
    keep = set(wrong[:take_wrong]) | set(right[:n - take_wrong])
    return [r for i, r in enumerate(records) if i in keep]
