"""``prmkit search``: the command-line layer over :mod:`prmkit.search.run`.

Search options come from the method configs (:class:`prmkit.search.base.SearchConfig`,
:class:`~prmkit.search.beam.BeamConfig`, :class:`~prmkit.search.mcts.MCTSConfig`), so each
option's help is the config field's help; policy options are those of ``prmkit generate``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.models.load import open_prm
from prmkit.resume import Header, add_outside, args_identity, resumable


def add_search(sub: Any) -> None:
    from prmkit.cliutil import EPILOG_RECORDS, Formatter, add_config_options, add_dtype_option
    from prmkit.formats import FORMAT_NAMES
    from prmkit.generate.cli import POLICY_HELP, add_policy_options
    from prmkit.generate.run import INPUT_HELP
    from prmkit.search import base, beam, best_of_n, dvts, mcts
    from prmkit.search.beam import BeamConfig
    from prmkit.search.mcts import MCTSConfig
    from prmkit.search.run import METHODS
    from prmkit.steps import RULES

    methods = "\n".join(f"  {name}: {_first_line(mod.__doc__)}" for name, mod in
                        [("best-of-n", best_of_n), ("beam", beam), ("dvts", dvts), ("mcts", mcts)])
    p = sub.add_parser(
        "search", help="PRM-guided search: best-of-n, beam, dvts, mcts",
        formatter_class=Formatter, epilog=EPILOG_RECORDS,
        description="Search for solutions step by step with a policy, guided by a PRM, and write "
                    "each problem's final candidates as records (group = the problem id, best "
                    "first, meta.selected on the chosen one, meta.compute with the tokens "
                    "generated, the PRM tokens read and the seconds spent). With an HF PRM each "
                    "new step is scored on top of its prefix's key-value cache, so every token "
                    "of the search tree goes through the PRM once. Records are appended to "
                    "OUT.partial as problems finish; rerunning the same command after a kill "
                    "resumes there.\n\nMethods:\n" + methods)
    p.add_argument("--method", required=True, choices=list(METHODS), help="the search method")
    p.add_argument("--policy", required=True, help=POLICY_HELP)
    p.add_argument("--prm", default=None,
                   help="the PRM: a model folder, a hub id, or the URL of a running `prmkit "
                        "serve`; default: the default prmkit PRM shipped in the package")
    p.add_argument("--prm-format", default=None,
                   help="the PRM's step format (preset or prmkit_format.json); default: the "
                        "format saved in the model folder")
    add_dtype_option(p, "--prm-dtype",
                     help="the PRM's weights; auto = bfloat16 where native, else float32; "
                          "float32 for exact comparisons")
    p.add_argument("--prm-device", default=None, help="the PRM's device; default: --device")
    add_outside(p, "--prm-token", default=None,
                help="bearer token for a remote --prm URL (default: $PRMKIT_TOKEN)")
    # the input's problems are checked row by row against OUT.partial's, not by its path
    add_outside(p, "--input", required=True, help="the problems")
    p.add_argument("--input-format", default="prmkit", choices=["problems"] + FORMAT_NAMES,
                   help=INPUT_HELP)
    add_outside(p, "--output", required=True,
                help="where to write the candidates (prmkit JSONL)")
    h = base.SearchConfig.__dataclass_fields__
    p.add_argument("-n", type=int, default=h["n"].default, help=h["n"].metadata["help"])
    p.add_argument("-m", type=int, default=h["m"].default, help=h["m"].metadata["help"])
    add_config_options(p, base.SearchConfig, skip=("n", "m"))
    shared = {f.name for f in dataclasses.fields(base.SearchConfig)}
    add_config_options(p, BeamConfig, skip=tuple(shared))
    add_config_options(p, MCTSConfig, skip=tuple(shared))
    p.add_argument("--step-rule", default=None, choices=[r for r in RULES if r != "auto"],
                   help="the step rule the prompt teaches (and best-of-n splits by); default: "
                        "the prompt style's")
    p.add_argument("--limit", type=int, default=None, help="only the first N problems")
    # in the identity, unlike other commands' chunks: problems searched together share the
    # PRM's passes, so their compute accounts (meta.compute) depend on the chunks
    p.add_argument("--chunk", type=int, default=None,
                   help="problems searched in lockstep (one generator call per step for all); "
                        "default: enough to fill a batch")
    add_policy_options(p)
    add_outside(p, "--no-resume", action="store_true",
                help="ignore OUT.partial from an earlier run and start again")
    p.set_defaults(run=_run_search)
    resumable(p)


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").split("\n\n")[0].split())


def _run_search(args: argparse.Namespace) -> int:
    from prmkit.generate.cli import default_chunk, load_policy, policy_options
    from prmkit.generate.run import read_problems
    from prmkit.records import check_output_path
    from prmkit.scoring import model_identity
    from prmkit.search.run import METHODS, probe_partial, run_search
    from prmkit.cliutil import config_from_args

    _, config_class = METHODS[args.method]
    config = config_from_args(config_class, args)
    kwargs = policy_options(args)
    chunk = args.chunk or default_chunk(args.backend, max(1, config.n), args.batch_size,
                                        args.concurrency)
    if chunk < 1:
        raise PrmkitError(f"--chunk must be positive, got {args.chunk}")
    problems = read_problems(args.input, args.input_format, args.limit)  # errors before loading
    # every option (a server PRM by what it serves), checked before any model is loaded
    header = Header("search", args_identity(args, chunk=chunk,
                                            prm=model_identity(args.prm, args.prm_token)))
    keyed = {"policy": args.policy, "prm": args.prm or "default"}
    if not args.no_resume:
        probe_partial(args.output, problems, header, keyed)
    check_output_path(args.output)
    if args.threads:   # the PRM runs in this process too (load_policy sets it for hf only)
        import torch

        torch.set_num_threads(args.threads)
    from prmkit.models.reading import HFConfig

    prm = open_prm(args.prm, args.prm_token, args.prm_format,
                   HFConfig(dtype=args.prm_dtype, device=args.prm_device or args.device))
    generator, prompter = load_policy(args.policy, **kwargs)
    summary = run_search(args.method, problems, generator, prompter, prm, args.output, config,
                         chunk=chunk, resume=not args.no_resume, policy=keyed["policy"],
                         prm_name=keyed["prm"], header=header)
    print(f"{summary.line()} -> {args.output}", file=sys.stderr)
    return 0
