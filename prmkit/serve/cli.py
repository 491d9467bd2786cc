"""``prmkit serve``: the command-line layer over :mod:`prmkit.serve.app`.

:func:`add_serve` registers the subcommand (``prmkit.cli.COMMANDS``). The model is opened
exactly as ``prmkit score`` opens it (:func:`prmkit.models.load.open_prm`): the trained default PRM
without ``--model``, a default backbone name with ``--format``, or a model folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import textwrap
from typing import Any

from prmkit.errors import PrmkitError


def add_serve(sub: Any) -> None:
    from prmkit.cliutil import Formatter, add_config_options, add_dtype_option, add_model_options
    from prmkit.serve.config import ServeConfig

    endpoints = [
        ("POST /v1/score", "problems + steps (or full texts) -> step scores and aggregates; "
                           "the client is `prmkit score --model http://HOST:PORT`"),
        ("POST /get_reward", "OpenRLHF's remote reward model (--remote_rm_url "
                             "http://HOST:PORT/get_reward): query [+ prompts, labels] -> "
                             "rewards, scores, extra_logs (one number per query), step_scores"),
        ("GET /health", "status, model, queue and batching figures")]
    listing = "\n".join(textwrap.fill(text, 88, initial_indent=f"  {name:<17} ",
                                      subsequent_indent=" " * 20) for name, text in endpoints)
    p = sub.add_parser(
        "serve", help="serve a PRM over HTTP (reward server for RL trainers)",
        formatter_class=Formatter,
        description="Serve a PRM over HTTP with FastAPI and uvicorn.\n\n" + listing + "\n\n"
                    + textwrap.fill(
                        "Concurrent requests share forward passes (dynamic batching, up to "
                        "--token-budget padded tokens, waiting at most --max-wait-ms). A full "
                        "queue answers 503 with Retry-After; oversized bodies 413; headers over "
                        "--max-header-bytes 431; too many steps or tokens 422. On a non-loopback address --token is required and "
                        "every request needs 'Authorization: Bearer TOKEN' (401 without). Ctrl-C "
                        "or SIGTERM finish the requests in flight before stopping.", 88))
    add_model_options(p, "a model folder (a trained prmkit PRM), a default model name "
                         "(smollm2-135m, gemma3-270m; with --format), or a hub id. Default: the "
                         "trained default prmkit PRM shipped in the package.")
    add_dtype_option(p, help="auto = bfloat16 where native, else float32; float32 gives scores "
                             "equal to offline float32 scoring")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--max-length", type=int, default=None,
                   help="the model's maximum length in tokens (default: from its config)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for the model (default: torch's; 1 is often faster on "
                        "a busy machine)")
    add_config_options(p, ServeConfig, mark_optional=False)  # with the batching options
    from prmkit.verify.prm import GenConfig

    p.add_argument("--backend", default="hf", choices=["hf", "generative"],
                   help="hf: a discriminative PRM read with transformers; generative: an "
                        "instruct model that writes a verification per solution (--format "
                        "thinkprm, genprm or plain, the default; docs/generative-prms.md)")
    add_config_options(p.add_argument_group("generative PRM (--backend generative)"), GenConfig)
    p.add_argument("--access-log", action="store_true", help="log every request (uvicorn)")
    p.set_defaults(run=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from prmkit.cliutil import config_from_args
    from prmkit.serve.config import ServeConfig

    # Everything that can be wrong with the options is reported before the model loads.
    config = config_from_args(ServeConfig, args)
    if not all(importlib.util.find_spec(name) for name in ("fastapi", "uvicorn")):
        raise PrmkitError("prmkit serve needs FastAPI and uvicorn: pip install 'prmkit[serve]'")
    from prmkit.models.reading import HFConfig, fast_dtype
    from prmkit.models.spec import resolve_model
    from prmkit.resume import as_path
    from prmkit.scoring import open_scorer
    from prmkit.serve.app import bind, create_app, uvicorn_server
    from prmkit.verify.load import generation_of

    spec = resolve_model(args.model, args.backend, args.format, None, args.trust_remote_code)
    if spec.served:
        raise PrmkitError("prmkit serve needs a local model, not a server URL")
    if args.threads is not None and args.threads < 1:
        raise PrmkitError(f"--threads must be positive, got {args.threads}")
    sock = bind(config.host, config.port)  # a taken port is reported before the model loads
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    hf = HFConfig(dtype=args.dtype, device=args.device, token_budget=args.token_budget,
                  max_length=args.max_length, trust_remote_code=args.trust_remote_code)
    prm = open_scorer(spec, hf, generation_of(args)[0])
    kind = "prm" if args.backend == "generative" else spec.kind
    # a folder by its absolute path: /health names the same model wherever serve was started
    model_name = as_path(args.model) or "prmkit-default-prm"
    app = create_app(prm, config, model_name, prm.format.name, kind)
    where = f"http://[{config.host}]:{config.port}" if ":" in config.host else \
        f"http://{config.host}:{config.port}"
    dtype = args.dtype if args.dtype != "auto" else f"auto = {fast_dtype(args.device)}"
    print(f"prmkit serve: {model_name} ({prm.format.name}, {dtype}) on {where} "
          f"(/v1/score, /get_reward, /health); token {'required' if config.token else 'off'}; "
          f"batching up to {config.batching.token_budget} tokens, {config.batching.max_wait_ms:g} ms",
          file=sys.stderr, flush=True)
    server = uvicorn_server(app, config, "info" if args.verbose else "warning", args.access_log)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for the
    # handler that was there before; this one notes it, so the command ends normally (exit 0).
    signals: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, frame: signals.append(sig))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    stats = app.state.scorer.batcher.stats
    print(f"prmkit serve: stopped; scored {stats.solutions} solutions in {stats.jobs} requests "
          f"({stats.groups} groups)", file=sys.stderr)
    return 0
