"""Public PRMs by name: the step format each one reads, chosen from its hub id.

A public PRM's folder holds no ``prmkit_format.json``; its recipe (its model card, its
evaluation script) fixes how its input is built and where it is read. Each entry here names
a preset of :data:`prmkit.stepformat.PRESETS` that ``tests/test_recipes.py`` checks against
that recipe on the model family's real tokenizer. ``--format`` overrides the table.
"""

from __future__ import annotations

from typing import NamedTuple


class PublicPRM(NamedTuple):
    """A public PRM: the step format preset its recipe reads, and what the model is."""

    format: str
    about: str


# hub id (case as published) -> its format and what it is
PUBLIC_PRMS: dict[str, PublicPRM] = {
    "Qwen/Qwen2.5-Math-PRM-7B": PublicPRM("qwen-prm", "Qwen2, 2-class head at <extra_0>"),
    "Qwen/Qwen2.5-Math-PRM-72B": PublicPRM("qwen-prm", "Qwen2, 2-class head at <extra_0>"),
    "peiyi9979/math-shepherd-mistral-7b-prm": PublicPRM(
        "math-shepherd", "Mistral-7B, P(+) against P(-) at the ки tag"),
    "RLHFlow/Llama3.1-8B-PRM-Mistral-Data": PublicPRM(
        "rlhflow", "Llama 3.1 8B, P(+) against P(-) before each + turn"),
    "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data": PublicPRM(
        "rlhflow", "Llama 3.1 8B, P(+) against P(-) before each + turn"),
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B": PublicPRM(
        "skywork-prm", "Qwen2.5 1.5B, a value head (sigmoid) at each step's newline"),
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-7B": PublicPRM(
        "skywork-prm", "Qwen2.5 7B, a value head (sigmoid) at each step's newline"),
}
# the public PRMs whose recipes run the model's own code (transformers' trust_remote_code)
REMOTE_CODE = frozenset({"Qwen/Qwen2.5-Math-PRM-7B", "Qwen/Qwen2.5-Math-PRM-72B"})
_BY_LOWER = {name.lower(): fmt for name, (fmt, _) in PUBLIC_PRMS.items()}
_REMOTE_LOWER = {name.lower() for name in REMOTE_CODE}


def _key(name: str) -> str:
    return name.strip().rstrip("/").lower()


def format_for(name: str) -> str | None:
    """The step format preset of a public PRM's hub id (any letter case), or None."""
    return _BY_LOWER.get(_key(name))


def needs_remote_code(name: str) -> bool:
    """Whether the public PRM ``name`` (a hub id, any letter case) runs its own code, so that
    loading it needs ``--trust-remote-code``."""
    return _key(name) in _REMOTE_LOWER


def is_remote(model: str) -> bool:
    """True when ``--model`` names a server (``http://`` or ``https://``), not a model."""
    return model.strip().lower().startswith(("http://", "https://"))
