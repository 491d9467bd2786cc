"""Group advantages (prmkit.rl.advantage) worked by hand, and their path through the GRPO
trainer's per-token advantages on a stand-in trainer (no TRL needed)."""

from __future__ import annotations

import math

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.rl import advantage
from prmkit.rl.grpo import RLConfig, process_trainer
from prmkit.rl.rewards import ProcessReward, RewardConfig


def test_outcome_advantages_by_hand():
    # outcomes 1, 0, 0, 1: mean 0.5, sample std sqrt(1/3)
    sd = math.sqrt(1 / 3)
    assert advantage.outcome_advantages([1, 0, 0, 1]) == pytest.approx(
        [0.5 / sd, -0.5 / sd, -0.5 / sd, 0.5 / sd])
    assert advantage.outcome_advantages([1, 1, 1]) == [0.0, 0.0, 0.0]
    assert advantage.outcome_advantages([]) == []


def test_process_supervision_by_hand():
    # a group of two: [1, 1, 0] and [1, 1]; five rewards, mean 0.8, population std 0.4
    # normalised: 1 -> +0.5, 0 -> -2. Sums to go: [0.5+0.5-2, 0.5-2, -2] = [-1, -1.5, -2]; [1, 0.5]
    got = advantage.process_supervision([[1, 1, 0], [1, 1]])
    assert got[0] == pytest.approx([-1.0, -1.5, -2.0])
    assert got[1] == pytest.approx([1.0, 0.5])
    # every reward equal: no signal
    assert advantage.process_supervision([[1, 1], [1]]) == [[0.0, 0.0], [0.0]]
    assert advantage.group_stats([]) == (0.0, 0.0)


def test_step_local_by_hand():
    # outcomes 1, 0 (sample std sqrt(0.5)): A = +0.7071, -0.7071; scores [0.9, 0.8] and [0.9, 0.2, 0.1]
    a = 0.5 / math.sqrt(0.5)
    got = advantage.step_local([a, -a], [[0.9, 0.8], [0.9, 0.2, 0.1]], weight=2.0)
    assert got[0] == pytest.approx([a + 1.8, a - 0.2])
    assert got[1] == pytest.approx([-a + 1.8, -a - 1.4, -a - 0.2])
    assert advantage.group_advantages("step-local", [1, 0], [[0.9, 0.8], [0.9, 0.2, 0.1]],
                                      2.0) == got
    assert advantage.group_advantages("process", [0, 0], [[1, 0]], 3.0) == [[0.0, -3.0]]
    with pytest.raises(PrmkitError):
        advantage.group_advantages("sum", [1], [[1.0]])
    with pytest.raises(PrmkitError):
        advantage.step_local([1.0], [[1.0], [0.0]])


def test_spread_gives_each_token_its_steps_value():
    # steps end at tokens 1 and 4 of 6: tokens 0-1 step 0, 2-4 step 1, 5 after
    assert advantage.spread([0.5, -1.0], [1, 4], 6, after=9.0) == [0.5, 0.5, -1.0, -1.0, -1.0, 9.0]
    # a step cut off (None) gives its value to no token
    assert advantage.spread([0.5, -1.0], [1, None], 3) == [0.5, 0.5, 0.0]
    with pytest.raises(PrmkitError):
        advantage.spread([1.0], [0, 1], 2)


@pytest.fixture
def word_tokenizer():
    import tiny

    return tiny.word_tokenizer("<pad>", "[UNK]", pad_token="<pad>")


class ScoreByStep:
    """'x = 1' scores 1.0, any other step 0.5."""

    def score(self, problems, steps):
        return [[1.0 if s == "x = 1" else 0.5 for s in sol] for sol in steps]


def _trainer(tokenizer, ids, mask, advantages, shaping, weight):
    class FakeGRPO:  # what process_trainer needs of TRL's GRPOTrainer
        def __init__(self, **kwargs):
            self.processing_class, self.num_generations = tokenizer, 2

        def _generate_and_score_completions(self, inputs):
            return {"completion_ids": ids, "completion_mask": mask, "advantages": advantages}

    cls = process_trainer(FakeGRPO)
    return cls(step_reward=ProcessReward(ScoreByStep(), RewardConfig(mode="prm")),
               shaping=shaping, step_weight=weight, step_rule="lines")


