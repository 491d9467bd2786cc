"""Tests for prmkit.steps: the rules, the exact round trip, and real solutions."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from prmkit.errors import PrmkitError
from prmkit.shareddata import shared_data_dir
from prmkit.steps import RULES, count_markers, detect_rule, join_steps, separator, split_steps

DATA = Path(shared_data_dir())
CONCRETE = ("blank-lines", "lines", "step-markers")


def test_separators():
    assert separator("blank-lines") == "\n\n"
    assert separator("lines") == "\n"
    assert separator("step-markers") == "\n"


@pytest.mark.parametrize("call", [lambda: split_steps("a", "paragraphs"),
                                  lambda: join_steps(["a"], "paragraphs"),
                                  lambda: separator("paragraphs")])
def test_unknown_rule_names_the_known_rules(call):
    with pytest.raises(PrmkitError) as error:
        call()
    assert "paragraphs" in str(error.value)
    assert all(rule in str(error.value) for rule in RULES)


def test_auto_has_no_separator():
    with pytest.raises(PrmkitError, match="detect_rule"):
        separator("auto")
    with pytest.raises(PrmkitError):
        join_steps(["a", "b"], "auto")


def test_blank_lines():
    assert split_steps("a\nb\n\nc", "blank-lines") == ["a\nb", "c"]
    assert split_steps("one step", "blank-lines") == ["one step"]
    # extra newlines stay at the end of the previous step, indentation with the next
    assert split_steps("a\n\n\nb", "blank-lines") == ["a\n", "b"]
    assert split_steps("a  \n\n  b", "blank-lines") == ["a  ", "  b"]
    # a line of spaces is not a blank line (the separator must be exactly "\n\n")
    assert split_steps("a\n \nb", "blank-lines") == ["a\n \nb"]


def test_lines():
    assert split_steps("a\nb\nc", "lines") == ["a", "b", "c"]
    assert split_steps("a\n\nb", "lines") == ["a\n", "b"]  # empty lines are not steps
    assert split_steps("a\n  b", "lines") == ["a", "  b"]


def test_leading_and_trailing_whitespace_stay_in_the_outer_steps():
    assert split_steps("\n\na\nb\n", "lines") == ["\n\na", "b\n"]
    assert split_steps("  a\n\nb \n\n", "blank-lines") == ["  a", "b \n\n"]
    assert split_steps("  a\n\nb \n\n".strip(), "blank-lines") == ["a", "b"]


@pytest.mark.parametrize("text", ["", " ", "\n\n\t\n"])
def test_whitespace_only_text_has_no_steps(text):
    for rule in RULES:
        assert split_steps(text, rule) == []
    assert join_steps([], "lines") == ""


def test_step_markers():
    text = ("Step 1: add.\nStep 2. multiply\n**Step 3:** check\nmore of step 3\n"
            "## Step 4\ndone\n  - step 5) end\n__STEP 6__ last")
    assert split_steps(text, "step-markers") == [
        "Step 1: add.", "Step 2. multiply", "**Step 3:** check\nmore of step 3",
        "## Step 4\ndone", "  - step 5) end", "__STEP 6__ last"]
    assert count_markers(text) == 6


def test_step_markers_only_at_line_start():
    text = "Step 1: see step 2 below.\nSteps 1-3 are easy.\nStep 2: as in Step 1."
    assert split_steps(text, "step-markers") == [
        "Step 1: see step 2 below.\nSteps 1-3 are easy.", "Step 2: as in Step 1."]
    assert count_markers("Stepwise 1\nStep one\nstep 12a") == 0


def test_step_markers_introduction_is_its_own_step():
    text = "Let's think.\n\nStep 1: a\n\nStep 2: b"
    assert split_steps(text, "step-markers") == ["Let's think.\n", "Step 1: a\n", "Step 2: b"]
    # whitespace before the first marker is kept at the start of step 1
    assert split_steps("\n Step 1: a\nStep 2: b", "step-markers") == ["\n Step 1: a", "Step 2: b"]
    assert split_steps("no markers\nat all", "step-markers") == ["no markers\nat all"]


def test_auto():
    markers = "Intro\n\nStep 1: a\nStep 2: b"
    assert detect_rule(markers) == "step-markers"
    assert split_steps(markers) == ["Intro\n", "Step 1: a", "Step 2: b"]
    one_marker = "Step 1: a\nb\n\nc"
    assert detect_rule(one_marker) == "blank-lines"
    assert split_steps(one_marker) == ["Step 1: a\nb", "c"]
    assert detect_rule("a\nb\n\n") == "lines"  # a trailing blank line is not between steps
    assert split_steps("a\nb") == ["a", "b"]


def _random_text(rng: random.Random) -> str:
    pieces = ["a", "bc", "x = 1.", " ", "  ", "\t", "\n", "\n", "\n\n", "\n\n\n", "\n \n",
              "Step 1:", "**Step 2.**", "## Step 3", "step 4)", "Steps 5"]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))


@pytest.mark.parametrize("rule", RULES)
def test_round_trip_is_exact_for_random_texts(rule):
    rng = random.Random(rule)
    for _ in range(3000):
        text = _random_text(rng)
        steps = split_steps(text, rule)
        if not text.strip():
            assert steps == []
            continue
        joined_by = detect_rule(text) if rule == "auto" else rule
        assert join_steps(steps, joined_by) == text, (rule, text, steps)
        assert all(step.strip() for step in steps), (rule, text, steps)


@pytest.mark.parametrize("rule", CONCRETE)
def test_normal_form_round_trip(rule):
    """Clean steps survive join -> split unchanged, and a normal-form text splits into
    steps without surrounding whitespace."""
    rng = random.Random(rule)
    words = ["a", "b c", "x = 1.", "$y$", "**bold**", "\\frac{1}{2}"]
    for _ in range(1000):
        steps = []
        for index in range(rng.randint(1, 6)):
            body = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
            if rule == "blank-lines" and rng.random() < 0.3:
                body += "\n" + rng.choice(words)  # one line break inside a paragraph is fine
            if rule == "step-markers":
                body = f"Step {index + 1}: {body}"
            steps.append(body)
        text = join_steps(steps, rule)
        assert split_steps(text, rule) == steps
        assert all(step == step.strip() for step in steps)
        if len(steps) >= 2:
            assert detect_rule(text) == rule
            assert split_steps(text) == steps


@pytest.mark.skipif(not (DATA / "gsm8k").is_dir(), reason="shared data not found")
def test_gsm8k_reference_solutions_split_into_lines():
    rows = [json.loads(line) for line in (DATA / "gsm8k" / "test.jsonl").open()]
    assert len(rows) == 1319
    for row in rows:
        answer = row["answer"]
        steps = split_steps(answer, "lines")
        assert join_steps(steps, "lines") == answer
        if "\n\n" not in answer:  # all but 2 references
            assert steps == answer.split("\n")
            assert detect_rule(answer) == "lines"


@pytest.mark.skipif(not (DATA / "processbench_dev").is_dir(), reason="shared data not found")
def test_processbench_steps_survive_join_and_split():
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        records = json.loads((DATA / "processbench_dev" / f"{split}.json").read_text())
        for record in records:
            steps = record["steps"]
            assert split_steps(join_steps(steps, "blank-lines"), "blank-lines") == steps, record["id"]
