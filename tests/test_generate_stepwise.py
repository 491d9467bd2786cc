"""Step-wise continuation: one next step, or the end of the solution (the acceptance rule),
with the scripted fake (exact) and with a tiny real model (the invariant on random text)."""

from __future__ import annotations

import pytest

from prmkit.generate.fake import FakeGenerator
from prmkit.generate.prompts import STYLES, Prompter
from prmkit.generate.stepwise import Step, next_step, next_steps, solve

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROBLEM = "Tom has 3 apples and buys 5 more. How many apples does he have?"
SOLUTIONS = [["Tom starts with 3 apples.", "He buys 5 more: 3 + 5 = 8.", "The answer is 8."],
             ["3 + 5 = 9.", "The answer is 9."]]


@pytest.fixture
def chat():
    return Prompter(STYLES["chat"], CHATML)


def test_walks_a_known_solution_one_step_at_a_time(chat):
    fake = FakeGenerator.from_solutions(chat, {PROBLEM: SOLUTIONS})
    steps: list[str] = []
    while True:
        [s] = next_step(fake, chat, PROBLEM, steps, n=1)
        steps.append(s.step)
        if s.done:
            break
        assert s.text.endswith("\n") and s.finish_reason == "stop"
    assert steps == SOLUTIONS[0] and (s.text, s.finish_reason) == ("The answer is 8.", "eos")
    # a step that states the answer ends the solution, whatever the model would add after it
    rambling = FakeGenerator.from_solutions(chat, {PROBLEM: [["3 + 5 = 8.", "The answer is 8.",
                                                              "Now a poem."]]})
    [s] = next_step(rambling, chat, PROBLEM, ["3 + 5 = 8."], n=1)
    assert (s.text, s.done, s.finish_reason) == ("The answer is 8.\n", True, "stop")


def test_samples_branch_and_end(chat):
    fake = FakeGenerator.from_solutions(chat, {PROBLEM: SOLUTIONS})
    [[a, b]] = next_steps(fake, chat, [(PROBLEM, [])], n=2)
    assert (a.text, a.done, b.text, b.done) == ("Tom starts with 3 apples.\n", False, "3 + 5 = 9.\n", False)
    # a complete solution: nothing follows, the end comes back as an empty done step
    [end] = next_step(fake, chat, PROBLEM, SOLUTIONS[1], n=1)
    assert (end.text, end.done, end.finish_reason) == ("", True, "eos")
    # a last step without an answer phrase ends at the end token
    fake2 = FakeGenerator.from_solutions(chat, {PROBLEM: [["3 + 5 = 8", "so 8"]]})
    [last] = next_step(fake2, chat, PROBLEM, ["3 + 5 = 8"], n=1)
    assert (last.text, last.done, last.finish_reason) == ("so 8", True, "eos")


def test_one_call_for_all_partial_solutions(chat):
    fake = FakeGenerator.from_solutions(chat, {PROBLEM: SOLUTIONS})
    out = next_steps(fake, chat, [(PROBLEM, []), (PROBLEM, SOLUTIONS[0][:1])], n=3, seed=1)
    assert len(fake.calls) == 1 and fake.calls[0]["stop"] == ["\n"]
    assert [s.step for s in out[1]] == ["He buys 5 more: 3 + 5 = 8."] * 3


def test_blank_lines_are_not_steps(chat):
    # the model starts with a blank line; the sample goes on to the real step
    scripts = {"A?": "\nFirst step.\nSecond.", "B?": "\n\n\n\nnever"}

    def fn(prompt, k):
        problem = "A?" if chat.prompt("A?") in prompt else "B?"
        written = prompt[len(chat.prompt(problem)):]
        return scripts[problem][len(written):]

    [[a], [b]] = next_steps(FakeGenerator(fn), chat, [("A?", []), ("B?", [])], n=1, max_blank=2)
    assert (a.text, a.step, a.done) == ("\nFirst step.\n", "First step.", False)
    assert a.n_tokens == 1 + 3                      # "\n", then "First", " step." and "\nSecond."
    assert (b.text, b.done) == ("", True)           # too many blank lines: the end


def test_few_shot_blank_line_ends_the_solution():
    p = Prompter(STYLES["few-shot"])
    fake = FakeGenerator(lambda prompt, k: "\nQuestion: next")
    [s] = next_step(fake, p, PROBLEM, ["3 + 5 = 8."], n=1)
    assert (s.text, s.done, s.finish_reason) == ("", True, "stop")
    # whole solutions: the end string is cut off
    fake2 = FakeGenerator(lambda prompt, k: "3 + 5 = 8.\nThe answer is 8.\n\nQuestion: more")
    [[sol]] = solve(fake2, p, [PROBLEM], n=1)
    assert sol.text == "3 + 5 = 8.\nThe answer is 8." and sol.completion.stop == "\n\n"


def test_step_property():
    assert Step("\n  a step \n", False, "stop", 3, 10, "\n").step == "a step"
    assert Step("x\n\n", False, "stop", 3, 10, "\n\n").step == "x"


def test_tiny_model_returns_one_step_or_the_end():
    torch = pytest.importorskip("torch")
    tiny = pytest.importorskip("tiny")
    from prmkit.generate.hf import HFGenConfig, HFGenerator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = HFGenerator(tiny.causal_lm(), tiny.tokenizer(), HFGenConfig(dtype="float32"))
        chat = Prompter(STYLES["chat"], tiny.CHATML)
        for steps in ([], ["Step 1: 2 + 3 = 5."]):
            out = next_step(gen, chat, "What is 2 + 3?", steps, n=6, max_tokens=24, seed=0)
            for s in out:
                assert "\n" not in s.step                 # never more than one step
                if not s.done:
                    assert s.text.endswith("\n") and s.step
                else:
                    assert s.finish_reason in ("eos", "length", "stop")
    finally:
        torch.set_num_threads(threads)
