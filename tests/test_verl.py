"""prmkit.rl.verl.compute_score called the way verl calls it, on the rows verl's own
preprocessing writes.

verl's naive reward manager (verl/workers/reward_manager/naive.py, ``__call__``) calls
``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)`` with
keywords only: ``solution_str`` is the decoded response without the prompt, ``extra_info`` the
row's ``extra_info`` with ``num_turns`` and ``rollout_reward_scores`` added. The rows below are
what examples/data_preprocess/gsm8k.py and math_dataset.py write (``make_map_fn``).
"""

from __future__ import annotations

import pytest

from prmkit.errors import PrmkitError
from prmkit.rl import verl
from prmkit.rl.rewards import ProcessReward, RewardConfig
from test_rl_adapters import BAD, GOOD, SevenIsWrong

QUESTION = "What is 2 + 3?"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def gsm8k_row(idx=0):
    """examples/data_preprocess/gsm8k.py: extra_info keeps the raw question and answer."""
    return {"data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": QUESTION + " " + INSTRUCTION}],
            "reward_model": {"style": "rule", "ground_truth": "5"},
            "extra_info": {"split": "train", "index": idx, "answer": "2 + 3 = 5\n#### 5",
                           "question": QUESTION}}


def math_row(idx=0, one_line_change=False):
    """examples/data_preprocess/math_dataset.py: extra_info is {split, index} only; with the
    one-line change documented in prmkit.rl.verl, the question too."""
    question = QUESTION + " " + INSTRUCTION
    extra = {"split": "test", "index": idx}
    if one_line_change:
        extra = {"split": "test", "index": idx, "question": question}
    return {"data_source": "DigitalLearningGmbH/MATH-lighteval",
            "prompt": [{"role": "user", "content": question}],
            "reward_model": {"style": "rule", "ground_truth": "5"}, "extra_info": extra}


def naive_reward_manager_call(row, response):
    """What verl's NaiveRewardManager passes for one sample."""
    extra_info = dict(row.get("extra_info", {}))
    extra_info["num_turns"] = None
    extra_info["rollout_reward_scores"] = {}
    return verl.compute_score(data_source=row["data_source"], solution_str=response,
                              ground_truth=row["reward_model"]["ground_truth"], extra_info=extra_info)


@pytest.fixture
def prm_reward(monkeypatch):
    oracle = SevenIsWrong()
    monkeypatch.setattr(verl, "_REWARD", ProcessReward(oracle, RewardConfig(mode="outcome+prm",
                                                                            prm_weight=0.5)))
    return oracle


def test_gsm8k_rows_give_the_prm_its_question(prm_reward):
    good = naive_reward_manager_call(gsm8k_row(), GOOD)
    bad = naive_reward_manager_call(gsm8k_row(), BAD)
    assert good["score"] == pytest.approx(1.45) and bad["score"] == pytest.approx(0.05)
    assert prm_reward.calls[0][0] == [QUESTION]


def test_math_rows_need_the_one_line_change(prm_reward, monkeypatch):
    with pytest.raises(PrmkitError, match="one-line change") as e:
        naive_reward_manager_call(math_row(), GOOD)
    assert '"question": question' in str(e.value) and "index" in str(e.value)
    out = naive_reward_manager_call(math_row(one_line_change=True), GOOD)
    assert out["score"] == pytest.approx(1.45) and out["n_steps"] == 2.0
    assert prm_reward.calls[-1][0] == [QUESTION + " " + INSTRUCTION]
    # the prompt's chat messages, if a dataset puts them in extra_info, give the user turn
    row = math_row()
    row["extra_info"]["prompt"] = row["prompt"]
    naive_reward_manager_call(row, GOOD)
    assert prm_reward.calls[-1][0] == [QUESTION + " " + INSTRUCTION]


def test_outcome_reward_needs_no_problem(monkeypatch):
    monkeypatch.delenv("PRMKIT_REWARD_MODEL", raising=False)
    monkeypatch.setattr(verl, "_REWARD", None)
    assert naive_reward_manager_call(math_row(), GOOD)["score"] == 1.0
