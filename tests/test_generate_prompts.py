"""Prompt styles, the generator helpers in base.py, and the scripted fake generator."""

from __future__ import annotations

import pytest

from prmkit.errors import PrmkitError
from prmkit.generate.base import Completion, cut_at_stop, find_stop, sample_seed
from prmkit.generate.fake import FakeGenerator, count_tokens
from prmkit.generate.prompts import (STYLES, Prompter, has_final_answer, make_prompter,
                                     render_chat, style_for)
from prmkit.steps import split_steps

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


# ------------------------------------------------------------------------------- base helpers


def test_find_stop_takes_the_match_that_ends_first():
    assert find_stop("a\n\nb", ["\n\n", "\n"]) == (2, "\n")
    assert find_stop("ab ки c", ["ки", "b"]) == (2, "b")
    assert find_stop("xyz", ["q"]) is None
    # at equal ends the longer string wins; incremental scanning finds only new matches
    assert find_stop("step\n\n", ["\n", "p\n"]) == (5, "p\n")
    assert find_stop("a\nb\n", ["\n"], start=2) == (4, "\n")
    assert cut_at_stop("one\ntwo\n", ["\n"]) == ("one\n", "\n")
    assert cut_at_stop("one", ["\n"]) == ("one", None)


def test_sample_seed_is_a_stable_hash():
    assert sample_seed(0, "p", 1) == sample_seed(0, "p", 1)
    seeds = {sample_seed(s, p, k) for s in (0, 1) for p in ("p", "q") for k in range(3)}
    assert len(seeds) == 12 and all(0 <= s < 2 ** 31 for s in seeds)
    assert 0 <= sample_seed(None, "p", 0) < 2 ** 31                      # fresh randomness


def test_completion_invariants():
    with pytest.raises(ValueError):
        Completion("x", 1, "stop")            # a stop without its string
    with pytest.raises(ValueError):
        Completion("x", 1, "eos", stop="\n")
    with pytest.raises(ValueError):
        Completion("x", 1, "done")


# ------------------------------------------------------------------------------- prompts


def test_render_chat_matches_transformers():
    tiny = pytest.importorskip("tiny")
    pytest.importorskip("transformers")
    tok = tiny.tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert render_chat(tok.chat_template, messages) == expected


def test_chat_prompt_and_continuation():
    p = Prompter(STYLES["chat"], CHATML)
    head = p.prompt("What is 2+3? ")
    assert head.startswith("<|im_start|>system\nSolve the math problem step by step.")
    assert head.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    assert p.separator == "\n" and p.rule == "lines" and p.end_strings == []
    assert p.prompt("What is 2+3? ", ["2 + 3 = 5.", "The answer is 5."]) == \
        head + "2 + 3 = 5.\nThe answer is 5.\n"


def test_few_shot_prompt_teaches_the_step_rule():
    p = Prompter(STYLES["few-shot"])
    text = p.prompt("Sam has 2 cats and 3 dogs. How many pets?")
    assert text.endswith("\n\nQuestion: Sam has 2 cats and 3 dogs. How many pets?\nAnswer:\n")
    blocks = text.split("\n\n")
    assert len(blocks) == 5                                   # instruction, 3 examples, the problem
    for block in blocks[1:4]:
        question, solution = block.split("\nAnswer:\n")
        steps = split_steps(solution, p.rule)
        assert len(steps) >= 3 and steps[-1].startswith("The answer is ")
    assert p.end_strings == ["\n\n", "\nQuestion:"]
    # blank-line steps: examples get a stronger break, and two blank lines end a solution
    b = Prompter(STYLES["few-shot"], step_rule="blank-lines")
    assert b.separator == "\n\n" and "\n\n\nQuestion:" in b.prompt("x")
    assert b.end_strings == ["\n\n\n", "\nQuestion:"]


def test_style_choice_and_errors():
    assert style_for("smollm2-135m", None).name == "chat"
    assert style_for("gemma3-270m", "template").name == "few-shot"
    assert style_for("some/model", "template").name == "chat"
    assert style_for("some/model", None).name == "few-shot"
    assert style_for("smollm2-135m", "t", "few-shot").name == "few-shot"
    with pytest.raises(PrmkitError, match="needs a chat template"):
        make_prompter("x", None, style="chat")
    with pytest.raises(PrmkitError, match="unknown prompt style"):
        style_for("x", None, "cot")
    with pytest.raises(PrmkitError, match="step rule"):
        Prompter(STYLES["few-shot"], step_rule="auto")


def test_has_final_answer():
    assert has_final_answer("The answer is 5.")
    assert has_final_answer("So the final answer is $\\boxed{5}$")
    assert not has_final_answer("She has 5 apples.")
    for stated in ("A: 26", "Answer: 26", "Final answer: 26", "#### 26"):
        assert has_final_answer(stated), stated
    for not_stated in ("A cat has 4 legs.", "Area: 26 square feet."):
        assert not has_final_answer(not_stated), not_stated


# ------------------------------------------------------------------------------- fake generator


def test_fake_generator_follows_the_rules():
    fake = FakeGenerator(lambda prompt, k: f"step {k} a\nstep b\nend")
    [[c0, c1]] = fake.generate(["p"], n=2, stop=["\n"], max_tokens=50)
    assert (c0.text, c0.finish_reason, c0.stop, c0.n_tokens) == ("step 0 a\n", "stop", "\n", 4)
    assert c1.text == "step 1 a\n"
    [[c]] = fake.generate(["p"], n=1, max_tokens=50)
    assert (c.text, c.finish_reason, c.n_tokens) == ("step 0 a\nstep b\nend", "eos", 7)
    [[c]] = fake.generate(["p"], n=1, max_tokens=2)
    assert (c.text, c.finish_reason, c.n_tokens) == ("step 0", "length", 2)
    assert count_tokens("a b\nc") == 3 and fake.calls[0]["stop"] == ["\n"]
