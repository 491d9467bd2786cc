"""Turning the texts an RL trainer sends into (problem, steps), and step scores into rewards.

OpenRLHF's remote reward model (``--remote_rm_url http://HOST:PORT/get_reward``) posts ``{"query",
"prompts", "labels"}``: ``query[i]`` the whole rollout decoded with special tokens kept,
``prompts[i]`` its prompt, ``labels[i]`` a reference answer (accepted and ignored). It expects
``{"rewards", "scores", "extra_logs"}``, with one number per query in every ``extra_logs`` value;
per-step scores go in ``step_scores`` and ``step_scores_padded``.

:func:`split_query` cuts a query: with a prompt, the response follows the prompt and the problem
is the prompt's last user turn (ChatML, Llama 3, Gemma) or the whole prompt; without one, a
chat-templated query's response follows the last assistant header, and a plain query's first
piece by the step rule is the problem. End-of-turn tokens (:data:`END_MARKERS`) at the
response's end are dropped; steps are stripped, empty ones dropped (docs/serving.md,
"OpenRLHF").

:func:`rewards_from_scores`: a solution's reward is its step scores aggregated by one rule of
:mod:`prmkit.aggregate` (``min`` by default, as Math-Shepherd, Wang et al. 2023); no scored step
gives 0.0. ``scores`` (OpenRLHF's 0-1 score for dynamic filtering) equals ``rewards``.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from prmkit.aggregate import AGGREGATES, aggregate
from prmkit.errors import PrmkitError
from prmkit.generate.prompts import END_TOKENS
from prmkit.steps import split_steps

# (user turn, assistant header) of the chat templates recognised in queries and prompts.
_USER_TURNS = [
    re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S),
    re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.S),
    re.compile(r"<start_of_turn>user\n(.*?)<end_of_turn>", re.S),
]
_ASSISTANT_HEADERS = ["<|im_start|>assistant\n", "<|start_header_id|>assistant<|end_header_id|>\n\n",
                      "<start_of_turn>model\n"]
# End-of-turn and end-of-text tokens dropped from the end of a response: the policy's, as
# decoded with the special tokens kept (prmkit's generators' end tokens, and a few more).
END_MARKERS = END_TOKENS + ("</s>", "<|end_of_text|>", "<\uff5cend\u2581of\u2581sentence\uff5c>")
PAD_SCORE = -1.0  # in step_scores_padded: no such step, or a step that was not scored


def problem_from_prompt(prompt: str) -> str:
    """The problem inside a prompt: its last user turn if it is chat-templated, else itself."""
    for pattern in _USER_TURNS:
        turns = pattern.findall(prompt)
        if turns:
            return turns[-1].strip()
    return prompt.strip()


def strip_end_tokens(text: str) -> str:
    """``text`` without trailing whitespace and end-of-turn tokens (repeatedly)."""
    text = text.rstrip()
    while True:
        for token in END_MARKERS:
            if text.endswith(token):
                text = text[: -len(token)].rstrip()
                break
        else:
            return text


def response_steps(response: str, rule: str) -> list[str]:
    """The steps of a response: end tokens dropped, split by ``rule``, stripped, non-empty."""
    pieces = split_steps(strip_end_tokens(response), rule)
    return [s.strip() for s in pieces if s.strip()]


def split_query(query: str, prompt: str | None = None, rule: str = "auto") -> tuple[str, list[str]]:
    """(problem, steps) of one OpenRLHF query (see the module docstring for the rule)."""
    if prompt is not None:
        at = query.find(prompt) if prompt else 0
        if at < 0:
            raise PrmkitError("the query does not contain its prompt, so the response cannot be "
                              "told apart (send the prompt text exactly as it starts the query, "
                              "or leave prompts out)")
        return problem_from_prompt(prompt), response_steps(query[at + len(prompt):], rule)
    for header in _ASSISTANT_HEADERS:
        at = query.rfind(header)
        if at >= 0:
            return (problem_from_prompt(query[:at]),
                    response_steps(query[at + len(header):], rule))
    pieces = response_steps(query, rule)
    if len(pieces) <= 1:
        return "", pieces
    return pieces[0], pieces[1:]


def safe_aggregate(scores: Sequence[float | None], how: str) -> float | None:
    """:func:`prmkit.aggregate.aggregate`, or None when no step was scored."""
    if not any(s is not None for s in scores):
        return None
    return aggregate(list(scores), how)


def rewards_from_scores(step_scores: Sequence[Sequence[float | None]], reward: str,
                        width: int) -> dict[str, Any]:
    """The ``/get_reward`` answer for these step scores: ``rewards``, ``scores``,
    ``extra_logs`` with one number per solution in every value (``prm_<rule>`` for every
    aggregate, 0.0 when no step was scored; ``prm_num_steps``), and ``step_scores_padded``,
    padded with -1.0 to ``width`` (the server's maximum steps). The endpoint adds the ragged
    ``step_scores``."""
    if reward not in AGGREGATES:
        raise PrmkitError(f"unknown reward rule {reward!r} (known: {', '.join(AGGREGATES)})")
    logs: dict[str, list[Any]] = {f"prm_{how}": [] for how in AGGREGATES}
    logs["prm_num_steps"] = []
    padded: list[list[float]] = []
    for row in step_scores:
        if len(row) > width:
            raise PrmkitError(f"{len(row)} steps do not fit in {width} columns")
        for how in AGGREGATES:
            value = safe_aggregate(row, how)
            logs[f"prm_{how}"].append(0.0 if value is None else value)
        logs["prm_num_steps"].append(len(row))
        padded.append([PAD_SCORE if s is None else s for s in row] + [PAD_SCORE] * (width - len(row)))
    rewards = list(logs[f"prm_{reward}"])
    return {"rewards": rewards, "scores": list(rewards), "extra_logs": logs,
            "step_scores_padded": padded}


# a field of one solution where a request takes a list of them: (written, meant)
NEAR_FIELDS = {"problem": "problems", "text": "texts", "step": "steps", "aggregate": "aggregates"}


def one_solution_hint(data: Any) -> str | None:
    """One line for a request written for one solution (``problem`` and a flat ``steps``) where
    ``/v1/score`` takes lists, one element per solution (None when it is not that)."""
    if not isinstance(data, dict):
        return None
    wrote = [(k, NEAR_FIELDS[k]) for k in data if k in NEAR_FIELDS and NEAR_FIELDS[k] not in data]
    steps = data.get("steps")
    flat = isinstance(steps, list) and bool(steps) and all(isinstance(x, str) for x in steps)
    if not wrote and not flat:
        return None
    said = [f"'{a}' where the request takes '{b}'" for a, b in wrote]
    said += ["'steps' is one solution's list of steps where the request takes a list per "
             "solution"] if flat else []
    return ("; ".join(said) + ': send lists, one element per solution: {"problems": ["..."], '
            '"steps": [["step 1", "step 2"]]}')
