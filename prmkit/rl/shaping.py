"""Step rewards for PPO-style trainers: the score of step k on the last token of step k.

1. **Shaping** step scores s_0 .. s_{K-1} into step rewards r_0 .. r_{K-1}:

   ``raw``     r_k = s_k (Math-Shepherd's step-by-step PPO, Wang et al. 2023). The return from
               step k sums the later scores, so more fine-looking steps earn more: the
               summation Cheng et al. (2025) blame for reward hacking.
   ``delta``   r_k = s_k - s_{k-1}, s_{-1} = 0: potential-based shaping (Ng, Harada & Russell
               1999) with the PRM score as potential; the return from step k telescopes to
               s_{K-1} - s_{k-1}, so padding with steps earns nothing.
   ``min``     PURE's min-form credit assignment (Cheng et al. 2025, "Stop Summation"):
               r_k = m_k - m_{k+1}, m_k = min(s_k, ..., s_{K-1}), m_K = 0, so the undiscounted
               return from step k is exactly m_k (the temperature-0 limit of PURE's softmin).

2. **Alignment**: step k's reward goes on the token of the policy's tokenization that carries
   the step's last visible character (:func:`token_char_ends`, from the offset mapping or by
   decoding the sampled ids; :func:`place`); every other token gets 0.

Steps come from the completion by the rule of :mod:`prmkit.steps` that made the steps the PRM
scored (:func:`step_spans`).
"""

from __future__ import annotations

from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.steps import detect_rule, separator, split_steps

SHAPINGS = ("raw", "delta", "min")


def shape(step_scores: Sequence[float], how: str) -> list[float]:
    """Step rewards from step scores (see the module docstring)."""
    if how not in SHAPINGS:
        raise PrmkitError(f"unknown shaping {how!r} (known: {', '.join(SHAPINGS)})")
    s = [float(x) for x in step_scores]
    if how == "raw":
        return s
    if how == "delta":
        return [b - a for a, b in zip([0.0] + s[:-1], s)]
    suffix_min: list[float] = []
    for x in reversed(s):
        suffix_min.append(x if not suffix_min else min(x, suffix_min[-1]))
    m = suffix_min[::-1] + [0.0]
    return [m[k] - m[k + 1] for k in range(len(s))]


def returns(rewards: Sequence[float]) -> list[float]:
    """Undiscounted returns: the sum of the rewards from each position to the end."""
    out: list[float] = []
    total = 0.0
    for r in reversed(rewards):
        total += r
        out.append(total)
    return out[::-1]


def step_spans(text: str, rule: str = "lines") -> list[tuple[int, int]]:
    """(start, end) character spans of the steps of ``text`` without surrounding whitespace;
    ``text[a:b]`` for each span are the steps a PRM should score."""
    steps = split_steps(text, rule)
    if not steps:
        return []
    sep = len(separator(detect_rule(text) if rule == "auto" else rule))
    spans = []
    pos = 0
    for s in steps:
        lead = len(s) - len(s.lstrip())
        spans.append((pos + lead, pos + len(s.rstrip())))
        pos += len(s) + sep
    return spans


def token_char_ends(tokenizer: Any, text: str | None = None,
                    ids: Sequence[int] | None = None) -> list[int]:
    """For each token, the character offset in the text where it ends.

    With ``text``: the tokenizer's own offset mapping of that text (a fast tokenizer). With
    ``ids`` (the tokens the policy actually sampled, whose decoding is the text): the length of
    the decoded prefix after each token, so the alignment holds even where re-tokenising the text
    would give other tokens. Special tokens (an end-of-turn token) decode to nothing and end where
    the previous token ended.
    """
    if (text is None) == (ids is None):
        raise PrmkitError("token_char_ends: give text or ids, not both")
    if text is not None:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if "offset_mapping" not in enc:
            raise PrmkitError("the tokenizer has no offset mapping (use a fast tokenizer, or "
                              "pass the sampled ids)")
        return [int(b) for _, b in enc["offset_mapping"]]
    ends = []
    for i in range(len(ids)):  # type: ignore[arg-type]
        ends.append(len(tokenizer.decode(list(ids[:i + 1]), skip_special_tokens=True,  # type: ignore[index]
                                         clean_up_tokenization_spaces=False)))
    return ends


def step_end_tokens(spans: Sequence[tuple[int, int]], char_ends: Sequence[int]) -> list[int | None]:
    """The index of the token that carries each step's last character (the first token whose
    end reaches the step's end); None for a step past the last token (a cut completion)."""
    out: list[int | None] = []
    t = 0
    for _, end in spans:
        while t < len(char_ends) and char_ends[t] < end:
            t += 1
        out.append(t if t < len(char_ends) else None)
    return out


def place(step_rewards: Sequence[float], end_tokens: Sequence[int | None], n_tokens: int) -> list[float]:
    """Per-token rewards: step k's reward on token ``end_tokens[k]`` (added, if two steps end in
    the same token), 0 elsewhere. A step with no token (None) is dropped."""
    if len(step_rewards) != len(end_tokens):
        raise PrmkitError(f"{len(step_rewards)} step rewards for {len(end_tokens)} steps")
    out = [0.0] * n_tokens
    for r, t in zip(step_rewards, end_tokens):
        if t is not None:
            out[t] += r
    return out


def token_rewards(tokenizer: Any, text: str, step_scores: Sequence[float | None], how: str,
                  rule: str = "lines", ids: Sequence[int] | None = None) -> list[float]:
    """The whole chain for one completion: step spans by ``rule``, shaping ``how``, placement
    on the policy's tokens (``ids`` if given, else the tokenisation of ``text``). A null step
    score (a step the PRM could not read) counts as 0."""
    return placed_rewards(tokenizer, text, step_scores, how, rule, ids)[0]


def placed_rewards(tokenizer: Any, text: str, step_scores: Sequence[float | None], how: str,
                   rule: str = "lines", ids: Sequence[int] | None = None,
                   ) -> tuple[list[float], list[int | None]]:
    """:func:`token_rewards` and the step-end token of each step."""
    spans = step_spans(text, rule)
    if len(spans) != len(step_scores):
        raise PrmkitError(f"{len(step_scores)} step scores for a completion of {len(spans)} steps")
    ends = token_char_ends(tokenizer, ids=ids) if ids is not None else token_char_ends(tokenizer, text=text)
    rewards = shape([0.0 if s is None else s for s in step_scores], how)
    end_tokens = step_end_tokens(spans, ends)
    return place(rewards, end_tokens, len(ends)), end_tokens
