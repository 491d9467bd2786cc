"""``prmkit train prm`` and ``prmkit train orm``: options come from the typed configs, so each
option's help is the config field's help."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import types
import typing
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.train.loop import LoopConfig


def _option_type(tp: Any) -> tuple[Any, bool]:
    """(python type, optional) of a dataclass field annotation such as ``int | None``."""
    args = typing.get_args(tp)
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return inner[0], True
    return tp, False


def add_config_options(parser: argparse.ArgumentParser, cls: Any, skip: tuple[str, ...] = ()) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name in ("loop", "command"):
            continue
        tp, optional = _option_type(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        help_text = f.metadata.get("help", "")
        if tp is bool:
            default = f.default
            if default:
                parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name,
                                    action="store_false", help=f"do not: {help_text}")
            else:
                parser.add_argument(flag, dest=f.name, action="store_true", help=help_text)
            continue
        parser.add_argument(flag, dest=f.name, type=tp, required=required,
                            default=None if required else f.default,
                            help=help_text + (" (optional)" if optional else ""))


def config_from_args(cls: Any, args: argparse.Namespace, **extra: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in vars(args).items() if k in names and k not in extra}
    return cls(**values, **extra)


def add_train(sub: Any) -> None:
    from prmkit.train.implicit import ImplicitTrainConfig
    from prmkit.train.orm import ORMTrainConfig
    from prmkit.train.prm import PRMTrainConfig

    p = sub.add_parser("train", help="train a PRM or an ORM",
                       description="Train a process (prm) or outcome (orm) reward model. Run "
                                   "`prmkit train prm --help` for the options.")
    kinds = p.add_subparsers(dest="kind", metavar="KIND",
                             help="prm (step labels), orm (outcome labels or pairs), or "
                                  "implicit-prm (a PRM from outcome labels only)")
    docs = {"prm": "prmkit.train.prm", "orm": "prmkit.train.orm",
            "implicit-prm": "prmkit.train.implicit"}
    for kind, cls in (("prm", PRMTrainConfig), ("orm", ORMTrainConfig),
                      ("implicit-prm", ImplicitTrainConfig)):
        module = sys.modules.get(docs[kind]) or __import__(docs[kind], fromlist=["x"])
        k = kinds.add_parser(kind, help=(module.__doc__ or "").strip().splitlines()[0],
                             description=module.__doc__, formatter_class=_Raw)
        add_config_options(k, cls)
        loop = k.add_argument_group("optimisation (shared by the trainers)")
        add_config_options(loop, LoopConfig)
        k.set_defaults(run=_run_train, config_class=cls)
    p.set_defaults(run=lambda args: _no_kind(p))


class _Raw(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def _no_kind(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _run_train(args: argparse.Namespace) -> int:
    loop = config_from_args(LoopConfig, args)
    command = "prmkit " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    cfg = config_from_args(args.config_class, args, loop=loop, command=command)
    if args.kind == "prm":
        from prmkit.train.prm import train_prm as run
    elif args.kind == "implicit-prm":
        from prmkit.train.implicit import train_implicit as run
    else:
        from prmkit.train.orm import train_orm as run
    history = run(cfg)
    from accelerate import PartialState

    if not PartialState().is_main_process:  # under accelerate launch, rank 0 reports
        return 0
    if not history:
        raise PrmkitError("training ran no step")
    last = history[-1]
    print(f"trained {last['step']} steps; last validation: " + ", ".join(
        f"{k}={v}" for k, v in last.items() if k not in ("step", "epoch")))
    print(f"model folders: {cfg.output}/best, {cfg.output}/last; "
          f"metrics: {cfg.output}/metrics.jsonl")
    return 0


def add_select_for_labeling(sub: Any) -> None:
    from prmkit.train import active

    p = sub.add_parser("select-for-labeling", help="pick convincing wrong-answer solutions to label",
                       description=active.__doc__, formatter_class=_Raw)
    p.add_argument("--input", required=True, help="candidate records (prmkit JSONL) with "
                   "is_correct, or answer and reference")
    p.add_argument("--k", type=int, required=True, help="how many solutions to pick")
    p.add_argument("--model", default=None, help="PRM to score candidates that have no "
                   "step_scores (default: use the step_scores in the input)")
    p.add_argument("--format", default=None, help="step format, if the model folder has none")
    p.add_argument("--by", default="prod", choices=["prod", "min", "last", "mean", "geomean"],
                   help="how step scores are aggregated into the solution's score")
    p.add_argument("--per-problem", type=int, default=None,
                   help="at most this many picks per problem (group)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="scoring dtype (auto = bfloat16)")
    p.add_argument("--output", required=True, help="the chosen records, best first")
    p.set_defaults(run=_run_select_for_labeling)


def _run_select_for_labeling(args: argparse.Namespace) -> int:
    from prmkit.records import read_records, write_records
    from prmkit.train.active import convincing_wrong

    records = read_records(args.input)
    todo = [r for r in records if r.step_scores is None]
    if todo and args.model:
        from prmkit.models.hf import HFConfig, load_hf_prm

        prm = load_hf_prm(args.model, args.format, HFConfig(dtype=args.dtype))
        for r, s in zip(todo, prm.score([r.problem for r in todo], [r.steps for r in todo])):
            r.step_scores = s
    chosen = convincing_wrong(records, args.k, args.by, args.per_problem)
    write_records(args.output, chosen)
    print(f"picked {len(chosen)} convincing wrong-answer solutions of {len(records)} "
          f"candidates -> {args.output}")
    return 0
