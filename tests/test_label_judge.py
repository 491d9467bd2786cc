"""The LLM judge: ProcessBench's critique prompt, verdict parsing, majority of samples,
unparseable outputs counted (not dropped)."""

from __future__ import annotations

import pytest

from prmkit.errors import PrmkitError
from prmkit.generate.fake import FakeGenerator
from prmkit.generate.prompts import STYLES, Prompter
from prmkit.label.judge import (JudgeConfig, critique_text, judge_prompt, label_judge, majority,
                                parse_verdict)
from prmkit.records import Record

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHAT = Prompter(STYLES["chat"], CHATML)


def test_the_critique_prompt_is_processbenchs():
    text = critique_text("  What is 2 + 3?\n", ["2 + 3 = 6.", "The answer is 6."])
    assert text.startswith("The following is a math problem and a solution (split into "
                           "paragraphs, enclosed with tags and indexed from 0):\n\n[Math Problem]"
                           "\n\nWhat is 2 + 3?\n\n[Solution]\n\n<paragraph_0>\n2 + 3 = 6.\n"
                           "</paragraph_0>\n\n<paragraph_1>\nThe answer is 6.\n</paragraph_1>\n\n"
                           "Your task is to review")
    assert text.endswith("return the index of -1 (which typically denotes \"not found\").\n\n"
                         "Please put your final answer (i.e., the index) in \\boxed{}.")
    # a chat model gets it as the only user message; the system instruction is not used
    prompt = judge_prompt(CHAT, "What is 2 + 3?", ["2 + 3 = 6."])
    assert prompt.startswith("<|im_start|>user\nThe following is a math problem")
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n") and "system" not in prompt
    assert judge_prompt(Prompter(STYLES["few-shot"]), "p", ["a"]).endswith("\\boxed{}.\n\n")


@pytest.mark.parametrize("text,n,verdict", [
    ("Paragraph 1 is wrong. \\boxed{1}", 3, 1),
    ("No error. \\boxed{-1}", 3, -1),
    ("first \\boxed{0} then on reflection \\boxed{ 2 }", 3, 2),   # the last box counts
    ("\\boxed{$1$}", 3, 1),
    ("\\boxed{3}", 3, None),                                       # out of range
    ("\\boxed{-2}", 3, None),
    ("\\boxed{paragraph 1}", 3, None),
    ("the earliest error is in paragraph 1", 3, None),             # no box
    ("", 3, None),
])
def test_parse_verdict(text, n, verdict):
    assert parse_verdict(text, n) == verdict


def test_majority_and_its_tie_break():
    assert majority([2, 2, 1], 4) == 2
    assert majority([None, None, 1], 4) == 1
    assert majority([None, None], 4) is None
    assert majority([-1, 2], 4) == 2          # a tie goes to the earliest error
    assert majority([3, 1, 3, 1, -1], 4) == 1


def outputs(script: dict[str, list[str]]) -> FakeGenerator:
    """A judge that answers ``script[problem][k]`` as sample k."""
    def answer(prompt: str, k: int) -> str:
        problem = next(p for p in script if f"[Math Problem]\n\n{p}\n\n" in prompt)
        return script[problem][k % len(script[problem])]
    return FakeGenerator(answer)


def test_label_judge_counts_unparseable_outputs():
    recs = [Record(id=str(i), problem=f"problem {i}", steps=["a", "b", "c"],
                   labels=[1.0, 1.0, 1.0]) for i in range(4)]
    judge = outputs({"problem 0": ["\\boxed{1}", "I think \\boxed{1}", "\\boxed{-1}"],
                     "problem 1": ["\\boxed{-1}"],
                     "problem 2": ["no idea", "\\boxed{7}", "hmm"],
                     "problem 3": ["\\boxed{0}", "garbage", "\\boxed{2}"]})
    out = list(label_judge(recs, judge, CHAT, JudgeConfig(samples=3, temperature=0.7, chunk=3),
                           judge="fake"))
    assert [r.first_error for r in out] == [1, -1, None, 0]
    assert out[0].labels == [1.0, 0.0, None] and out[1].labels == [1.0] * 3
    assert out[2].labels is None                      # no verdict: no labels, not old ones
    meta = [r.meta["judge"] for r in out]
    assert [m["unparseable"] for m in meta] == [0, 0, 3, 1]
    assert meta[3]["votes"] == [0, None, 2] and meta[3]["unparsed_tails"] == ["garbage"]
    assert meta[0]["model"] == "fake" and meta[0]["samples"] == 3
    assert [len(c["prompts"]) for c in judge.calls] == [3, 1]          # chunks of 3 records
    assert judge.calls[0]["n"] == 3 and judge.calls[0]["stop"] == []


def test_several_samples_need_a_temperature():
    with pytest.raises(PrmkitError, match="temperature"):
        JudgeConfig(samples=4, temperature=0.0)
