"""The lab: a world of synthetic multi-step problems with exact step labels (world/), the
verifiers trained in it (verifiers/), and one folder per experiment (demo/, traceerror/,
activelearning/, rl/, computeoptimal/), each a job (run) with its statistics and report; the
statistics they share are in stats.py."""

from prmkit.lab.world.oracle import GoldPRM
from prmkit.lab.world.policy import LAB_STYLE, LabPolicy, LabPolicyConfig
from prmkit.lab.world.problems import (LabConfig, check_step, gold_labels, gold_record, make_problems,
                              parse_problem, reference_steps)

__all__ = ["LAB_STYLE", "GoldPRM", "LabConfig", "LabPolicy", "LabPolicyConfig", "check_step",
           "gold_labels", "gold_record", "make_problems", "parse_problem", "reference_steps",
           "load_lab_policy"]


def load_lab_policy(name: str = "lab"):
    """``(LabPolicy, its prompter)`` for a policy name ``lab``, ``lab:SLIP``,
    ``lab:SLIP:CONFUSE`` or ``lab:SLIP:CONFUSE:RECOVER`` (e.g. ``lab:0.2:0``; see
    :class:`LabPolicyConfig`)."""
    from prmkit.errors import PrmkitError

    parts = name.split(":")[1:]
    try:
        if len(parts) > 3:
            raise ValueError
        values = dict(zip(("slip", "confuse", "recover"), (float(x) for x in parts)))
        config = LabPolicyConfig(**values)
    except (ValueError, PrmkitError):
        raise PrmkitError(f"policy {name!r}: write lab, lab:SLIP, lab:SLIP:CONFUSE or "
                          f"lab:SLIP:CONFUSE:RECOVER, with SLIP in [0, 1) and CONFUSE and "
                          f"RECOVER in [0, 1]") from None
    policy = LabPolicy(config)
    return policy, policy.prompter
