"""The GRPO recipe: per-step process advantages worked by hand on a stand-in trainer (no TRL
needed), config checks, and with TRL installed (``pip install 'prmkit[rl]'``, or `.venv-bench`)
a real GRPO run of a tiny model on lab problems."""

from __future__ import annotations

import json

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.rl.grpo import RLConfig, process_trainer
from prmkit.rl.rewards import ProcessReward, RewardConfig


@pytest.fixture
def word_tokenizer():
    """Words, spaces and newlines are tokens of their own; <pad> (id 0) is special."""
    import tiny

    return tiny.word_tokenizer("<pad>", "[UNK]", pad_token="<pad>")


class ScoreByStep:
    """'x = 1' scores 1.0, any other step 0.5."""

    def score(self, problems, steps):
        return [[1.0 if s == "x = 1" else 0.5 for s in sol] for sol in steps]


def stand_in(tokenizer, ids, mask, advantages):
    class FakeGRPO:  # what process_trainer needs of TRL's GRPOTrainer
        def __init__(self, **kwargs):
            self.processing_class, self.num_generations = tokenizer, 2

        def _generate_and_score_completions(self, inputs):
            return {"completion_ids": ids, "completion_mask": mask, "advantages": advantages}

    return process_trainer(FakeGRPO)


def test_process_advantages_worked_by_hand(word_tokenizer):
    # a group of 2: A = "x = 1\ny = 2." (11 tokens), B = "x = 1" (5 tokens, then padding)
    a = word_tokenizer("x = 1\ny = 2.", add_special_tokens=False)["input_ids"]
    b = word_tokenizer("x = 1", add_special_tokens=False)["input_ids"] + [0] * 6
    ids = torch.tensor([a, b])
    mask = torch.tensor([[1] * 11, [1] * 5 + [0] * 6])
    cls = stand_in(word_tokenizer, ids, mask, torch.tensor([0.5, -0.5]))
    reward = ProcessReward(ScoreByStep(), RewardConfig(mode="prm"))
    trainer = cls(step_reward=reward, shaping="raw", step_weight=2.0, step_rule="lines")
    out = trainer._generate_and_score_completions([{"problem": "q"}, {"problem": "q"}])
    # raw rewards: A gets 1.0 on token 4 ("1") and 0.5 on token 10 ("2."), B 1.0 on token 4.
    # returns: A 1.5 (tokens 0-4), 0.5 (5-10); B 1.0 (0-4). Baseline: mean(1.5, 1.0) = 1.25.
    # process advantage: A +0.25 then -0.75; B -0.25 then 0 (after its last step / padding).
    want_a = [0.5 + 2 * 0.25] * 5 + [0.5 + 2 * -0.75] * 6
    want_b = [-0.5 + 2 * -0.25] * 5 + [-0.5] * 6
    assert out["advantages"].tolist() == [pytest.approx(want_a), pytest.approx(want_b)]


def test_min_form_process_advantages(word_tokenizer):
    a = word_tokenizer("x = 1\ny = 2.", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([a, a])
    mask = torch.ones(2, 11, dtype=torch.long)
    cls = stand_in(word_tokenizer, ids, mask, torch.tensor([0.0, 0.0]))
    trainer = cls(step_reward=ProcessReward(ScoreByStep(), RewardConfig(mode="prm")),
                  shaping="min", step_weight=1.0, step_rule="lines")
    out = trainer._generate_and_score_completions([{"problem": "q"}] * 2)
    # min-form returns: min(1.0, 0.5) = 0.5 up to step 0's end, 0.5 after; identical
    # completions, so the baseline 0.5 cancels: every advantage 0
    assert out["advantages"].abs().max().item() == pytest.approx(0.0)


def test_config_checks():
    with pytest.raises(PrmkitError, match="needs --prm"):
        RLConfig(output="x", reward="outcome+prm-steps")
    with pytest.raises(PrmkitError):
        RLConfig(output="x", reward="steps")
    with pytest.raises(PrmkitError):
        RLConfig(output="x", num_generations=1)
    with pytest.raises(PrmkitError):
        RLConfig(output="x", reward="prm", prm="lab-gold", shaping="sum")


def test_grpo_runs_on_a_tiny_model_with_step_rewards(tmp_path, tiny_base):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from prmkit.rl.grpo import run_rl

    cfg = RLConfig(output=str(tmp_path / "rl"), policy=tiny_base, reward="outcome+prm-steps",
                   prm="lab-gold", lab_problems=4, eval_problems=2, max_steps=2,
                   num_generations=2, prompts_per_step=1, max_completion_length=12, last_k=1)
    result = run_rl(cfg)
    assert set(result["before"]) >= {"accuracy", "prm", "steps", "length_tokens"}
    correct = result["before"]["correct"]  # one 0/1 per held-out problem, averaging to accuracy
    assert len(correct) == 2 and set(correct) <= {0, 1}
    assert sum(correct) / 2 == pytest.approx(result["before"]["accuracy"])
    assert [row["step"] for row in result["log"]] == [0, 1]
    saved = json.loads((tmp_path / "rl" / "result.json").read_text())
    assert saved["after"] == result["after"]
    assert (tmp_path / "rl" / "policy" / "prmkit_delta.safetensors").is_file()


def test_grpo_resumed_after_a_kill_ends_like_an_unbroken_run(tmp_path, tiny_base):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    import shutil

    from safetensors.torch import load_file

    from prmkit.rl.grpo import run_rl

    def cfg(name, **kw):
        return RLConfig(**{**dict(output=str(tmp_path / name), policy=tiny_base,
                                  reward="outcome+prm", prm="lab-gold", lab_problems=4,
                                  eval_problems=2, max_steps=3, num_generations=2,
                                  prompts_per_step=1, max_completion_length=12, last_k=1,
                                  save_every=1), **kw})

    whole = run_rl(cfg("whole"))
    # the same run, "killed" after step 2: its last checkpoint and later log lines are lost
    run_rl(cfg("killed"))
    out = tmp_path / "killed"
    shutil.rmtree(out / "trl" / "checkpoint-3")
    shutil.rmtree(out / "policy")
    (out / "result.json").unlink()
    lines = [x for x in (out / "rl_log.jsonl").read_text().splitlines()
             if json.loads(x)["step"] < 2]  # killed while step 2 was being logged
    (out / "rl_log.jsonl").write_text("\n".join(lines) + '\n{"step": 2, "pr')
    resumed = run_rl(cfg("killed"))
    assert resumed["before"] == whole["before"] and resumed["after"] == whole["after"]
    assert [r["step"] for r in resumed["log"]] == [0, 1, 2]
    assert resumed["log"] == whole["log"]
    a = load_file(tmp_path / "whole" / "policy" / "prmkit_delta.safetensors")
    b = load_file(out / "policy" / "prmkit_delta.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # other settings are refused, --no-resume starts again
    with pytest.raises(PrmkitError, match="other settings"):
        run_rl(cfg("killed", lr=2e-5))
    again = run_rl(cfg("killed", resume=False, max_steps=1, save_every=0))
    assert [r["step"] for r in again["log"]] == [0]
    assert not (out / "trl").exists() or not any(p.name.startswith("checkpoint")
                                                 for p in (out / "trl").iterdir())
