"""``prmkit generate``: the command-line layer over :mod:`prmkit.generate.run`.

:func:`add_generate` registers the subcommand (``prmkit.cli.COMMANDS``); :func:`load_policy`
builds a generator and its prompter from a policy name and a backend, and is what benchmarks
and later jobs (search, labeling) call too.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.generate.base import Generator
from prmkit.generate.prompts import END_TOKENS, MODEL_STYLES, STYLES, Prompter, make_prompter

BACKENDS = ("hf", "llamacpp", "vllm", "openai")
POLICY_HELP = ("default model name (smollm2-135m, gemma3-270m), model folder, hub id, .gguf file "
               "(llamacpp), server model name (openai), or lab / lab:SLIP for the lab world's "
               "synthetic policy (prmkit.lab; instant, with a known slip rate per step)")


def load_policy(policy: str, backend: str = "hf", *, dtype: str = "auto", device: str = "cpu",
                batch_size: int = 8, threads: int | None = None, base_url: str | None = None,
                model_name: str | None = None, api_key: str | None = None,
                concurrency: int = 8, tokenizer: str | None = None,
                prompt_style: str | None = None, step_rule: str | None = None,
                n_ctx: int = 4096) -> tuple[Generator, Prompter]:
    """A generator for ``policy`` on ``backend``, and the prompter for that policy.

    ``policy``: a default model name (``smollm2-135m``, ``gemma3-270m``), a model folder or hub
    id (hf, vllm), a ``.gguf`` file (llamacpp), or the model name on the server (openai).
    """
    if backend not in BACKENDS:
        raise PrmkitError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if policy == "lab" or policy.startswith("lab:"):   # the lab world's synthetic policy
        from prmkit.lab import load_lab_policy

        return load_lab_policy(policy)
    rule = None if step_rule in (None, "auto") else step_rule
    if backend == "hf":
        from prmkit.generate.hf import HFGenConfig, load_hf_generator
        from prmkit.generate.prompts import tokenizer_specials

        if threads:
            import torch

            torch.set_num_threads(threads)
        gen = load_hf_generator(policy, HFGenConfig(dtype=dtype, device=device,
                                                    batch_size=batch_size), END_TOKENS)
        return gen, make_prompter(policy, gen.tokenizer.chat_template,
                                  tokenizer_specials(gen.tokenizer), prompt_style, rule)
    if backend == "llamacpp":
        from prmkit.generate.llamacpp import LlamaCppConfig, load_llamacpp_generator

        lgen = load_llamacpp_generator(policy, LlamaCppConfig(n_ctx=n_ctx, n_threads=threads),
                                       END_TOKENS)
        return lgen, make_prompter(policy, lgen.chat_template, lgen.special, prompt_style, rule)
    if backend == "vllm":
        from prmkit.generate.prompts import tokenizer_specials
        from prmkit.generate.vllm import VLLMConfig, load_vllm_generator

        vgen = load_vllm_generator(policy, VLLMConfig(dtype=dtype), END_TOKENS)
        return vgen, make_prompter(policy, vgen.tokenizer.chat_template,
                                   tokenizer_specials(vgen.tokenizer), prompt_style, rule)
    from prmkit.generate.openai import OpenAIConfig, OpenAIGenerator

    ogen = OpenAIGenerator(OpenAIConfig(base_url=base_url or OpenAIConfig.base_url,
                                        model=model_name or policy, api_key=api_key,
                                        concurrency=concurrency))
    template, special = None, {}
    style = prompt_style or MODEL_STYLES.get(policy)
    if style != "few-shot" and (tokenizer or style == "chat"):
        template, special = _chat_template(tokenizer or policy)
    if style is None and template is None:
        raise PrmkitError(f"policy {policy!r}: say how to prompt it, --prompt-style few-shot, or "
                          f"--tokenizer FOLDER for its chat template")
    return ogen, make_prompter(policy, template, special, style, rule)


def _chat_template(name: str) -> tuple[str | None, dict[str, str]]:
    """The chat template and special tokens of a tokenizer folder or default model."""
    import os

    from prmkit.generate.prompts import tokenizer_specials
    from prmkit.models.pypi import DEFAULT_MODELS, resolve

    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise PrmkitError("reading a chat template needs transformers: pip install 'prmkit[hf]'") from None
    path = resolve(name) if name in DEFAULT_MODELS else name
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        where = "folder" if os.path.isdir(path) else "name"
        raise PrmkitError(f"tokenizer {name!r} ({where}): cannot load ({str(e).splitlines()[0]})") from None
    return tok.chat_template, tokenizer_specials(tok)


def default_chunk(backend: str, n: int, batch_size: int, concurrency: int) -> int:
    """Problems per generator call: enough to fill a batch, and no more."""
    rows = {"hf": batch_size, "llamacpp": 1, "vllm": 1024, "openai": concurrency}[backend]
    return max(1, rows // n)


def add_policy_options(p: argparse.ArgumentParser) -> None:
    """The options that say how a policy runs (all but its name), for every job that loads one
    with :func:`load_policy`; read them back with :func:`policy_options`. Needs ``--step-rule``
    to be defined by the job."""
    p.add_argument("--backend", default="hf", choices=BACKENDS, help="how the policy runs")
    p.add_argument("--prompt-style", default=None, choices=list(STYLES),
                   help="how the policy is prompted; default: by model (see above)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="hf/vllm weights; auto = bfloat16")
    p.add_argument("--device", default="cpu", help="hf: cpu, cuda, cuda:1, ...")
    p.add_argument("--batch-size", type=int, default=8, help="hf: sequences decoded together")
    p.add_argument("--threads", type=int, default=None,
                   help="hf/llamacpp: CPU threads (1 is faster on a busy machine)")
    p.add_argument("--n-ctx", type=int, default=4096, help="llamacpp: context length")
    p.add_argument("--base-url", default=None, help="openai: the API root, e.g. http://host:8000/v1")
    p.add_argument("--model-name", default=None, help="openai: the model name on the server "
                                                      "(default: the model named above)")
    p.add_argument("--api-key", default=None, help="openai: Bearer token")
    p.add_argument("--concurrency", type=int, default=8, help="openai: requests in flight")
    p.add_argument("--tokenizer", default=None,
                   help="openai: a tokenizer folder (or default model) whose chat template to use")


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`load_policy` (all but the name) from
    :func:`add_policy_options`' options."""
    if args.batch_size < 1 or args.concurrency < 1:
        raise PrmkitError("--batch-size and --concurrency must be positive")
    return dict(backend=args.backend, dtype=args.dtype, device=args.device,
                batch_size=args.batch_size, threads=args.threads, base_url=args.base_url,
                model_name=args.model_name, api_key=args.api_key, concurrency=args.concurrency,
                tokenizer=args.tokenizer, prompt_style=args.prompt_style,
                step_rule=args.step_rule, n_ctx=args.n_ctx)


