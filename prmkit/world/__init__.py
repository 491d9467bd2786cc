"""The lab world: problems whose every step is checked exactly (problems), the synthetic policy
that solves them (policy) and the gold PRM (oracle). Below the jobs that use it (generation, RL,
labelling) and the lab's experiments (:mod:`prmkit.lab`)."""

from prmkit.world.oracle import GoldPRM
from prmkit.world.policy import LAB_STYLE, LabPolicy, LabPolicyConfig, load_lab_policy
from prmkit.world.problems import (LabConfig, check_step, gold_labels, gold_record, make_problems,
                                   parse_problem, reference_steps)

__all__ = ["LAB_STYLE", "GoldPRM", "LabConfig", "LabPolicy", "LabPolicyConfig", "check_step",
           "gold_labels", "gold_record", "make_problems", "parse_problem", "reference_steps",
           "load_lab_policy"]