def _group(tok):
    # A = "x = 1\ny = 2." (11 tokens: step 0 ends at token 4, step 1 at 10), B = "x = 1" + padding
    a = tok("x = 1\ny = 2.", add_special_tokens=False)["input_ids"]
    b = tok("x = 1", add_special_tokens=False)["input_ids"] + [0] * 6
    return torch.tensor([a, b]), torch.tensor([[1] * 11, [1] * 5 + [0] * 6])


def test_trainer_process_supervision_by_hand(word_tokenizer):
    ids, mask = _group(word_tokenizer)
    trainer = _trainer(word_tokenizer, ids, mask, torch.tensor([0.5, -0.5]), "process", 2.0)
    out = trainer._generate_and_score_completions([{"problem": "q"}] * 2)
    # scores A [1, 0.5], B [1]: mean 5/6, population std sqrt(1/18); normalised 1 -> +1/sqrt(2),
    # 0.5 -> -sqrt(2). A: step 0 gets 1/sqrt(2) - sqrt(2) = -1/sqrt(2), step 1 -sqrt(2); B: +1/sqrt(2)
    h = 1 / math.sqrt(2)
    want_a = [0.5 + 2 * -h] * 5 + [0.5 + 2 * -2 * h] * 6
    want_b = [-0.5 + 2 * h] * 5 + [-0.5] * 6
    assert out["advantages"].tolist() == [pytest.approx(want_a), pytest.approx(want_b)]


def test_trainer_step_local_by_hand(word_tokenizer):
    ids, mask = _group(word_tokenizer)
    trainer = _trainer(word_tokenizer, ids, mask, torch.tensor([0.5, -0.5]), "step-local", 2.0)
    out = trainer._generate_and_score_completions([{"problem": "q"}] * 2)
    # A: step 0 +1.0 (from 0 to 1), step 1 -0.5 (1 to 0.5); B: step 0 +1.0, nothing after
    want_a = [0.5 + 2 * 1.0] * 5 + [0.5 + 2 * -0.5] * 6
    want_b = [-0.5 + 2 * 1.0] * 5 + [-0.5] * 6
    assert out["advantages"].tolist() == [pytest.approx(want_a), pytest.approx(want_b)]


def test_config_takes_the_group_forms():
    assert RLConfig(output="x", reward="outcome+prm-steps", prm="lab-gold",
                    shaping="step-local").shaping == "step-local"
    with pytest.raises(PrmkitError, match="step-local"):
        RLConfig(output="x", reward="prm-steps", prm="lab-gold", shaping="local")


@pytest.mark.parametrize("shaping", ["process", "step-local"])
def test_grpo_runs_on_a_tiny_model_with_group_advantages(tmp_path, tiny_base, shaping):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from prmkit.rl.grpo import run_rl

    cfg = RLConfig(output=str(tmp_path / "rl"), policy=tiny_base, reward="outcome+prm-steps",
                   prm="lab-gold", shaping=shaping, lab_problems=4, eval_problems=2,
                   max_steps=2, num_generations=2, prompts_per_step=1,
                   max_completion_length=12, last_k=1, save=False)
    result = run_rl(cfg)
    assert [row["step"] for row in result["log"]] == [0, 1]
    assert result["config"]["shaping"] == shaping


def test_returns_advantages_are_todays_shapings_on_a_group():
    # the docs' example: one solution wrong from step 2 on, one right throughout
    g = [[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    # raw returns [2, 1, 0, 0, 0] and [5, 4, 3, 2, 1]; baseline mean(2, 5) = 3.5
    assert advantage.returns_advantages(g, "raw") == [[-1.5, -2.5, -3.5, -3.5, -3.5],
                                                      [1.5, 0.5, -0.5, -1.5, -2.5]]
    # delta returns s_last - s_(k-1): [0, -1, -1, 0, 0] and [1, 0, 0, 0, 0]; baseline 0.5
    assert advantage.returns_advantages(g, "delta") == [[-0.5, -1.5, -1.5, -0.5, -0.5],
                                                        [0.5, -0.5, -0.5, -0.5, -0.5]]
    # min-form: the outcome at every step, centred
    assert advantage.returns_advantages(g, "min") == [[-0.5] * 5, [0.5] * 5]
    assert advantage.returns_advantages([[], [1.0]], "raw") == [[], [0.0]]
