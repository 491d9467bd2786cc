"""verl reward functions backed by prmkit: ``compute_score`` (one sample) and
``compute_score_batch`` (verl's batch reward manager, one PRM call per batch).

verl loads them from a file::

    custom_reward_function.path=$(python -c "import prmkit.rl.verl as m; print(m.__file__)")
    custom_reward_function.name=compute_score          # or compute_score_batch

and calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` (the batch
manager: the plural names). The PRM and the mode come from the environment, read once per
process:

``PRMKIT_REWARD_MODEL``      a PRM folder, a default model name, or the URL of ``prmkit serve``
                             (one server for many workers); unset: outcome reward only
``PRMKIT_REWARD_MODE``       outcome, prm or outcome+prm (default: outcome+prm with a model,
                             outcome without)
``PRMKIT_REWARD_AGGREGATE``  min (default), prod, mean, last, geomean
``PRMKIT_PRM_WEIGHT``        weight of the PRM term (default 1.0)
``PRMKIT_TOKEN``             bearer token for a remote PRM

``solution_str`` is the response without its prompt, so the problem must be in the dataset's
``extra_info``: ``question``, else ``problem``, else ``prompt`` (a string or chat messages);
without it a PRM reward raises an error saying so (docs/serving.md, "verl"). The returned dict:
``score``, ``acc`` (1.0 / 0.0), ``prm`` (-1.0 without a PRM) and ``n_steps``.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.rl.rewards import ProcessReward, RewardConfig, Scored, open_prm

_REWARD: ProcessReward | None = None


def reward_from_env() -> ProcessReward:
    """The process's :class:`ProcessReward`, built once from the environment variables."""
    global _REWARD
    if _REWARD is None:
        model = os.environ.get("PRMKIT_REWARD_MODEL") or None
        mode = os.environ.get("PRMKIT_REWARD_MODE") or ("outcome+prm" if model else "outcome")
        config = RewardConfig(mode=mode,
                              aggregate=os.environ.get("PRMKIT_REWARD_AGGREGATE", "min"),
                              prm_weight=float(os.environ.get("PRMKIT_PRM_WEIGHT", "1.0")))
        _REWARD = ProcessReward(open_prm(model) if config.uses_prm and model else None, config)
    return _REWARD


MISSING_PROBLEM = (
    "verl reward: extra_info has no problem text for the PRM to read (keys: {keys}). verl "
    "passes only the response as solution_str; put the problem in the dataset's extra_info, "
    "as verl's GSM8K preprocessing does ('question'). For verl's MATH preprocessing "
    "(examples/data_preprocess/math_dataset.py) the one-line change is: "
    "\"extra_info\": {{\"split\": split, \"index\": idx, \"question\": question}}")


def _problem(extra_info: Any, solution_str: str) -> str:
    info = extra_info if isinstance(extra_info, dict) else {}
    for key in ("question", "problem"):
        if isinstance(info.get(key), str):
            return info[key]
    prompt = info.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):   # chat messages, as verl's datasets store the prompt
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    if reward_from_env().config.uses_prm:
        raise PrmkitError(MISSING_PROBLEM.format(keys=", ".join(sorted(map(str, info))) or "none"))
    return ""


def _result(s: Scored) -> dict[str, float]:
    return {"score": float(s.reward), "acc": float(bool(s.correct)),
            "prm": float(s.prm) if s.prm is not None else -1.0, "n_steps": float(len(s.steps))}


def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                  extra_info: Any = None, **kwargs: Any) -> dict[str, float]:
    """verl's per-sample reward function (see the module docstring)."""
    scored = reward_from_env().score([_problem(extra_info, solution_str)], [solution_str],
                                     [ground_truth])
    return _result(scored[0])


def compute_score_batch(data_sources: Sequence[str], solution_strs: Sequence[str],
                        ground_truths: Sequence[Any], extra_infos: Sequence[Any] | None = None,
                        **kwargs: Any) -> list[dict[str, float]]:
    """verl's batch reward function: one PRM call for the whole batch."""
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    problems = [_problem(i, s) for i, s in zip(infos, solution_strs)]
    return [_result(s) for s in reward_from_env().score(problems, list(solution_strs),
                                                        list(ground_truths))]
