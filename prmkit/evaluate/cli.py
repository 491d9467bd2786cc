"""``prmkit eval``: processbench, prmbench, steps, bestofn. A thin layer over the library.

Every evaluation writes its results as JSON (``--output``), prints a table with the baselines
beside the model, and shows progress while a model scores. With a model, the scores it saves
resume after a kill (:mod:`prmkit.resume`): every option is in their identity but those marked
``add_outside``, which only the results read (or which name the data, whose records are
checked one by one).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from prmkit.cliutil import (AGGREGATE_CHOICES, Formatter, add_model_options, add_model_run_options,
                            add_scale_options)
from prmkit.errors import PrmkitError
from prmkit.resume import add_outside, resumable


def _sub(sub: Any, name: str, help: str, doc: str | None, intro: str) -> argparse.ArgumentParser:
    body = (doc or "").strip()
    return sub.add_parser(name, help=help, description=intro + "\n\n" + body,
                          formatter_class=Formatter)


def add_eval(sub: Any) -> None:
    """Add ``prmkit eval`` and its four sub-commands to the top-level subparsers."""
    p = sub.add_parser("eval", help="evaluate a PRM: ProcessBench, PRMBench, step metrics, "
                       "best-of-N curves", formatter_class=Formatter,
                       description="Evaluate a process reward model. Every evaluation writes "
                       "JSON, prints a table with baselines that no model needs beside the "
                       "model's figures, and shows progress while a model scores.")
    evals = p.add_subparsers(dest="eval_command", metavar="BENCHMARK",
                             help="run `prmkit eval BENCHMARK --help` for its options")
    p.set_defaults(run=lambda args: _missing(p))
    _add_processbench(evals)
    _add_prmbench(evals)
    _add_steps(evals)
    _add_bestofn(evals)


def _add_processbench(evals: Any) -> None:
    from prmkit.evaluate import processbench
    q = _sub(evals, "processbench", "first-error identification (ProcessBench)",
             processbench.__doc__, "Score ProcessBench solutions with a PRM (or read predictions "
             "made elsewhere) and report error_acc, correct_acc and F1 per split. Beside the "
             "model, what no model needs: always -1 (F1 0), a random first error (uniform over "
             "-1 and the steps, mean of --random-draws seeded draws), and a logistic regression "
             "on step position and length (prmkit.evaluate.heuristic), fitted and "
             "threshold-tuned on --heuristic-train, else on the --calibrate-on split, else on "
             "the other splits (leave one split out), else in-sample. A line says so when the "
             "model does not beat that heuristic.")
    add_outside(q, "--data", required=True,
                help="a folder with gsm8k.json, math.json, olympiadbench.json, omnimath.json "
                     "(as shipped), or one such file")
    q.add_argument("--limit", type=int, default=None, metavar="N",
                   help="a quick look: N solutions of each split, the first N/2 with an error "
                        "and the first N/2 without, in file order")
    add_model_args(q, default_prm=True)
    add_outside(q, "--predictions", default=None, metavar="FILE",
                help="JSONL with id and first_error (int) or step_scores (list) per sample, "
                     "instead of --model (e.g. the output of `prmkit score`)")
    t = q.add_mutually_exclusive_group()
    add_outside(t, "--threshold", type=float, default=None,
                help="a step scored below this is the predicted first error; default: the "
                     "threshold saved with --model (prmkit_threshold.json; the default PRM "
                     "has one), else 0.5")
    add_outside(t, "--calibrate-on", default=None, metavar="SPLIT",
                help="instead, use the threshold that maximises F1 on this split (e.g. gsm8k)")
    add_outside(q, "--heuristic-train", default=None, metavar="FILE",
                help="labelled records to fit the position/length heuristic on: prmkit JSONL "
                     "with labels or first_error, or ProcessBench .json / folder. Default: "
                     "the calibration split, else leave one split out.")
    add_outside(q, "--random-draws", type=int, default=100,
                help="draws of the random baseline (its figures are the mean)")
    add_outside(q, "--seed", type=int, default=0, help="seed of the random baseline")
    add_outside(q, "--output", required=True, help="results JSON")
    q.set_defaults(run=_run_processbench)
    resumable(q)


def _add_prmbench(evals: Any) -> None:
    from prmkit.evaluate import prmbench
    q = _sub(evals, "prmbench", "step-level error detection per category (PRMBench)",
             prmbench.__doc__, "Score PRMBench solutions (modified_process only) and report "
             "PRMScore per error category, per group and overall, exactly as PRMBench defines "
             f"it: {prmbench.PAPER}; definition from {prmbench.SOURCE}.")
    add_outside(q, "--data", required=True,
                help="a PRMBench .jsonl file or a folder of them (one per category)")
    q.add_argument("--limit", type=int, default=None, metavar="N",
                   help="a quick look: N solutions of each category, the first N/2 with an "
                        "error and the first N/2 without, in file order")
    add_model_args(q, default_prm=True)
    add_outside(q, "--predictions", default=None, metavar="FILE",
                help="JSONL with id (classification-idx, as prmkit reads PRMBench) and "
                     "step_scores, instead of --model")
    add_outside(q, "--threshold", type=float, default=None,
                help="a step is judged valid when its score is above this; default: the "
                     "threshold saved with --model where it has one, else 0.5 (PRMBench's)")
    add_outside(q, "--random-draws", type=int, default=20, help="draws of the random baseline")
    add_outside(q, "--seed", type=int, default=0, help="seed of the random baseline")
    add_outside(q, "--output", required=True, help="results JSON")
    q.set_defaults(run=_run_prmbench)
    resumable(q)


def _add_steps(evals: Any) -> None:
    from prmkit.evaluate import stepwise

    q = _sub(evals, "steps", "step-level AUC, accuracy and calibration (ECE)", stepwise.__doc__,
             "Step-level metrics on any records with labels (or first_error) and step_scores.")
    q.add_argument("--input", required=True, help="scored, labelled records (prmkit JSONL)")
    q.add_argument("--threshold", type=float, default=0.5,
                   help="a step is predicted correct when its score is at least this (the "
                        "records carry scores, not the model, so no saved threshold applies)")
    q.add_argument("--bins", type=int, default=10, help="equal-width ECE bins on [0, 1]")
    q.add_argument("--output", required=True, help="results JSON")
    q.add_argument("--plot", default=None,
                   help="reliability diagram PNG (default: the --output name with .png)")
    q.set_defaults(run=_run_steps)


def _add_bestofn(evals: Any) -> None:
    from prmkit.evaluate import bestofn
    q = _sub(evals, "bestofn", "best-of-N accuracy against N with confidence intervals",
             bestofn.__doc__, "Accuracy against N for every selection method the candidates "
             "support, plus the oracle (pass@N). Ties are broken as `prmkit select` breaks "
             "them, but in each draw's random order: a majority tie falls at random here, "
             "where `prmkit select` gives it to the answer that appears first in the file, so "
             "the two can differ on the same candidates.")
    add_outside(q, "--input", required=True,
                help="candidates (prmkit JSONL) with group, is_correct and, for the PRM "
                     "methods, step_scores (or --model to score them)")
    add_outside(q, "--n", default="1,2,4,8", help="comma-separated subset sizes N")
    add_outside(q, "--draws", type=int, default=100, help="random subsets per problem and N")
    add_outside(q, "--seed", type=int, default=0, help="seed of the draws and the bootstrap")
    add_outside(q, "--bootstrap", type=int, default=1000,
                help="bootstrap resamples of the problems for the 95%% CI")
    add_outside(q, "--methods", default=None,
                help="comma-separated methods (default: all the data supports)")
    add_outside(q, "--weight-by", default="prod", choices=AGGREGATE_CHOICES,
                help="how weighted-majority aggregates each candidate's step scores")
    add_outside(q, "--output", required=True, help="results JSON")
    add_outside(q, "--plot", default=None,
                help="accuracy-against-N PNG (default: the --output name with .png)")
    add_model_args(q)
    q.add_argument("--no-share-prefix", action="store_true",
                   help="with --model: read every candidate whole. By default the candidates "
                        "of one group are scored on their common prefix's key-value cache (the "
                        "problem and the steps they all begin with read once per group; the "
                        "same scores as one pass, to float32 rounding)")
    q.set_defaults(run=_run_bestofn)
    resumable(q)


def _missing(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def _check_output(*paths: str | None) -> None:
    """Fail before any heavy work when an output folder does not exist."""
    for path in paths:
        if path and path != "-":
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise PrmkitError(f"{path}: the folder {folder} does not exist")


def _default_plot(args: argparse.Namespace) -> None:
    if args.plot is None and args.output != "-":
        stem = args.output[:-5] if args.output.endswith(".json") else args.output
        args.plot = stem + ".png"


def _source(args: argparse.Namespace) -> str:
    return args.model if args.model else f"predictions {os.path.basename(args.predictions)}"


def _run_processbench(args: argparse.Namespace) -> int:
    from prmkit.evaluate import processbench
    from prmkit.evaluate.common import (check_model_or_predictions, quick_look, read_predictions,
                                        score_with_model, write_json)
    from prmkit.models.folder import threshold_for

    check_model_or_predictions(args)
    _check_output(args.output, args.save_scores)
    threshold, said = args.threshold, ""
    if args.calibrate_on is None and args.model:
        threshold, said = threshold_for(args.model, args.threshold)
    config = processbench.ProcessBenchConfig(
        threshold=threshold, calibrate_on=args.calibrate_on,
        random_draws=args.random_draws, seed=args.seed)
    if args.limit is not None and args.limit < 1:
        raise PrmkitError(f"--limit must be at least 1, got {args.limit}")
    splits = {k: quick_look(rs, args.limit)
              for k, rs in processbench.load_splits(args.data).items()}
    records = [r for rs in splits.values() for r in rs]
    train = _read_training(args.heuristic_train) if args.heuristic_train else None
    info: dict[str, Any]
    if args.model:
        info = {"scored_by": score_with_model(records, args, "processbench")}
        scores: dict[str, Any] | None = {r.id: r.step_scores for r in records}
        fixed = None
    else:
        preds = read_predictions(args.predictions, records)
        scores = {k: p.step_scores for k, p in preds.items() if p.step_scores is not None} or None
        fixed = {k: p.first_error for k, p in preds.items() if p.first_error is not None}
        info = {"predictions": args.predictions}
    if said:   # once the model has loaded and scored
        print(said, file=sys.stderr)
    res = processbench.run(splits, scores, fixed, config, train, args.heuristic_train)
    res = {**info, "data": args.data, **res}
    if said:
        res["threshold_from"] = said
    write_json(args.output, res)
    processbench.print_results(res, _source(args))
    print(f"results -> {args.output}", file=sys.stderr)
    return 0


def _read_training(path: str) -> list[Any]:
    from prmkit.evaluate import processbench
    from prmkit.formats.detect import read_records

    if os.path.isdir(path) or path.endswith(".json"):
        return [r for rs in processbench.load_splits(path).values() for r in rs]
    return read_records(path)


def _run_prmbench(args: argparse.Namespace) -> int:
    from prmkit.evaluate import prmbench
    from prmkit.evaluate.common import (check_model_or_predictions, quick_look, read_predictions,
                                        score_with_model, write_json)

    check_model_or_predictions(args)
    _check_output(args.output, args.save_scores)
    if args.random_draws < 1:
        raise PrmkitError(f"--random-draws must be positive, got {args.random_draws}")
    if args.limit is not None and args.limit < 1:
        raise PrmkitError(f"--limit must be at least 1, got {args.limit}")
    records = prmbench.load(args.data)
    if args.limit is not None:  # a quick look at each category
        by_category: dict[Any, list[Any]] = {}
        for r in records:
            by_category.setdefault(r.meta.get("classification"), []).append(r)
        records = [r for rs in by_category.values() for r in quick_look(rs, args.limit)]
    info: dict[str, Any]
    if args.model:
        info = {"scored_by": score_with_model(records, args, "prmbench")}
        scores = {r.id: r.step_scores for r in records}
    else:
        preds = read_predictions(args.predictions, records, allow_first_error=False)
        scores = {k: p.step_scores for k, p in preds.items()}
        info = {"predictions": args.predictions}
    threshold = 0.5 if args.threshold is None else args.threshold
    if args.model:
        from prmkit.models.folder import threshold_for

        threshold, said = threshold_for(args.model, args.threshold)
        print(said, file=sys.stderr)
    all_valid = prmbench.evaluate_judgements(records, {r.id: [True] * len(r.steps) for r in records})
    all_valid["how"] = "every step judged valid"
    res = {**info, "data": args.data, "benchmark": "prmbench", "paper": prmbench.PAPER,
           "source": prmbench.SOURCE, "threshold": threshold,
           "model": prmbench.evaluate(records, scores, threshold),  # type: ignore[arg-type]
           "baselines": {"all_valid": all_valid,
                         "random": prmbench.random_judgements(records, args.random_draws, args.seed)}}
    write_json(args.output, res)
    prmbench.print_results(res, _source(args))
    print(f"results -> {args.output}", file=sys.stderr)
    return 0


def _run_steps(args: argparse.Namespace) -> int:
    from prmkit.evaluate import stepwise
    from prmkit.evaluate.common import write_json
    from prmkit.formats.detect import read_records

    _default_plot(args)
    _check_output(args.output, args.plot)
    config = stepwise.StepwiseConfig(threshold=args.threshold, bins=args.bins)
    res = stepwise.evaluate(read_records(args.input), config)
    res = {"input": args.input, **res}
    write_json(args.output, res)
    stepwise.print_results(res)
    if args.plot:
        if res["ece"] is None:
            print("no reliability plot: some scores are outside [0, 1]", file=sys.stderr)
            args.plot = None
        else:
            from prmkit.report.plots import reliability_png

            _write_bytes(args.plot, reliability_png(res))
    print(f"results -> {args.output}" + (f", plot -> {args.plot}" if args.plot else ""),
          file=sys.stderr)
    return 0


def _run_bestofn(args: argparse.Namespace) -> int:
    from prmkit.evaluate import bestofn
    from prmkit.evaluate.common import score_with_model, write_json
    from prmkit.formats.detect import read_records

    _default_plot(args)
    _check_output(args.output, args.plot)
    try:
        ns = [int(x) for x in args.n.split(",") if x.strip()]
    except ValueError:
        raise PrmkitError(f"--n {args.n!r}: expected comma-separated integers such as 1,2,4,8") from None
    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    config = bestofn.BestOfNConfig(n=ns, draws=args.draws, seed=args.seed,
                                   bootstrap=args.bootstrap, weight_by=args.weight_by,
                                   methods=methods)
    records = read_records(args.input)
    info: dict[str, Any] = {}
    if args.model:   # the candidates' step_scores come from the model
        if not args.save_scores and args.output != "-":
            stem = args.output[:-5] if args.output.endswith(".json") else args.output
            args.save_scores = stem + ".scores.jsonl"
        _check_output(args.save_scores)
        info["scored_by"] = score_with_model(records, args, "bestofn",
                                             share_prefix=not args.no_share_prefix)
    res = bestofn.curve(records, config)
    res = {"input": args.input, **info, **res}
    write_json(args.output, res)
    bestofn.print_results(res)
    if args.plot:
        from prmkit.report.plots import bestofn_png

        _write_bytes(args.plot, bestofn_png(res))
    print(f"results -> {args.output}" + (f", plot -> {args.plot}" if args.plot else ""),
          file=sys.stderr)
    return 0


def _write_bytes(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise PrmkitError(f"{path}: cannot write ({e.strerror})") from None


def add_model_args(p: argparse.ArgumentParser, required: bool = False,
                   default_prm: bool = False) -> None:
    """The options that load and run a PRM (the same as ``prmkit score``); ``default_prm``: no
    --model (and no --predictions) means the default PRM."""
    add_model_options(p, "a model folder (safetensors), a default model name, or a hub id" +
                      ("; default: the trained default PRM shipped in the package, unless "
                       "--predictions is given" if default_prm else ""), required=required)
    add_model_run_options(p, "auto = bfloat16 where native, else float32; recorded in the "
                             "results beside every figure",
                          "cut solutions to this many tokens (default: the model's maximum); "
                          "steps past the cut get no score")
    add_outside(p, "--save-scores", default=None, metavar="FILE",
                help="where the scored records go, written as they finish to FILE.partial; "
                     "rerunning the same command after a kill resumes there. Default: the "
                     "--output name with .scores.jsonl instead of .json. FILE can be given "
                     "to --predictions or `prmkit report` later.")
    add_outside(p, "--no-resume", action="store_true",
                help="ignore the saved scores' FILE.partial from an earlier run and start again")
    add_scale_options(p)
