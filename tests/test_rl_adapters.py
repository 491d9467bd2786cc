"""RL adapters: shaping choices worked by hand, step-end alignment on a hand-made tokenizer,
the TRL reward function (standard and conversational completions), verl's compute_score and
the reward-hacking flags. No RL library is needed."""

from __future__ import annotations

import math

import pytest

from prmkit.errors import PrmkitError
from prmkit.rl import diagnostics, shaping, verl
from prmkit.rl.rewards import ProcessReward, RewardConfig, completion_text, problem_text


# ---------------------------------------------------------------------------------------------
# shaping


def test_shapings_worked_by_hand():
    s = [0.9, 0.5, 0.7]
    assert shaping.shape(s, "raw") == [0.9, 0.5, 0.7]
    assert shaping.shape(s, "delta") == pytest.approx([0.9, -0.4, 0.2])
    # delta telescopes: the return from the start is the last score
    assert sum(shaping.shape(s, "delta")) == pytest.approx(0.7)
    # min-form: suffix minima m = [0.5, 0.5, 0.7], rewards m_k - m_{k+1} with m_3 = 0
    assert shaping.shape(s, "min") == pytest.approx([0.0, -0.2, 0.7])
    assert shaping.returns(shaping.shape(s, "min")) == pytest.approx([0.5, 0.5, 0.7])
    assert shaping.returns([1.0, 2.0, 3.0]) == [6.0, 5.0, 3.0]
    assert shaping.shape([], "min") == []
    with pytest.raises(PrmkitError):
        shaping.shape(s, "sum")


def test_min_form_returns_are_suffix_minima():
    import random

    rng = random.Random(0)
    for _ in range(50):
        s = [rng.random() for _ in range(rng.randint(1, 6))]
        got = shaping.returns(shaping.shape(s, "min"))
        assert got == pytest.approx([min(s[k:]) for k in range(len(s))])


def test_step_spans_worked_by_hand():
    text = "  x = 1\nthen 2 \nThe answer is 2.\n"
    assert shaping.step_spans(text, "lines") == [(2, 7), (8, 14), (16, 32)]
    assert [text[a:b] for a, b in shaping.step_spans(text, "lines")] == [
        "x = 1", "then 2", "The answer is 2."]
    assert shaping.step_spans("a\n\nb c\nd", "blank-lines") == [(0, 1), (3, 8)]
    assert shaping.step_spans("   ", "lines") == []


@pytest.fixture
def word_tokenizer():
    """Words, spaces and newlines are tokens of their own: offsets are known by hand."""
    import tiny

    return tiny.word_tokenizer("[UNK]", "<end>", eos_token="<end>")


def test_step_rewards_land_on_the_last_token_of_each_step(word_tokenizer):
    text = "x = 1\ny = 2."
    # tokens: x ' ' = ' ' 1 \n y ' ' = ' ' 2.   (11 tokens; step 0 ends with "1" = token 4,
    # step 1 ends with "2." = token 10)
    ends = shaping.token_char_ends(word_tokenizer, text=text)
    assert ends == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12]
    spans = shaping.step_spans(text, "lines")
    assert shaping.step_end_tokens(spans, ends) == [4, 10]
    got = shaping.token_rewards(word_tokenizer, text, [0.8, 0.3], "delta")
    assert got == pytest.approx([0, 0, 0, 0, 0.8, 0, 0, 0, 0, 0, -0.5])
    # the sampled ids (with an end token the text does not show) align the same way
    ids = word_tokenizer(text, add_special_tokens=False)["input_ids"] + [8]
    assert shaping.token_char_ends(word_tokenizer, ids=ids) == ends + [12]
    got = shaping.token_rewards(word_tokenizer, text, [0.8, 0.3], "raw", ids=ids)
    assert got == pytest.approx([0, 0, 0, 0, 0.8, 0, 0, 0, 0, 0, 0.3, 0])
    with pytest.raises(PrmkitError):
        shaping.token_rewards(word_tokenizer, text, [0.8], "raw")


