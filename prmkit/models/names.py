"""Public PRMs by name: the step format each one reads, chosen from its hub id.

A public PRM's folder holds no ``prmkit_format.json``; its recipe (its model card, its
evaluation script) fixes how its input is built and where it is read. Each entry here names
a preset of :data:`prmkit.stepformat.PRESETS` that ``tests/test_recipes.py`` checks against
that recipe on the model family's real tokenizer. ``--format`` overrides the table.
"""

from __future__ import annotations

# hub id (case as published) -> (step format preset, what the model is)
PUBLIC_PRMS: dict[str, tuple[str, str]] = {
    "Qwen/Qwen2.5-Math-PRM-7B": ("qwen-prm", "Qwen2, 2-class head at <extra_0>; needs "
                                              "--trust-remote-code"),
    "Qwen/Qwen2.5-Math-PRM-72B": ("qwen-prm", "Qwen2, 2-class head at <extra_0>; needs "
                                               "--trust-remote-code"),
    "peiyi9979/math-shepherd-mistral-7b-prm": ("math-shepherd", "Mistral-7B, P(+) against "
                                                                 "P(-) at the ки tag"),
    "RLHFlow/Llama3.1-8B-PRM-Mistral-Data": ("rlhflow", "Llama 3.1 8B, P(+) against P(-) "
                                                         "before each + turn"),
    "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data": ("rlhflow", "Llama 3.1 8B, P(+) against P(-) "
                                                          "before each + turn"),
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B": ("skywork-prm", "Qwen2.5 1.5B, a value head "
                                                                   "(sigmoid) at each step's newline"),
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-7B": ("skywork-prm", "Qwen2.5 7B, a value head "
                                                                 "(sigmoid) at each step's newline"),
}
_BY_LOWER = {name.lower(): fmt for name, (fmt, _) in PUBLIC_PRMS.items()}


def format_for(name: str) -> str | None:
    """The step format preset of a public PRM's hub id (any letter case), or None."""
    return _BY_LOWER.get(name.strip().rstrip("/").lower())
