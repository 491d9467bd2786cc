"""``prmkit train prm`` and ``prmkit train orm``: options come from the typed configs, so each
option's help is the config field's help."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from prmkit.cliutil import AGGREGATE_CHOICES, Formatter, add_config_options, add_dtype_option, \
    config_from_args
from prmkit.errors import PrmkitError
from prmkit.models.reading import TRAIN_DTYPES
from prmkit.train.loop import NoExamples

NO_EXAMPLES = {  # what a trainer needs of a record, when it found none
    "prm": "no record has a labelled step (labels or first_error) within --max-length",
    "orm": "no record has is_correct (and, for pairwise, a correct and a wrong solution in a "
           "group) within --max-length",
    "implicit-prm": "no record has is_correct within --max-length",
    "verifier": "no record gave a verification chain (step labels up to the first wrong step, "
                "within --max-length; with --chains teacher, one the teacher got right)"}


def add_train(sub: Any) -> None:
    from prmkit.train.implicit import ImplicitTrainConfig
    from prmkit.train.orm import ORMTrainConfig
    from prmkit.train.prm import PRMTrainConfig
    from prmkit.train.verifier import VerifierTrainConfig

    p = sub.add_parser("train", help="train a PRM, an ORM or a generative verifier",
                       description="Train a process (prm) or outcome (orm) reward model, or a "
                                   "generative verifier (verifier). Run `prmkit train prm "
                                   "--help` for the options.")
    kinds = p.add_subparsers(dest="kind", metavar="KIND",
                             help="prm (step labels), orm (outcome labels or pairs), "
                                  "implicit-prm (a PRM from outcome labels only), or verifier "
                                  "(a generative PRM from step labels)")
    docs = {"prm": "prmkit.train.prm", "orm": "prmkit.train.orm",
            "implicit-prm": "prmkit.train.implicit", "verifier": "prmkit.train.verifier"}
    for kind, cls in (("prm", PRMTrainConfig), ("orm", ORMTrainConfig),
                      ("implicit-prm", ImplicitTrainConfig), ("verifier", VerifierTrainConfig)):
        module = sys.modules.get(docs[kind]) or __import__(docs[kind], fromlist=["x"])
        k = kinds.add_parser(kind, help=(module.__doc__ or "").strip().splitlines()[0],
                             description=module.__doc__, formatter_class=Formatter)
        add_config_options(k, cls)  # the loop's options in their own group
        k.set_defaults(run=_run_train, config_class=cls)
    p.set_defaults(run=lambda args: _no_kind(p))


def _no_kind(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _run_train(args: argparse.Namespace) -> int:
    command = "prmkit " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    cfg = config_from_args(args.config_class, args, command=command)
    if os.path.exists(cfg.output) and not os.path.isdir(cfg.output):
        raise PrmkitError(f"--output {cfg.output}: is a file; the output is a folder (best/, "
                          f"last/, metrics.jsonl)")
    if args.kind == "prm":
        from prmkit.train.prm import train_prm as run
    elif args.kind == "implicit-prm":
        from prmkit.train.implicit import train_implicit as run
    elif args.kind == "verifier":
        from prmkit.train.verifier import train_verifier as run
    else:
        from prmkit.train.orm import train_orm as run
    try:
        history = run(cfg)
    except NoExamples:
        raise PrmkitError(f"{cfg.data}: {NO_EXAMPLES[args.kind]}") from None
    from accelerate import PartialState

    if not PartialState().is_main_process:  # under accelerate launch, rank 0 reports
        return 0
    if not history:
        raise PrmkitError("training ran no step")
    for line in outcome_lines(history, cfg.output):
        print(line)
    if args.kind == "verifier":
        print(f"verifier: {cfg.output} (its best checkpoint; score --backend generative --model "
              f"{cfg.output}); metrics: {cfg.output}/metrics.jsonl")
    else:
        print(f"model folders: {cfg.output}/best, {cfg.output}/last; "
              f"metrics: {cfg.output}/metrics.jsonl")
    return 0


def outcome_lines(history: list[dict[str, Any]], output: str) -> list[str]:
    """What a finished run says: its last step's training loss and dev metrics, each by its
    name, and one more line when the training loss is not below the best constant predictor's
    (``OUTPUT/untrained.json``): then the model learnt nothing it could not guess."""
    import json

    last = history[-1]
    loss = last.get("train_loss")
    dev = {k: v for k, v in last.items() if k.startswith("dev_")}
    lines = [f"trained {last['step']} steps; training loss at the end {loss}"
             + (("; dev " + ", ".join(f"{k[4:]}={v}" for k, v in dev.items())) if dev
                else " (no dev data)")]
    path = os.path.join(output, "untrained.json")
    constant = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            constant = json.load(f).get("constant_loss")
    if constant is not None and loss is not None and loss >= constant:
        lines.append(f"note: the training loss {loss} is not below {constant}, the loss of "
                     f"always predicting the labels' base rate: the model learnt nothing it "
                     f"could not guess (more records, more steps or another --lr)")
    return lines


def add_select_for_labeling(sub: Any) -> None:
    from prmkit.train import active

    p = sub.add_parser("select-for-labeling", help="pick convincing wrong-answer solutions to label",
                       description=active.__doc__, formatter_class=Formatter)
    p.add_argument("--input", required=True, help="candidate records (prmkit JSONL) with "
                   "is_correct, or answer and reference")
    p.add_argument("--k", type=int, required=True, help="how many solutions to pick")
    p.add_argument("--model", default=None, help="PRM to score candidates that have no "
                   "step_scores (default: use the step_scores in the input)")
    p.add_argument("--format", default=None, help="step format, if the model folder has none")
    p.add_argument("--by", default="prod", choices=AGGREGATE_CHOICES,
                   help="how step scores are aggregated into the solution's score")
    p.add_argument("--per-problem", type=int, default=None,
                   help="at most this many picks per problem (group)")
    add_dtype_option(p, help="scoring dtype (auto = bfloat16 where native, else float32)",
                     choices=("auto", *TRAIN_DTYPES))
    p.add_argument("--output", required=True, help="the chosen records, best first")
    p.set_defaults(run=_run_select_for_labeling)


def _run_select_for_labeling(args: argparse.Namespace) -> int:
    from prmkit.formats.detect import read_records
    from prmkit.records import write_records
    from prmkit.train.active import convincing_wrong

    records = read_records(args.input)
    todo = [r for r in records if r.step_scores is None]
    if todo and args.model:
        from prmkit.models.load import load_prm
        from prmkit.models.reading import HFConfig

        prm = load_prm(args.model, args.format, HFConfig(dtype=args.dtype))
        for r, s in zip(todo, prm.score([r.problem for r in todo], [r.steps for r in todo])):
            r.step_scores = s
    chosen = convincing_wrong(records, args.k, args.by, args.per_problem)
    write_records(args.output, chosen)
    print(f"picked {len(chosen)} convincing wrong-answer solutions of {len(records)} "
          f"candidates -> {args.output}")
    return 0