def test_alignment_on_a_bpe_tokenizer_puts_each_reward_on_the_token_holding_the_step_end():
    import tiny

    tok = tiny.tokenizer()
    text = "Step 1: 2 + 3 = 5.\nStep 2: The answer is 5."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    ends = shaping.token_char_ends(tok, ids=ids)
    assert ends == shaping.token_char_ends(tok, text=text)
    spans = shaping.step_spans(text, "lines")
    for (_, end), t in zip(spans, shaping.step_end_tokens(spans, ends)):
        assert ends[t] >= end and (t == 0 or ends[t - 1] < end)
    assert shaping.place([1.0, 2.0], [3, 3], 5) == [0, 0, 0, 3.0, 0]
    assert shaping.place([1.0], [None], 2) == [0, 0]


# ---------------------------------------------------------------------------------------------
# the TRL reward function


class SevenIsWrong:
    """An oracle PRM: a step is wrong (0.1) exactly when it contains '7', else 0.9."""

    def __init__(self):
        self.calls = []

    def score(self, problems, steps):
        self.calls.append((list(problems), [list(s) for s in steps]))
        return [[0.1 if "7" in x else 0.9 for x in s] for s in steps]


GOOD = "2 + 3 = 5.\nThe answer is 5."
BAD = "2 + 3 = 7.\nThe answer is 7."


def test_trl_reward_modes_by_hand():
    prm = SevenIsWrong()
    kwargs = {"answer": ["#### 5", "#### 5", "#### 5"], "problem": ["What is 2+3?"] * 3}
    completions = [GOOD, BAD, ""]
    outcome = ProcessReward(None, RewardConfig(mode="outcome"))
    assert outcome(["p"] * 3, completions, **kwargs) == [1.0, 0.0, 0.0]
    only_prm = ProcessReward(prm, RewardConfig(mode="prm", aggregate="min"))
    assert only_prm(["p"] * 3, completions, **kwargs) == [0.9, 0.1, 0.0]
    both = ProcessReward(prm, RewardConfig(mode="outcome+prm", aggregate="prod", prm_weight=0.5))
    assert both(["p"] * 3, completions, **kwargs) == pytest.approx([1 + 0.5 * 0.81, 0.005, 0.0])
    # the PRM saw the problem column and the steps of the non-empty completions only
    assert prm.calls[-1] == (["What is 2+3?"] * 2, [["2 + 3 = 5.", "The answer is 5."],
                                                     ["2 + 3 = 7.", "The answer is 7."]])
    assert [s.step_scores for s in both.last] == [[0.9, 0.9], [0.1, 0.1], []]
    assert [s.correct for s in both.last] == [True, False, False]


def test_trl_conversational_prompts_and_completions_and_logging():
    prm = SevenIsWrong()
    reward = ProcessReward(prm, RewardConfig(mode="prm"))
    prompts = [[{"role": "system", "content": "Solve."}, {"role": "user", "content": "2+3?"}]]
    completions = [[{"role": "assistant", "content": GOOD}]]
    logged = {}
    got = reward(prompts, completions, log_metric=lambda k, v: logged.__setitem__(k, v),
                 trainer_state=None, completion_ids=[[1, 2]])
    assert got == [0.9]
    assert prm.calls[-1][0] == ["2+3?"]
    assert logged["prmkit/prm"] == 0.9 and logged["prmkit/steps"] == 2.0
    assert completion_text("abc") == "abc" and problem_text("q") == "q"
    with pytest.raises(PrmkitError):
        problem_text([{"role": "system", "content": "x"}])
    with pytest.raises(PrmkitError):
        completion_text(3)


def test_trl_reward_needs_a_reference_for_outcome_and_a_prm_for_prm():
    with pytest.raises(PrmkitError, match="reference"):
        ProcessReward(None, RewardConfig(mode="outcome"))(["p"], [GOOD])
    with pytest.raises(PrmkitError, match="needs a PRM"):
        ProcessReward(None, RewardConfig(mode="prm"))
    with pytest.raises(PrmkitError):
        RewardConfig(mode="sum")


def test_unreadable_steps_score_zero():
    class TooLong:
        def score(self, problems, steps):
            return [[None] * len(s) for s in steps]

    reward = ProcessReward(TooLong(), RewardConfig(mode="prm"))
    assert reward(["p"], [GOOD]) == [0.0]


# ---------------------------------------------------------------------------------------------
# verl


