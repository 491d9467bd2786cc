"""``prmkit label``: automatic step labels (Monte Carlo rollouts, an LLM judge, their consensus).

    prmkit label mc --policy P --input solutions.jsonl --rollouts 8 --strategy binary --output mc.jsonl
    prmkit label judge --judge M --input solutions.jsonl --output judge.jsonl
    prmkit label consensus --mc mc.jsonl --judge judge.jsonl --output agreed.jsonl
    prmkit label quality --gold gold.jsonl mc.jsonl judge.jsonl agreed.jsonl

``mc`` and ``judge`` are long jobs: they show progress, append each record to OUT.partial as it
is finished (fsynced), and a rerun of the same command resumes there. With ``--ray`` the
records are spread over Ray workers (:mod:`prmkit.distributed`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any, Callable, Iterable, Iterator

from prmkit.cliutil import Formatter, add_config_options
from prmkit.errors import PrmkitError, RecordError
from prmkit.label.job import Labeler
from prmkit.formats.detect import read_records
from prmkit.records import Record, iter_jsonl
from prmkit.resume import Header, add_outside, args_identity, resumable


def add_label(sub: Any) -> None:
    from prmkit.label import consensus, judge, mc, quality

    p = sub.add_parser("label", help="label steps automatically: Monte Carlo, judge, consensus",
                       description=__doc__, formatter_class=Formatter)
    kinds = p.add_subparsers(dest="label_command", metavar="METHOD",
                             help="mc (rollouts), judge (an LLM critic), consensus, quality")
    _add_mc(kinds, mc)
    _add_judge(kinds, judge)
    _add_consensus(kinds, consensus)
    _add_quality(kinds, quality)
    p.set_defaults(run=lambda args: (p.print_help(), 2)[1])


def _add_common(p: argparse.ArgumentParser) -> None:
    from prmkit.distributed import RayConfig
    from prmkit.generate.cli import add_policy_options

    # the input records are checked one by one against OUT.partial's, not by their path
    add_outside(p, "--input", required=True, help="solutions to label (prmkit JSONL)")
    add_outside(p, "--output", required=True, help="where to write the labelled records")
    p.add_argument("--limit", type=int, default=None, help="only the first N records")
    add_policy_options(p)
    add_config_options(p, RayConfig, mark_optional=False)
    add_outside(p, "--no-resume", action="store_true",
                help="ignore OUT.partial from an earlier run and start again")
    resumable(p)


def _add_mc(kinds: Any, mc: Any) -> None:
    from prmkit.generate.cli import POLICY_HELP
    from prmkit.steps import RULES

    h = mc.MCConfig.__dataclass_fields__
    p = kinds.add_parser("mc", help="Monte Carlo rollouts (Math-Shepherd), binary search (OmegaPRM)",
                         description=mc.__doc__, formatter_class=Formatter)
    p.add_argument("--policy", required=True, help=POLICY_HELP)
    p.add_argument("--rollouts", type=int, default=8, help=h["rollouts"].metadata["help"])
    p.add_argument("--mode", default="hard", choices=mc.MODES, help=h["mode"].metadata["help"])
    p.add_argument("--strategy", default="per-step", choices=mc.STRATEGIES,
                   help=h["strategy"].metadata["help"])
    p.add_argument("--threshold", type=float, default=0.0, help=h["threshold"].metadata["help"])
    p.add_argument("--last-step", default="auto", choices=mc.LAST_STEP,
                   help=h["last_step"].metadata["help"])
    p.add_argument("--max-tokens", type=int, default=512, help=h["max_tokens"].metadata["help"])
    p.add_argument("--temperature", type=float, default=0.7, help=h["temperature"].metadata["help"])
    p.add_argument("--top-p", type=float, default=1.0, help=h["top_p"].metadata["help"])
    p.add_argument("--seed", type=int, default=0, help=h["seed"].metadata["help"])
    add_outside(p, "--chunk", type=int, default=8, help=h["chunk"].metadata["help"])
    p.add_argument("--step-rule", default=None, choices=[r for r in RULES if r != "auto"],
                   help="how the steps of a prefix are joined in the policy's prompt; default: "
                        "the rule the prompt style teaches")
    _add_common(p)
    p.set_defaults(run=_run_mc)


def _add_judge(kinds: Any, judge: Any) -> None:
    h = judge.JudgeConfig.__dataclass_fields__
    p = kinds.add_parser("judge", help="an LLM judge names the first wrong step (ProcessBench "
                                       "critic)", description=judge.__doc__,
                         formatter_class=Formatter)
    p.add_argument("--judge", required=True,
                   help="the judge model: a default model name, model folder, hub id, .gguf file "
                        "(llamacpp) or the model name on an OpenAI-compatible server (--backend "
                        "openai --base-url URL)")
    p.add_argument("--samples", type=int, default=1, help=h["samples"].metadata["help"])
    p.add_argument("--max-tokens", type=int, default=1024, help=h["max_tokens"].metadata["help"])
    p.add_argument("--temperature", type=float, default=0.0, help=h["temperature"].metadata["help"])
    p.add_argument("--top-p", type=float, default=1.0, help=h["top_p"].metadata["help"])
    p.add_argument("--seed", type=int, default=0, help=h["seed"].metadata["help"])
    add_outside(p, "--chunk", type=int, default=8, help=h["chunk"].metadata["help"])
    _add_common(p)
    p.set_defaults(run=_run_judge, step_rule=None)


def _add_consensus(kinds: Any, consensus: Any) -> None:
    p = kinds.add_parser("consensus", help="keep the records where MC labels and the judge agree",
                         description=consensus.__doc__, formatter_class=Formatter)
    p.add_argument("--mc", required=True, help="records labelled by `prmkit label mc`")
    p.add_argument("--judge", required=True, help="records labelled by `prmkit label judge`")
    p.add_argument("--output", required=True, help="where to write the kept records")
    p.add_argument("--labels", default="first-error", choices=consensus.LABELS,
                   help="labels of a kept record: from the agreed first error, or the MC labels")
    p.set_defaults(run=_run_consensus)


def _add_quality(kinds: Any, quality: Any) -> None:
    p = kinds.add_parser("quality", help="compare labels with gold labels",
                         description=quality.__doc__, formatter_class=Formatter)
    p.add_argument("--gold", required=True,
                   help="records with gold labels or first_error (same ids), or `lab` for the "
                        "lab world's exact labels")
    p.add_argument("--output", default=None, help="also write the report as JSON here")
    p.add_argument("labels", nargs="+", metavar="LABELS", help="labelled records (one or more files)")
    p.set_defaults(run=_run_quality)


# ---------------------------------------------------------------------------------------------


def read_input(path: str, limit: int | None = None, need_reference: bool = False) -> list[Record]:
    """The records to label; a record without a reference is an error naming its line."""
    if limit is not None and limit < 1:
        raise PrmkitError(f"--limit must be positive, got {limit}")
    records = read_records(path)[:limit]
    if not records:
        raise PrmkitError(f"{path}: no records")
    for index, rec in enumerate(records):
        if need_reference and not (rec.reference or "").strip():
            line = next(line for i, (line, _) in enumerate(iter_jsonl(path)) if i == index)
            raise RecordError("missing: Monte Carlo labels need the known final answer",
                              path, line, "reference")
    return records


def _labeler(args: argparse.Namespace, name: str, label_fn: Callable[..., Iterator[Record]],
             chunk: int) -> Labeler:
    """Run ``label_fn`` here (loading the model when there is work) or on Ray workers."""
    from prmkit.generate.cli import load_policy, policy_options

    make_policy = functools.partial(load_policy, name, **policy_options(args))
    if args.ray:
        from prmkit.label.distributed import ray_labeler

        return ray_labeler(make_policy, label_fn, address=args.ray, workers=args.workers,
                           chunk=chunk, cpus=args.worker_cpus, gpus=args.worker_gpus)

    def local(records: Iterable[Record]) -> Iterator[Record]:
        generator, prompter = make_policy()
        yield from label_fn(records, generator, prompter)

    return local


def _run_mc(args: argparse.Namespace) -> int:
    from prmkit.label.job import run_job
    from prmkit.label.mc import MCConfig, check_some_signal, label_mc

    config = MCConfig(rollouts=args.rollouts, mode=args.mode, strategy=args.strategy,
                      threshold=args.threshold, last_step=args.last_step,
                      max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                      seed=args.seed, chunk=args.chunk)
    records = read_input(args.input, args.limit, need_reference=True)
    label_fn = functools.partial(label_mc, config=config, policy=args.policy)
    rows, summary = run_job(records, _labeler(args, args.policy, label_fn, config.chunk),
                            args.output, key="mc", settings=config.settings(args.policy),
                            resume=not args.no_resume, desc="label mc",
                            header=Header("label mc", args_identity(args)))
    spent = sum(r["meta"]["mc"]["rollouts_spent"] for r in rows)
    wrong = sum(r["first_error"] >= 0 for r in rows)
    print(f"labelled {len(rows)} records ({summary.resumed} resumed; {args.strategy}, "
          f"{args.mode}, K={args.rollouts}): {wrong} with a first error, {len(rows) - wrong} all "
          f"right; {spent} rollouts ({spent / len(rows):.1f} per record) -> {args.output}",
          file=sys.stderr)
    check_some_signal(rows, args.input)
    return 0


def _run_judge(args: argparse.Namespace) -> int:
    from prmkit.label.job import run_job
    from prmkit.label.judge import JudgeConfig, label_judge

    config = JudgeConfig(samples=args.samples, max_tokens=args.max_tokens,
                         temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                         chunk=args.chunk)
    records = read_input(args.input, args.limit)
    label_fn = functools.partial(label_judge, config=config, judge=args.judge)
    rows, summary = run_job(records, _labeler(args, args.judge, label_fn, config.chunk),
                            args.output, key="judge", settings=config.settings(args.judge),
                            resume=not args.no_resume, desc="label judge",
                            header=Header("label judge", args_identity(args)))
    verdicts = [r.get("first_error") for r in rows]
    bad = sum(r["meta"]["judge"]["unparseable"] for r in rows)
    known = [v for v in verdicts if v is not None]
    print(f"judged {len(rows)} records ({summary.resumed} resumed): {len(known)} with a verdict "
          f"({sum(v >= 0 for v in known)} with an error, {sum(v == -1 for v in known)} all right), "
          f"{len(rows) - len(known)} without; {bad} of {len(rows) * config.samples} outputs "
          f"unparseable -> {args.output}", file=sys.stderr)
    return 0


def _run_consensus(args: argparse.Namespace) -> int:
    from prmkit.label.consensus import consensus
    from prmkit.records import write_records

    kept, summary = consensus(read_records(args.mc), read_records(args.judge), args.labels)
    write_records(args.output, kept)
    print(f"consensus: {summary.line()} -> {args.output}")
    return 0


def _run_quality(args: argparse.Namespace) -> int:
    from prmkit.evaluate.common import write_json
    from prmkit.label.quality import label_quality, print_quality

    labelled = [(path, read_records(path)) for path in args.labels]
    if args.gold == "lab":
        from prmkit.world import gold_record

        gold: dict[str, Record] = {}
        for _, recs in labelled:
            for rec in recs:
                if rec.id not in gold:
                    try:
                        gold[rec.id] = gold_record(Record.from_dict(rec.to_dict()))
                    except PrmkitError as e:
                        raise PrmkitError(f"record {rec.id!r}: {e}") from None
    else:
        gold = {r.id: r for r in read_records(args.gold)}
    rows = []
    for path, recs in labelled:
        for q in label_quality(recs, gold):
            if len(labelled) > 1:
                q.method = f"{path}: {q.method}"
            rows.append(q)
    print_quality(rows)
    if args.output:
        write_json(args.output, {"gold": args.gold, "rows": [q.to_dict() for q in rows]})
    return 0