# ---------------------------------------------------------------------------------------------


def add_generate(sub: Any) -> None:
    from prmkit.cli import EPILOG_RECORDS, _Formatter
    from prmkit.formats import FORMAT_NAMES
    from prmkit.generate.run import INPUT_HELP, GenerateConfig
    from prmkit.steps import RULES

    styles = "\n".join(f"  {k}: {v.description}" for k, v in STYLES.items())
    defaults = ", ".join(f"{k} ({v})" for k, v in MODEL_STYLES.items())
    h = GenerateConfig.__dataclass_fields__
    p = sub.add_parser(
        "generate", help="sample candidate solutions with a policy model",
        formatter_class=_Formatter, epilog=EPILOG_RECORDS,
        description="Sample N candidate solutions per problem with a policy model and write one "
                    "record per candidate: id PROBLEM-k, group = the problem id, steps split by "
                    "the step rule, the extracted answer, is_correct when the input has a "
                    "reference, and token counts in meta. Records are appended to OUT.partial "
                    "as problems finish; rerunning the same command after a kill resumes there "
                    "and writes the same records as an uninterrupted run.\n\nPrompt styles "
                    f"(--prompt-style; default models: {defaults}):\n{styles}")
    p.add_argument("--policy", required=True, help=POLICY_HELP)
    p.add_argument("--input", required=True, help="the problems")
    p.add_argument("--input-format", default="prmkit", choices=["problems"] + FORMAT_NAMES,
                   help=INPUT_HELP)
    p.add_argument("--output", required=True, help="where to write the candidates (prmkit JSONL)")
    p.add_argument("-n", type=int, default=8, help=h["n"].metadata["help"])
    p.add_argument("--max-tokens", type=int, default=512, help=h["max_tokens"].metadata["help"])
    p.add_argument("--temperature", type=float, default=0.7, help=h["temperature"].metadata["help"])
    p.add_argument("--top-p", type=float, default=1.0, help=h["top_p"].metadata["help"])
    p.add_argument("--seed", type=int, default=0, help=h["seed"].metadata["help"])
    p.add_argument("--step-rule", default=None, choices=list(RULES), help=h["step_rule"].metadata["help"])
    p.add_argument("--limit", type=int, default=None, help="only the first N problems")
    p.add_argument("--chunk", type=int, default=None,
                   help="problems per generator call; default: enough to fill a batch")
    add_policy_options(p)
    p.add_argument("--no-resume", action="store_true",
                   help="ignore OUT.partial from an earlier run and start again")
    p.set_defaults(run=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from prmkit.generate.run import GenerateConfig, read_problems, run_generate

    if args.batch_size < 1 or args.concurrency < 1:
        raise PrmkitError("--batch-size and --concurrency must be positive")
    chunk = args.chunk or default_chunk(args.backend, max(1, args.n), args.batch_size,
                                        args.concurrency)
    config = GenerateConfig(n=args.n, max_tokens=args.max_tokens, temperature=args.temperature,
                            top_p=args.top_p, seed=args.seed, step_rule=args.step_rule,
                            chunk=chunk, resume=not args.no_resume)
    problems = read_problems(args.input, args.input_format, args.limit)  # errors before loading
    generator, prompter = load_policy(args.policy, **policy_options(args))
    summary = run_generate(problems, generator, prompter, args.output, config,
                           policy=args.policy, backend=args.backend)
    print(f"{summary.line(config.n)} -> {args.output}", file=sys.stderr)
    return 0
