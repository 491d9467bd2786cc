"""Per-step PRM advantages inside TRL's GRPO trainer (``prmkit rl --reward *-steps``).

TRL's ``GRPOTrainer`` takes one scalar reward per completion, but its loss accepts token-level
advantages (batch x tokens). :func:`process_trainer` subclasses it: after TRL has scored a
batch, the PRM's step scores of each completion (kept by :class:`prmkit.rl.rewards.ProcessReward`)
become a per-token term X_t, and the advantage of token t is ``A_outcome + weight * X_t``:

* ``raw``, ``delta``, ``min`` (:mod:`prmkit.rl.shaping`): step rewards on step-end tokens,
  summed into returns-to-go (undiscounted, PPO with gamma = lambda = 1 and no critic), centred
  by the mean return at the start of the completion's group (a GRPO baseline); tokens after the
  last step get 0. PRIME (Cui et al. 2025) and PURE (Cheng et al. 2025) combine outcome and
  process advantages this way.
* ``process``, ``step-local`` (:mod:`prmkit.rl.advantage`): DeepSeekMath's group-normalised
  step rewards summed to go, or the change in the PRM score each step caused; each step's value
  on every token of that step.

A group may span processes (``accelerate``): the group baselines and statistics are gathered.
This overrides TRL's private ``_generate_and_score_completions`` and is tested against trl 1.13.
"""

from __future__ import annotations

from typing import Any, Callable

from prmkit.errors import PrmkitError


def process_trainer(base: Any) -> Any:
    """A subclass of TRL's ``GRPOTrainer`` (``base``) that adds per-step PRM advantages (see
    the module docstring)."""
    from prmkit.rl.advantage import GROUP_FORMS

    class ProcessGRPOTrainer(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, step_reward: Any, shaping: str, step_weight: float,
                     step_rule: str, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.step_reward, self.shaping = step_reward, shaping
            self.step_weight, self.step_rule = step_weight, step_rule

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            ids, mask = out["completion_ids"], out["completion_mask"]
            tok = self.processing_class
            texts = tok.batch_decode(ids, skip_special_tokens=True)
            scored = self.step_reward.last  # scored by the reward functions just now
            if [s.text for s in scored] != texts:
                scored = self.step_reward.score([x["problem"] for x in inputs], texts)
            ends = [step_ends(tok, self.step_rule, s, ids[b, :int(mask[b].sum())].tolist())
                    for b, s in enumerate(scored)]
            form = group_form if self.shaping in GROUP_FORMS else returns_form
            process_adv = form(scored, ends, tuple(ids.shape), self.shaping,
                               self.num_generations, self._gather)
            adv = out["advantages"]
            adv = adv[:, None] if adv.dim() == 1 else adv
            out["advantages"] = adv + self.step_weight * process_adv.to(adv.device) * mask
            return out

        def _gather(self, x: Any) -> tuple[Any, Any]:
            """Every process's rows of ``x`` (a group may span processes) and this one's."""
            acc = getattr(self, "accelerator", None)
            if acc is not None and acc.num_processes > 1:
                n = len(x)
                return (acc.gather(x.to(acc.device)).cpu(),
                        slice(acc.process_index * n, (acc.process_index + 1) * n))
            return x, slice(None)

    return ProcessGRPOTrainer


def scores(scored: Any) -> list[float]:
    """A completion's step scores, a step the PRM could not read counted as 0."""
    return [0.0 if x is None else float(x) for x in scored.step_scores or []]


def step_ends(tokenizer: Any, rule: str, scored: Any, ids: list[int]) -> tuple[int, list[int | None]]:
    """(tokens, the step-end token of each step) of one completion; (0, []) for a completion
    with no steps or no tokens."""
    from prmkit.rl.shaping import step_end_tokens, step_spans, token_char_ends

    if not scored.steps or not ids:
        return 0, []
    spans = step_spans(scored.text, rule)
    if len(spans) != len(scores(scored)):
        raise PrmkitError(f"{len(scores(scored))} step scores for a completion of {len(spans)} steps")
    return len(ids), step_end_tokens(spans, token_char_ends(tokenizer, ids=ids))


def returns_form(scored: Any, ends: Any, shape: tuple[int, int], shaping: str,
                 group: int, gather: Callable[[Any], tuple[Any, Any]]) -> Any:
    """raw/delta/min: returns-to-go minus the group's mean return at the start."""
    import torch

    from prmkit.rl.shaping import place, returns
    from prmkit.rl.shaping import shape as shape_scores

    process = torch.zeros(shape, dtype=torch.float32)
    covered = torch.zeros(shape, dtype=torch.bool)  # up to the last step's end
    for b, (s, (n, end)) in enumerate(zip(scored, ends)):
        if not n:
            continue
        rewards = place(shape_scores(scores(s), shaping), end, n)
        last = max((t for t in end if t is not None), default=-1)
        process[b, :n] = torch.tensor(returns(rewards))
        covered[b, :last + 1] = True
    start = torch.where(covered[:, 0], process[:, 0], torch.zeros(len(scored)))
    everyone, mine = gather(start)
    groups = everyone.view(-1, group).mean(dim=1)
    baseline = groups.repeat_interleave(group)[mine][:, None]
    return torch.where(covered, process - baseline, torch.zeros_like(process))


def group_form(scored: Any, ends: Any, shape: tuple[int, int], shaping: str,
               group: int, gather: Callable[[Any], tuple[Any, Any]]) -> Any:
    """process / step-local (:mod:`prmkit.rl.advantage`), spread over each step's tokens;
    TRL's outcome advantage is already in the trainer's advantages."""
    import torch

    from prmkit.rl.advantage import local_deltas, normalised_returns, spread

    sums = torch.tensor([[sum(scores(s)), sum(x * x for x in scores(s)), float(len(scores(s)))]
                         for s in scored], dtype=torch.float64)
    everyone, mine = gather(sums)
    g = everyone.view(-1, group, 3).sum(dim=1).repeat_interleave(group, dim=0)[mine]
    process = torch.zeros(shape, dtype=torch.float32)
    for b, (s, (n, end)) in enumerate(zip(scored, ends)):
        if not n:
            continue
        if shaping == "process":
            count = max(1.0, float(g[b, 2]))
            mean = float(g[b, 0]) / count
            std = max(0.0, float(g[b, 1]) / count - mean * mean) ** 0.5
            values = normalised_returns(scores(s), mean, std)
        else:
            values = local_deltas(scores(s))
        process[b, :n] = torch.tensor(spread(values, end, n))
    return process
