"""The ``prmkit`` command: one subcommand per capability, a thin layer over the library.

User mistakes (bad input lines, missing files, wrong options) are printed as one line,
``prmkit: FILE:LINE: field 'X': what is wrong``, with exit status 2 and no traceback.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import logging
import os
import sys
from typing import Any, Callable

from prmkit import __version__
from prmkit.cliutil import (AGGREGATE_CHOICES, EPILOG_RECORDS, Formatter, add_config_options,
                            add_model_options, add_model_run_options, add_parser,
                            add_scale_options, check_inputs_not_empty, check_output_is_not_input,
                            config_from_args)
from prmkit.errors import PrmkitError
from prmkit.resume import Header, add_outside, args_identity, resumable
from prmkit.generate.cli import add_generate
from prmkit.label.cli import add_label
from prmkit.lab.cli import add_lab
from prmkit.rl.cli import add_rl
from prmkit.search.cli import add_search
from prmkit.serve.cli import add_serve

def _parser(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    return add_parser(sub, name, help, description, EPILOG_RECORDS)


# ---------------------------------------------------------------------------------------------
# convert


def _add_convert(sub: Any) -> None:
    from prmkit import formats

    lines = "\n".join(f"  {name}: {formats.FORMAT_HELP[name]}" for name in formats.FORMAT_NAMES)
    p = _parser(sub, "convert", "convert between PRM data formats",
                "Read IN in one format and write OUT in another. The output is written to a "
                "temporary file and renamed at the end, so a failed run leaves no partial "
                "file.\n\nFormats:\n" + lines)
    p.add_argument("--from", dest="src", required=True, choices=formats.FORMAT_NAMES,
                   help="the format of IN")
    p.add_argument("--to", dest="dst", required=True, choices=formats.FORMAT_NAMES,
                   help="the format of OUT")
    opt = formats.ConvertOptions.help()
    p.add_argument("--prm800k-neutral", choices=["1", "0", "null"], default="1",
                   help=opt["prm800k_neutral"])
    # the two labels that may be none are words on the command line; the rest from the config
    add_config_options(p, formats.ConvertOptions, skip=("prm800k_neutral", "prmbench_later_steps"))
    p.add_argument("--prmbench-later-steps", choices=["null", "0", "1"], default="null",
                   help=opt["prmbench_later_steps"])
    p.add_argument("--limit", type=int, default=None,
                   help="convert only the first N records (to try a tool on a few hundred)")
    p.add_argument("input", metavar="IN", help="input file ('-' for standard input)")
    p.add_argument("output", metavar="OUT", help="output file ('-' for standard output)")
    p.set_defaults(run=_run_convert)


def _run_convert(args: argparse.Namespace) -> int:
    from prmkit import formats

    value = {"1": 1.0, "0": 0.0, "null": None}
    options = config_from_args(formats.ConvertOptions, args,
                               prm800k_neutral=value[args.prm800k_neutral],
                               prmbench_later_steps=value[args.prmbench_later_steps])
    if args.limit is not None and args.limit < 1:
        raise PrmkitError(f"--limit must be at least 1, got {args.limit}")
    # Read (and validate) the whole input, or its first --limit records, before any output: a
    # bad line is reported before anything is written.
    records = list(itertools.islice(formats.read(args.src, args.input, options), args.limit))
    n = formats.write(args.dst, args.output, records, options)
    print(f"converted {n} records: {args.input} ({args.src}) -> {args.output} ({args.dst})",
          file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# score


def _add_score(sub: Any) -> None:
    from prmkit.models.names import PUBLIC_PRMS, REMOTE_CODE
    from prmkit.models.pypi import DEFAULT_MODELS
    from prmkit.stepformat import PRESETS

    presets = "\n".join(f"  {k}: {v.description}" for k, v in PRESETS.items())
    defaults = "\n".join(f"  {k}: {v.description}" for k, v in DEFAULT_MODELS.items())
    remote = {k: "; needs --trust-remote-code" if k in REMOTE_CODE else "" for k in PUBLIC_PRMS}
    public = "\n".join(f"  {k}: {fmt} ({what}{remote[k]})"
                       for k, (fmt, what) in PUBLIC_PRMS.items())
    p = _parser(sub, "score", "add step_scores to each record with a PRM",
                "Score every step of every record with a process reward model and write the "
                "records with `step_scores` added (one score per step, in [0, 1]; null for a "
                "step past the model's maximum length). Each solution is read in one forward "
                "pass, in batches sorted by length. Results are written as they finish to "
                "OUT.partial; rerunning the same command after a kill resumes there. With "
                "--ray, whole groups go to Ray workers that each load the model once; the "
                "output is the same, in input order (docs/scaling-out.md).\n\n"
                "Step formats (--format):\n" + presets + "\n\nDefault models (--model):\n"
                + defaults + "\n  These named models are untrained backbones: their scores are "
                "only useful for testing and benchmarks, not as a PRM's judgement. Without "
                "--model, or with --model default, the trained default PRM "
                "(prmkit/models/default_prm) is used.\n\nPublic PRMs by name (--model; the step "
                "format is chosen from the name, --format overrides it):\n" + public)
    add_model_options(p, "a model folder (safetensors; a trained prmkit PRM or ORM), a hub id "
                         "(a public PRM's step format is chosen from its name, e.g. "
                         "peiyi9979/math-shepherd-mistral-7b-prm, Qwen/Qwen2.5-Math-PRM-7B), "
                         "the URL of a running `prmkit serve` (http://HOST:PORT), or a name: "
                         "default, smollm2-135m, gemma3-270m. Default: `default`, the small PRM "
                         "shipped in the package: SmolLM2-135M-Instruct with its last layer "
                         "and a head trained on PRM800K and PRMBench train step labels, with "
                         "the threshold it was tuned for; its model card gives its figures. It "
                         "is a CPU example, not a strong PRM. For real use, pass a public PRM by "
                         "its hub id (listed above) or a folder of one.")
    add_outside(p, "--token", default=None,
                help="bearer token for a remote --model URL (default: $PRMKIT_TOKEN, or its "
                     "alias $PRMKIT_SERVE_TOKEN)")
    # the input records are checked one by one against OUT.partial's, not by their path
    add_outside(p, "--input", required=True, help="records (prmkit JSONL)")
    add_outside(p, "--output", required=True, help="where to write the scored records")
    p.add_argument("--per-prefix", action="store_true",
                   help="slow reference mode: score every prefix in its own forward pass "
                        "(for checking a new model or format against one-pass scoring)")
    p.add_argument("--no-share-prefix", action="store_true",
                   help="read every record whole. By default the records of one group (the "
                        "same `group` and problem) are scored on their common prefix's "
                        "key-value cache: the problem and the steps they all begin with are "
                        "read once per group (the same scores as one pass, to float32 "
                        "rounding; HF models only, others read every record whole)")
    add_model_run_options(p, "auto = bfloat16 where native, else float32; use float32 for "
                             "exact comparisons",
                          "cut solutions to this many tokens (default: the model's maximum)")
    add_outside(p, "--chunk", type=int, default=64,
                help="records scored together (a PRM that streams, such as a generative one, "
                     "writes each to the partial output as it finishes)")
    add_outside(p, "--no-resume", action="store_true",
                help="ignore OUT.partial from an earlier run and start again")
    add_scale_options(p)
    p.set_defaults(run=_run_score)
    resumable(p)


def _run_score(args: argparse.Namespace) -> int:
    from prmkit.models.reading import HFConfig
    from prmkit.models.spec import resolve_model
    from prmkit.formats.detect import read_records
    from prmkit.records import check_output_path
    from prmkit.distributed import ray_config
    from prmkit.scoring import model_identity, open_scorer, score_records

    check_output_path(args.output)  # the arguments first, then the records, then the model
    if args.chunk < 1:
        raise PrmkitError(f"--chunk must be positive, got {args.chunk}")
    records = read_records(args.input)
    config = HFConfig(dtype=args.dtype, device=args.device, token_budget=args.token_budget,
                      max_length=args.max_length, trust_remote_code=args.trust_remote_code)
    spec = resolve_model(args.model, args.backend, args.format, args.token,
                         args.trust_remote_code)
    ray = ray_config(args)
    from prmkit.verify.load import generation_of

    generation, _ = generation_of(args)
    # every option (a server by what it serves) is the partial file's header: a resume matches it
    header = Header("score", args_identity(args, model=model_identity(args.model, args.token)))
    result = score_records(records, functools.partial(open_scorer, spec, config, generation),
                           args.output, resume=not args.no_resume, kind=spec.kind,
                           per_prefix=args.per_prefix, chunk=args.chunk,
                           share_prefix=not args.no_share_prefix,
                           header=header, ray=ray)
    if result.sharing is not None:
        print(result.sharing.summary(), file=sys.stderr)
    from prmkit.verify.prm import GenerativePRM

    if isinstance(result.prm, GenerativePRM):   # its parse rate, tokens and time
        print(result.prm.stats.summary(), file=sys.stderr)
    print(f"scored {len(records)} records -> {args.output}", file=sys.stderr)
    _say_threshold(args.model, spec)
    return 0


def _say_threshold(model: str | None, saved: Any = None) -> None:
    """The threshold saved with the model, where one is: scores hold no threshold, but the
    commands that apply one (`eval processbench`, `select --by filtered-majority`) use it.
    ``saved``: the model's spec, whose threshold was read with it (else it is read here)."""
    from prmkit.models.folder import saved_threshold

    info = saved.threshold if saved is not None else saved_threshold(model)
    if info is not None:
        print(f"the model's threshold: {info['threshold']:g} (tuned on "
              f"{info.get('tuned_on', 'its dev data')}): a step scored below it is a predicted "
              f"error; eval processbench and select --by filtered-majority use it, --threshold "
              f"overrides it", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# export


def _add_export(sub: Any) -> None:
    from prmkit.models import export

    p = _parser(sub, "export", "write a PRM folder as a standard Hugging Face model folder",
                (export.__doc__ or "").split("\n\n", 1)[1])
    p.add_argument("--model", required=True,
                   help="a prmkit PRM or ORM folder (full, LoRA-merged or a last-k delta) or a "
                        "default model name")
    p.add_argument("--output", required=True, help="the folder to write (must not exist, or be empty)")
    p.add_argument("--format", default=None,
                   help="step format preset or prmkit_format.json path; default: the format "
                        "saved in the model folder")
    p.add_argument("--dtype", default="float32", choices=export.EXPORT_DTYPES,
                   help="the dtype of the written weights")
    p.set_defaults(run=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from prmkit.models.export import export_prm

    info = export_prm(args.model, args.output, args.dtype, args.format)
    print(f"exported {args.model} -> {args.output} ({info['architecture']}, "
          f"{info['parameters']:,} parameters, format {info['format']})", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# select


def _add_select(sub: Any) -> None:
    from prmkit import select

    p = _parser(sub, "select", "choose one candidate per group (best-of-N)",
                "Choose one record per `group` (records without a group are their own group) "
                "and write the chosen records. When every chosen record has `is_correct`, print "
                "the accuracy of the choice.\n\n" + (select.__doc__ or "").split("\n\n", 2)[-1])
    p.add_argument("--input", required=True, help="candidate records (prmkit JSONL)")
    p.add_argument("--by", required=True, choices=select.METHODS + select.THRESHOLD_METHODS,
                   help="selection method")
    p.add_argument("--weight-by", default="prod", choices=AGGREGATE_CHOICES,
                   help="how weighted-majority aggregates each candidate's step scores")
    p.add_argument("--model", default="default",
                   help="filtered-majority: the PRM that scored the records, whose saved "
                        "threshold it uses (prmkit_threshold.json in its folder)")
    p.add_argument("--threshold", type=float, default=None,
                   help="filtered-majority: a candidate with a step scored below this does not "
                        "vote; default: the threshold saved with --model, else 0.5")
    p.add_argument("--output", default=None, help="where to write the chosen records")
    p.set_defaults(run=_run_select)


def _run_select(args: argparse.Namespace) -> int:
    from prmkit import select
    from prmkit.formats.detect import read_records
    from prmkit.records import write_records

    records = read_records(args.input)
    threshold = 0.5
    if args.by in select.THRESHOLD_METHODS:
        from prmkit.models.folder import threshold_for

        threshold, said = threshold_for(args.model, args.threshold)
        print(said, file=sys.stderr)
    chosen = select.select(records, args.by, weight_by=args.weight_by, threshold=threshold)
    if args.output:
        write_records(args.output, chosen)
    acc = select.accuracy(chosen)
    summary = f"{args.by}: chose {len(chosen)} of {len(records)} candidates"
    if acc is not None:
        summary += f", accuracy {100 * acc:.1f}% ({sum(bool(r.is_correct) for r in chosen)}/{len(chosen)})"
    print(summary)
    return 0


# ---------------------------------------------------------------------------------------------
# demo


def _add_demo(sub: Any) -> None:
    from prmkit.lab.demo import run as lab_demo

    p = _parser(sub, "demo", "run the main job: the whole PRM story on the lab world",
                lab_demo.__doc__ + "\nWith --real-data, runs the real-data job on ../shared/data "
                "instead: conversions of real PRM data, best-of-4 baselines on GSM8K model "
                "solutions, one-pass against per-prefix scoring, best-of-4 with the default PRM.")
    lab_demo.add_arguments(p)
    p.add_argument("--real-data", action="store_true",
                   help="run the real-data job (needs the shared data folder) instead")
    p.add_argument("--data", default=None,
                   help="--real-data: the shared data folder (default: ../shared/data, or "
                        "$PRMKIT_SHARED_DATA)")
    p.add_argument("--score-n", type=int, default=16,
                   help="--real-data: ProcessBench solutions to score with the default model")
    p.add_argument("--bon-problems", type=int, default=100,
                   help="--real-data: GSM8K problems for best-of-4 with the default PRM (0 = skip)")
    p.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    if args.real_data:
        from prmkit import realdata

        return realdata.run(args.data, args.output, args.score_n, args.bon_problems)
    from prmkit.lab.demo import run as lab_demo

    return lab_demo.run(lab_demo.config_from(args))


# ---------------------------------------------------------------------------------------------

def _add_train(sub: Any) -> None:
    from prmkit.train.cli import add_select_for_labeling, add_train

    add_train(sub)
    add_select_for_labeling(sub)


def _add_eval(sub: Any) -> None:
    from prmkit.evaluate.cli import add_eval
    from prmkit.report.cli import add_report

    add_eval(sub)
    add_report(sub)


COMMANDS: list[Callable[[Any], None]] = [_add_convert, _add_score, _add_export, _add_select,
                                         _add_train, _add_demo, _add_eval, add_generate, add_lab,
                                         add_serve, add_label, add_search, add_rl]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prmkit", formatter_class=Formatter,
        description="prmkit: process reward models. Label, train, score, select and search, "
                    "evaluate, serve.")
    parser.add_argument("--version", action="version", version=f"prmkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                help="run `prmkit COMMAND --help` for its options")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="prmkit: %(levelname)s: %(message)s")
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from prmkit.progress import on_terminal

    if not on_terminal():  # a log gets prmkit's progress lines, not transformers' loading bars
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        check_output_is_not_input(args)
        check_inputs_not_empty(args)
        return args.run(args)
    except PrmkitError as e:
        print(f"prmkit: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prmkit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
