"""The lab: the verifiers trained in the lab world (:mod:`prmkit.world`, re-exported here for the
experiments), and one folder per experiment (demo/, traceerror/, activelearning/, rl/,
computeoptimal/), each a job (run) with its statistics and report; the statistics they share are
in stats.py."""

from prmkit.world import (LAB_STYLE, GoldPRM, LabConfig, LabPolicy, LabPolicyConfig, check_step,
                          gold_labels, gold_record, load_lab_policy, make_problems, parse_problem,
                          reference_steps)

__all__ = ["LAB_STYLE", "GoldPRM", "LabConfig", "LabPolicy", "LabPolicyConfig", "check_step",
           "gold_labels", "gold_record", "make_problems", "parse_problem", "reference_steps",
           "load_lab_policy"]
