"""``prmkit serve``'s /get_reward answer goes through OpenRLHF's own PPO code path.

OpenRLHF (main, 2026-08) is not installed here (it needs Ray, DeepSpeed and vLLM), so the code
between its HTTP call and its metric merge is reproduced from its source, step by step, with
the same tensor operations:

1. ``openrlhf/utils/agent.py``, ``SingleTurnAgentExecutor.execute`` and
   ``_fetch_rewards_via_http``: one request per rollout, ``{"query": [q], "prompts": [p],
   "labels": [l]}``; from the answer it keeps ``rewards``, ``scores`` (else ``rewards``) and
   ``extra_logs``.
2. ``openrlhf/trainer/ppo_utils/samples_generator.py``, ``_process_response_into_experience``:
   ``info["reward"] = torch.tensor([reward])``, ``info["score"]`` likewise, and
   ``info[key] = torch.tensor([value])`` for every ``extra_logs`` entry.
3. ``openrlhf/trainer/ppo_utils/experience.py``: ``Experience.concat_experiences`` (a micro
   batch: every info tensor right-padded on its last dimension and concatenated),
   ``split_experience_batch`` (``value[i]`` per sample) and ``make_experience_batch`` (a dict
   entry of non-numbers stays a list of the per-sample values).
4. ``openrlhf/trainer/ray/ppo_actor.py``, ``training_step``'s metric merge (a list becomes
   ``torch.tensor(v, dtype=torch.float)``) and ``ppo_train``'s reduction
   (``value.float().mean().item()``); ``ppo_trainer.py``'s ``_compute_rollout_stats``
   (``torch.cat`` of ``info["reward"]``).

A row of step scores in ``extra_logs`` (what prmkit answered before) fails in step 4 with
OpenRLHF's own error; the test shows that too.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from test_serve import PROBLEMS, STEPS, http, serving, tiny_prm  # noqa: E402


def fetch_rewards_via_http(client, query, prompt, label):
    """agent.py: the payload, the POST, and what ``execute`` keeps of the answer."""
    payload = {"query": [query], "prompts": [prompt], "labels": [label]}
    response = client.post("/get_reward", json=payload)
    response.raise_for_status()
    rewards_info = response.json()
    score_value = rewards_info.get("scores")
    if score_value is None:
        score_value = rewards_info.get("rewards")
    return {"reward": rewards_info.get("rewards"), "scores": score_value,
            "extra_logs": rewards_info.get("extra_logs") or {}}


def process_response_into_experience(output, n_tokens=6):
    """samples_generator.py: the per-sample info dict and episode tensors."""
    info = {"response_clip_ratio": torch.tensor([False])}
    info["reward"] = torch.tensor([output["reward"]])
    info["score"] = torch.tensor([output["scores"]])
    for key, value in output["extra_logs"].items():
        if isinstance(value, torch.Tensor):
            value = value.flatten()[0].item()
        info[key] = torch.tensor([value])
    return {"sequences": torch.ones(1, n_tokens, dtype=torch.long),
            "rewards": torch.tensor([output["reward"]]),
            "scores": torch.tensor([output["scores"]]), "info": info}


def zero_pad_sequences(sequences, side="right", value=0, stack=False):
    """openrlhf/utils/utils.py."""
    width = max(s.size(-1) for s in sequences)
    padded = [torch.nn.functional.pad(s, (0, width - s.size(-1)) if side == "right"
                                      else (width - s.size(-1), 0), value=value) for s in sequences]
    return torch.stack(padded, 0) if stack else torch.cat(padded, 0)


def merge_item(items):
    """experience.py, ``Experience._merge_item``."""
    if isinstance(items[0], torch.Tensor):
        return zero_pad_sequences(items, side="right")
    if isinstance(items[0], dict):
        keys = {}
        for d in items:
            for k, v in d.items():
                keys.setdefault(k, []).append(v)
        return {k: merge_item(v) for k, v in keys.items()}
    raise ValueError(f"Unsupported type: {type(items[0])}")


def concat_experiences(experiences):
    return {k: merge_item([e[k] for e in experiences]) for k in experiences[0]}


def split_experience_batch(batch):
    n = len(batch["sequences"])
    items = []
    for i in range(n):
        item = {}
        for k, v in batch.items():
            if isinstance(v, torch.Tensor):
                assert len(v) == n
                item[k] = v[i]
            else:
                for key, x in v.items():
                    if len(x) != n:
                        raise ValueError(f"Size of {k}[{key}] ({len(x)}) does not match batch_size ({n})")
                item[k] = {key: x[i] for key, x in v.items()}
        items.append(item)
    return items


def make_experience_batch(items):
    """experience.py: episode tensors stacked; an info entry of tensors stays a list."""
    out = {}
    for k, first in items[0].items():
        if isinstance(first, torch.Tensor):
            out[k] = torch.stack([item[k] for item in items])
        else:
            out[k] = {}
            for key in first:
                vals = [item[k][key] for item in items]
                out[k][key] = (torch.tensor(vals) if all(isinstance(v, (int, float)) for v in vals)
                               else vals)
    return out


def actor_metrics(experience):
    """ppo_actor.py: the info merge of ``training_step`` and the reduction of ``ppo_train``."""
    metrics, weights = {}, {}
    for k, v in experience["info"].items():
        if isinstance(v, torch.Tensor):
            metrics[k], weights[k] = v, ("token" if v.dim() == 0 else "sample")
        elif isinstance(v, list):
            metrics[k], weights[k] = torch.tensor(v, dtype=torch.float), "sample"
    n_samples = float(experience["sequences"].shape[0])
    return {k: v.float().mean().item() * n_samples for k, v in metrics.items()}


def run_ppo_step(outputs):
    samples = [process_response_into_experience(o) for o in outputs]
    batch = concat_experiences(samples)             # one micro batch of all samples
    stats = {"rollout/reward_mean": torch.cat([s["info"]["reward"] for s in samples]).float().mean().item()}
    merged = make_experience_batch(split_experience_batch(batch))
    return stats, actor_metrics(merged)


def test_openrlhf_ppo_step_runs_on_prmkits_answer():
    prm = tiny_prm()
    prompts = [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in PROBLEMS]
    queries = [p + "\n".join(s) + "<|im_end|>" for p, s in zip(prompts, STEPS)]
    offline = prm.score(PROBLEMS, STEPS)
    with serving(prm) as server, http(server) as client:
        outputs = [fetch_rewards_via_http(client, q, p, "5") for q, p in zip(queries, prompts)]
        answer = client.post("/get_reward", json={"query": queries[:1], "prompts": prompts[:1]}).json()
    assert set(answer["extra_logs"]) >= {"prm_min", "prm_num_steps"}
    assert answer["step_scores"][0] == pytest.approx(offline[0], abs=1e-5)
    assert len(answer["step_scores_padded"][0]) == 128
    stats, metrics = run_ppo_step(outputs)
    rewards = [min(s) for s in offline]
    assert stats["rollout/reward_mean"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-5)
    n = len(outputs)
    assert metrics["reward"] / n == pytest.approx(sum(rewards) / n, abs=1e-5)
    assert metrics["prm_num_steps"] / n == pytest.approx(sum(len(s) for s in STEPS) / n)
    assert metrics["prm_mean"] / n == pytest.approx(sum(sum(s) / len(s) for s in offline) / n, abs=1e-5)


def test_a_row_per_query_in_extra_logs_fails_in_openrlhf():
    """What prmkit answered before: a 128-wide row of step scores in extra_logs."""
    outputs = [{"reward": [0.5], "scores": [0.5],
                "extra_logs": {"prm_min": [0.5], "prm_step_scores": [[0.5, 0.7] + [-1.0] * 126]}}
               for _ in range(2)]
    with pytest.raises(ValueError, match="only one element tensors"):
        run_ppo_step(outputs)
