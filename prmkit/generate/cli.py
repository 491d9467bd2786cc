"""``prmkit generate``: the command-line layer over :mod:`prmkit.generate.run`.

:func:`add_generate` registers the subcommand (``prmkit.cli.COMMANDS``); the policy options
(:func:`add_policy_options`) are shared with search and labeling, and read back into the
arguments of :func:`prmkit.generate.load.load_policy`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from prmkit.cliutil import EPILOG_RECORDS, Formatter, add_config_options, add_dtype_option, \
    config_from_args
from prmkit.errors import PrmkitError
from prmkit.generate.load import BACKENDS, default_chunk, load_policy
from prmkit.generate.openai import STOP_MODES, OpenAIConfig
from prmkit.generate.prompts import MODEL_STYLES, STYLES
from prmkit.resume import Header, add_outside, args_identity, read_checked, resumable

__all__ = ["BACKENDS", "POLICY_HELP", "add_generate", "add_policy_options", "default_chunk",
           "load_policy", "policy_options"]
POLICY_HELP = ("default model name (smollm2-135m, gemma3-270m), model folder, hub id, .gguf file "
               "(llamacpp), server model name (openai), or lab / lab:SLIP for the lab world's "
               "synthetic policy (instant, with a known slip rate per step)")


def add_policy_options(p: argparse.ArgumentParser) -> None:
    """The options that say how a policy runs (all but its name), for every job that loads one
    with :func:`load_policy`; read them back with :func:`policy_options`. Needs ``--step-rule``
    to be defined by the job."""
    p.add_argument("--backend", default="hf", choices=BACKENDS,
                   help="how the policy runs (vllm: tested only against a stand-in engine, "
                        "docs/scaling.md)")
    p.add_argument("--prompt-style", default=None, choices=list(STYLES),
                   help="how the policy is prompted; default: chat for smollm2-135m and a "
                        "model with a chat template, few-shot for gemma3-270m and one without")
    add_dtype_option(p, help="hf/vllm weights; auto = bfloat16 where native, else float32")
    p.add_argument("--device", default="cpu", help="hf: cpu, cuda, cuda:1, ...")
    p.add_argument("--batch-size", type=int, default=8, help="hf: sequences decoded together")
    add_outside(p, "--threads", type=int, default=None,
                help="hf/llamacpp: CPU threads (1 is faster on a busy machine)")
    p.add_argument("--n-ctx", type=int, default=4096, help="llamacpp: context length")
    p.add_argument("--base-url", default=None, help="openai: the API root, e.g. http://host:8000/v1")
    p.add_argument("--model-name", default=None, help="openai: the model name on the server "
                                                      "(default: the model named above)")
    add_outside(p, "--api-key", default=None, help="openai: Bearer token")
    add_outside(p, "--concurrency", type=int, default=8, help="openai: requests in flight")
    p.add_argument("--tokenizer", default=None,
                   help="openai: a tokenizer folder (or default model) whose chat template to use")
    stop = OpenAIConfig.__dataclass_fields__["stop_strings"]
    p.add_argument("--stop-strings", default=stop.default, choices=STOP_MODES,
                   help="openai: " + stop.metadata["help"])


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`load_policy` (all but the name) from
    :func:`add_policy_options`' options."""
    if args.batch_size < 1 or args.concurrency < 1:
        raise PrmkitError("--batch-size and --concurrency must be positive")
    return dict(backend=args.backend, dtype=args.dtype, device=args.device,
                batch_size=args.batch_size, threads=args.threads, base_url=args.base_url,
                model_name=args.model_name, api_key=args.api_key, concurrency=args.concurrency,
                tokenizer=args.tokenizer, prompt_style=args.prompt_style,
                step_rule=args.step_rule, n_ctx=args.n_ctx, stop_strings=args.stop_strings)


# ---------------------------------------------------------------------------------------------


def add_generate(sub: Any) -> None:
    from prmkit.formats import FORMAT_NAMES
    from prmkit.generate.run import INPUT_HELP, GenerateConfig

    styles = "\n".join(f"  {k}: {v.description}" for k, v in STYLES.items())
    defaults = ", ".join(f"{k} ({v})" for k, v in MODEL_STYLES.items())
    h = GenerateConfig.__dataclass_fields__
    p = sub.add_parser(
        "generate", help="sample candidate solutions with a policy model",
        formatter_class=Formatter, epilog=EPILOG_RECORDS,
        description="Sample N candidate solutions per problem with a policy model and write one "
                    "record per candidate: id PROBLEM-k, group = the problem id, steps split by "
                    "the step rule, the extracted answer, is_correct when the input has a "
                    "reference, and token counts in meta. Records are appended to OUT.partial "
                    "as problems finish; rerunning the same command after a kill resumes there "
                    "and writes the same records as an uninterrupted run.\n\nPrompt styles "
                    f"(--prompt-style; default models: {defaults}):\n{styles}")
    p.add_argument("--policy", required=True, help=POLICY_HELP)
    # the input's problems are checked row by row against OUT.partial's, not by its path
    add_outside(p, "--input", required=True, help="the problems")
    p.add_argument("--input-format", default="prmkit", choices=["problems"] + FORMAT_NAMES,
                   help=INPUT_HELP)
    add_outside(p, "--output", required=True,
                help="where to write the candidates (prmkit JSONL)")
    p.add_argument("-n", type=int, default=h["n"].default, help=h["n"].metadata["help"])
    # the job's own options; --chunk and --no-resume below say it the command line's way
    add_config_options(p, GenerateConfig, skip=("n", "chunk", "resume"), mark_optional=False)
    p.add_argument("--limit", type=int, default=None, help="only the first N problems")
    add_outside(p, "--chunk", type=int, default=None,
                help="problems per generator call; default: enough to fill a batch")
    add_policy_options(p)
    add_outside(p, "--no-resume", action="store_true",
                help="ignore OUT.partial from an earlier run and start again")
    p.set_defaults(run=_run_generate)
    resumable(p)


def _run_generate(args: argparse.Namespace) -> int:
    from prmkit.generate.run import GenerateConfig, read_problems, run_generate

    if args.batch_size < 1 or args.concurrency < 1:
        raise PrmkitError("--batch-size and --concurrency must be positive")
    chunk = args.chunk or default_chunk(args.backend, max(1, args.n), args.batch_size,
                                        args.concurrency)
    config = config_from_args(GenerateConfig, args, chunk=chunk, resume=not args.no_resume)
    problems = read_problems(args.input, args.input_format, args.limit)  # errors before loading
    header = Header("generate", args_identity(args))
    if config.resume:
        read_checked(args.output, header)   # another run's partial is refused before loading
    generator, prompter = load_policy(args.policy, **policy_options(args))
    summary = run_generate(problems, generator, prompter, args.output, config,
                           policy=args.policy, backend=args.backend, header=header)
    print(f"{summary.line(config.n)} -> {args.output}", file=sys.stderr)
    return 0