def test_verl_compute_score(monkeypatch):
    monkeypatch.delenv("PRMKIT_REWARD_MODEL", raising=False)
    monkeypatch.setattr(verl, "_REWARD", None)
    out = verl.compute_score("gsm8k", GOOD, "5", {"question": "2+3?"})
    assert out == {"score": 1.0, "acc": 1.0, "prm": -1.0, "n_steps": 2.0}
    monkeypatch.setattr(verl, "_REWARD", ProcessReward(SevenIsWrong(), RewardConfig(
        mode="outcome+prm", prm_weight=0.5)))
    assert verl.compute_score("gsm8k", BAD, "5", {"question": "2+3?"})["score"] == \
        pytest.approx(0.05)
    batch = verl.compute_score_batch(["a", "b"], [GOOD, BAD], ["5", "5"],
                                     [{"question": "q"}, {"problem": "q"}])
    assert [b["score"] for b in batch] == pytest.approx([1.45, 0.05])
    assert [b["prm"] for b in batch] == pytest.approx([0.9, 0.1])
    with pytest.raises(PrmkitError, match="question"):
        verl.compute_score("gsm8k", GOOD, "5", {})


# ---------------------------------------------------------------------------------------------
# diagnostics


def row(step, prm, acc, length=10.0, steps=2.0):
    return diagnostics.StepStats(step, prm, acc, length, steps, 4)


def test_hacking_flag_when_prm_reward_rises_while_accuracy_falls():
    rows = [row(0, 0.5, 0.5), row(1, 0.5, 0.5), row(2, 0.6, 0.3), row(3, 0.7, 0.2)]
    # window 2 at step 3: prm (0.6+0.7)/2 - 0.5 = +0.15, accuracy (0.3+0.2)/2 - 0.5 = -0.25
    flags = diagnostics.hacking_flags(rows, window=2)
    assert [f.step for f in flags] == [3]
    assert flags[0].prm_change == pytest.approx(0.15)
    assert flags[0].accuracy_change == pytest.approx(-0.25)
    assert "possible reward hacking" in str(flags[0])
    both_rise = [row(0, 0.5, 0.5), row(1, 0.5, 0.5), row(2, 0.6, 0.6), row(3, 0.7, 0.7)]
    assert diagnostics.hacking_flags(both_rise, window=2) == []
    assert diagnostics.hacking_flags(rows[:3], window=2) == []  # not two windows yet
    skipped = [row(0, None, 0.5)] + rows
    assert [f.step for f in diagnostics.hacking_flags(skipped, window=2)] == [3]


def test_reward_log_means_merge_and_table(tmp_path):
    reward = ProcessReward(SevenIsWrong(), RewardConfig(mode="outcome+prm"))
    log = diagnostics.RewardLog(str(tmp_path / "log.jsonl"))
    reward.score(["q", "q"], [GOOD, BAD], ["5", "5"])
    first = log.add(0, reward.last)
    assert (first.prm, first.accuracy, first.n_steps) == (pytest.approx(0.5), 0.5, 2.0)
    assert first.length == (len(GOOD) + len(BAD)) / 2
    reward.score(["q"], [GOOD], ["5"])
    merged = log.add(0, reward.last)  # same step: merged, weighted by count
    assert len(log.rows) == 1 and merged.n == 3
    assert merged.accuracy == pytest.approx(2 / 3)
    assert merged.prm == pytest.approx((0.9 + 0.1 + 0.9) / 3)
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 2
    assert "prm reward" in diagnostics.table(log.rows)
    assert math.isclose(log.rows[0].n_steps, 2.0)


def test_reward_parts_share_one_prm_call_per_batch():
    from prmkit.rl.rewards import RewardPart

    prm = SevenIsWrong()
    scorer = ProcessReward(prm, RewardConfig(mode="outcome+prm"))
    outcome, step = RewardPart(scorer, "outcome"), RewardPart(scorer, "prm")
    kwargs = {"reference": ["5", "5"], "problem": ["q", "q"]}
    assert outcome(["p", "p"], [GOOD, BAD], **kwargs) == [1.0, 0.0]
    assert step(["p", "p"], [GOOD, BAD], **kwargs) == [0.9, 0.1]
    assert len(prm.calls) == 1 and outcome.__name__ == "prmkit_outcome"
    step(["p", "p"], [BAD, GOOD], **kwargs)  # a new batch is scored again
    assert len(prm.calls) == 2
    with pytest.raises(PrmkitError):
        RewardPart(ProcessReward(None, RewardConfig(mode="outcome")), "prm")
