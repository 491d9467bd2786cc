"""``prmkit lab``: the lab world, its exact labels, and the experiments that measure the papers'
claims in it.

    prmkit lab problems --n 50 --min-steps 2 --max-steps 5 --seed 0 --output problems.jsonl
    prmkit lab gold --input candidates.jsonl --output gold.jsonl
    prmkit lab trace-error --output runs/trace
    prmkit lab active-learning --output runs/active
    prmkit lab rl --output runs/rl
    prmkit lab compute-optimal --output runs/co

``problems`` writes records like a converted GSM8K file (problem, reference, the reference
solution as steps), ready for ``prmkit generate``, ``search`` or ``label``. ``gold`` sets exact
``labels`` and ``first_error`` on every record (:func:`prmkit.world.problems.gold_labels`); a record
whose problem is not a lab problem is an error naming its line.

Each experiment is a resumable job that writes ``summary.json`` with its claims (YES or NO, with
paired 95% bootstrap intervals) and a report; ``docs/lab.md`` lists them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Any

from prmkit.errors import PrmkitError, RecordError

# (subcommand, module under prmkit.lab, its config class, one line of help); each experiment
# is a folder whose `run` module holds the job
EXPERIMENTS = [
    ("trace-error", "traceerror.run", "TraceErrorConfig",
     "process against outcome supervision: trace errors (Uesato et al. 2022)"),
    ("active-learning", "activelearning.run", "ActiveLearningConfig",
     "label efficiency of convincing wrong answers (Lightman et al. 2023)"),
    ("rl", "rl.run", "LabRLConfig",
     "RL with outcome, step and PRM-only rewards on a learnable lab policy (Math-Shepherd; "
     "reward hacking)"),
    ("compute-optimal", "computeoptimal.run", "ComputeOptimalConfig",
     "compute-optimal search by difficulty against best-of-N (Snell et al. 2024)"),
    ("verifier-labels", "verifierlabels.run", "VerifierLabelsConfig",
     "a generative verifier on k problems' labels against PRMs on k and more (ThinkPRM, "
     "Khalifa et al. 2025)"),
]


def add_lab(sub: Any) -> None:
    from prmkit.cliutil import Formatter
    from prmkit.world.problems import LabConfig

    p = sub.add_parser("lab", help="the lab world: synthetic problems with exact step labels, "
                       "and the experiments on the papers' claims", description=__doc__,
                       formatter_class=Formatter)
    names = ", ".join(name for name, *_ in EXPERIMENTS)
    lab = p.add_subparsers(dest="lab_command", metavar="LAB_COMMAND",
                           help=f"problems, gold, or an experiment: {names}")
    prob = lab.add_parser("problems", help="write lab problems (prmkit JSONL)",
                          formatter_class=Formatter)
    for f in fields(LabConfig):
        prob.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default,
                          help=f.metadata["help"])
    prob.add_argument("--output", required=True, help="where to write the problems")
    prob.set_defaults(run=_run_problems)
    gold = lab.add_parser("gold", help="label solutions of lab problems with their exact labels",
                          formatter_class=Formatter)
    gold.add_argument("--input", required=True, help="records whose problems are lab problems")
    gold.add_argument("--output", required=True, help="the records with gold labels and first_error")
    gold.set_defaults(run=_run_gold)
    for name, module, config, help in EXPERIMENTS:
        _add_experiment(lab, name, module, config, help)
    p.set_defaults(run=lambda args: (p.print_help(), 2)[1])


def _add_experiment(lab: Any, name: str, module: str, config: str, help: str) -> None:
    """One experiment: its options from its config dataclass, its description from its module."""
    import importlib

    from prmkit.cliutil import Formatter, add_config_options, config_from_args

    mod = importlib.import_module(f"prmkit.lab.{module}")
    cls = getattr(mod, config)
    p = lab.add_parser(name, help=help, description=getattr(mod, "DESCRIPTION", mod.__doc__),
                       formatter_class=Formatter)
    add_config_options(p, cls)
    p.set_defaults(run=lambda args: mod.run(config_from_args(cls, args)))


def _run_problems(args: argparse.Namespace) -> int:
    from prmkit.world.problems import LabConfig, make_problems
    from prmkit.records import write_records

    config = LabConfig(n=args.n, min_steps=args.min_steps, max_steps=args.max_steps,
                       max_value=args.max_value, seed=args.seed)
    n = write_records(args.output, make_problems(config))
    print(f"wrote {n} lab problems to {args.output}", file=sys.stderr)
    return 0


def _run_gold(args: argparse.Namespace) -> int:
    from prmkit.world.problems import gold_record
    from prmkit.records import iter_jsonl, Record, write_records

    out = []
    for line, obj in iter_jsonl(args.input):
        try:
            out.append(gold_record(Record.from_dict(obj)))
        except RecordError as e:
            raise e.at(args.input, line) from None
        except PrmkitError as e:
            raise RecordError(str(e), field="problem").at(args.input, line) from None
    wrong = sum(r.first_error is not None and r.first_error >= 0 for r in out)
    write_records(args.output, out)
    print(f"labelled {len(out)} records ({wrong} with a wrong step) -> {args.output}",
          file=sys.stderr)
    return 0

