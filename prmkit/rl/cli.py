"""``prmkit rl``: GRPO with prmkit rewards (:mod:`prmkit.rl.grpo`); options from ``RLConfig``."""

from __future__ import annotations

import argparse
from typing import Any


def add_rl(sub: Any) -> None:
    from prmkit.rl import grpo
    from prmkit.cliutil import Formatter, add_config_options

    p = sub.add_parser("rl", help="RL (GRPO, TRL) with outcome and process rewards",
                       description=grpo.__doc__, formatter_class=Formatter)
    add_config_options(p, grpo.RLConfig)
    p.set_defaults(run=_run_rl)


def _run_rl(args: argparse.Namespace) -> int:
    from prmkit.rl.grpo import RLConfig, run_rl
    from prmkit.cliutil import config_from_args

    result = run_rl(config_from_args(RLConfig, args))
    b, a = result["before"], result["after"]
    print(f"accuracy on {result['eval_problems']} held-out problems: "
          f"{b.get('accuracy', float('nan')):.3f} before, {a.get('accuracy', float('nan')):.3f} "
          f"after {result['config']['max_steps']} GRPO steps ({result['config']['reward']} reward); "
          f"{args.output}/result.json, {args.output}/rl_log.jsonl")
    return 0
