"""The lab world: problems, exact gold labels, the synthetic policy, the CLI."""

from __future__ import annotations

import json

import pytest

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.generate.stepwise import next_step, solve
from prmkit.lab import (GoldPRM, LabConfig, LabPolicy, LabPolicyConfig, gold_labels, gold_record,
                        load_lab_policy, make_problems, parse_problem, reference_steps)
from prmkit.world.problems import Op, Problem, evaluate
from prmkit.records import Record

# Mia has 14; +6 = 20; -5 = 15; *3 = 45; /5 = 9
MIA = Problem("Mia", "She", "marbles", 14,
              [Op("add", 6, "buys"), Op("sub", 5, "gives away"), Op("mul", 3), Op("div", 5)])
MIA_TEXT = ("Mia has 14 marbles. She buys 6 more marbles. She gives away 5 marbles. The number of "
            "marbles is then multiplied by 3. She splits the marbles into 5 equal groups and keeps "
            "one group. How many marbles does she have now?")


def test_problem_text_and_values_by_hand():
    assert MIA.text() == MIA_TEXT
    assert MIA.values == [20, 15, 45, 9]
    assert parse_problem(MIA_TEXT) == MIA
    assert reference_steps(MIA) == [
        "She buys 6 more, so she has 14 + 6 = 20 marbles.",
        "She gives away 5, so she has 20 - 5 = 15 marbles.",
        "The number is multiplied by 3: 15 * 3 = 45 marbles.",
        "One of the 5 groups has 45 / 5 = 9 marbles.",
        "The answer is 9."]


def test_make_problems_is_deterministic_and_round_trips():
    cfg = LabConfig(n=200, min_steps=1, max_steps=9, max_value=150, seed=7)
    a, b = make_problems(cfg), make_problems(cfg)
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    assert len({r.id for r in a}) == 200
    assert make_problems(LabConfig(n=5, seed=8))[0].problem != a[0].problem
    for r in a:
        p = parse_problem(r.problem)
        assert p is not None and p.text() == r.problem
        assert 1 <= len(p.ops) <= 9 and len(r.steps) == len(p.ops) + 1
        assert all(isinstance(v, int) and 1 <= v <= 150 for v in p.values)
        assert r.reference == r.answer == str(p.answer) and r.is_correct
        assert gold_labels(r.problem, r.steps) == [1] * len(r.steps)


def test_not_a_lab_problem():
    assert parse_problem("Janet has 16 ducks. How many eggs?") is None
    assert parse_problem("Mia has 4 apples. She buys 3 more pears. How many apples does she have now?") is None
    with pytest.raises(PrmkitError, match="not a lab problem"):
        gold_labels("What is 2 + 2?", ["4"])
    with pytest.raises(PrmkitError):
        LabConfig(min_steps=3, max_steps=2)


def test_gold_labels_by_hand():
    right = reference_steps(MIA)
    assert gold_labels(MIA_TEXT, right) == [1, 1, 1, 1, 1]
    # a slip at step 1 (20 - 5 = 16), then correct arithmetic on the wrong value: all wrong after
    slipped = [right[0], "She gives away 5, so she has 20 - 5 = 16 marbles.",
               "The number is multiplied by 3: 16 * 3 = 48 marbles.",
               "One of the 5 groups has 48 / 5 = 9.6 marbles.", "The answer is 9.6."]
    assert gold_labels(MIA_TEXT, slipped) == [1, 0, 0, 0, 0]
    # the wrong operation, calculated right: wrong
    assert gold_labels(MIA_TEXT, [right[0], "She gives away 5, so she has 20 + 5 = 25 marbles."]) == [1, 0]
    # true values are reached in order: going back to an earlier one is wrong
    assert gold_labels(MIA_TEXT, right[:2] + ["30 - 10 = 20"]) == [1, 1, 0]
    # several operations in one step may skip ahead
    assert gold_labels(MIA_TEXT, ["14 + 6 - 5 = 15", "15 * 3 / 5 = 9", "The answer is 9."]) == [1, 1, 1]
    # right arithmetic, wrong quantity (skipped the subtraction): wrong
    assert gold_labels(MIA_TEXT, [right[0], "20 * 3 = 60"]) == [1, 0]
    # a step with no calculation inherits; other notations work; a wrong final answer is wrong
    assert gold_labels(MIA_TEXT, ["Let us start.", "14 + 6 = 20", "20-5=15 and 15 x 3 = 45",
                                  "So 45 ÷ 5 = 9.", "The answer is 8."]) == [1, 1, 1, 1, 0]
    # an arithmetic error whose stated result happens to be a true value is still an error
    assert gold_labels(MIA_TEXT, ["14 + 5 = 20"]) == [0]
    # after the first error every step is 0, even a right one
    assert gold_labels(MIA_TEXT, ["14 + 6 = 21", "The answer is 9."]) == [0, 0]


def test_evaluate_is_plain_arithmetic_only():
    assert evaluate("14 + 6") == 20 and evaluate("45 / 5") == 9 and evaluate("(2 + 3) * 4") == 20
    assert evaluate("7 / 2") * 2 == 7
    assert evaluate("__import__('os')") is None and evaluate("12") is None and evaluate("1 / 0") is None


def test_gold_record_and_gold_prm():
    rec = Record(id="a", problem=MIA_TEXT, steps=reference_steps(MIA)[:2] + ["15 * 3 = 44"])
    g = gold_record(rec)
    assert g.labels == [1.0, 1.0, 0.0] and g.first_error == 2
    assert GoldPRM().score([MIA_TEXT], [rec.steps]) == [[1.0, 1.0, 0.0]]
    noisy = GoldPRM(noise=0.3).score([MIA_TEXT], [rec.steps])[0]
    assert noisy[0] >= 0.7 and noisy[1] >= 0.7 and noisy[2] <= 0.3 and noisy[0] != 1.0


def test_policy_without_slips_solves_everything():
    pol = LabPolicy(LabPolicyConfig(slip=0.0, confuse=0.0))
    probs = make_problems(LabConfig(n=20, max_steps=8, seed=2))
    sols = solve(pol, pol.prompter, [r.problem for r in probs], n=3, seed=0)
    for r, row in zip(probs, sols):
        for s in row:
            assert s.text.split("\n") == r.steps
            assert s.completion.finish_reason == "eos"


def test_policy_sampling_rules():
    pol, prompter = load_lab_policy("lab:0.3")
    assert pol.config.slip == 0.3 and pol.config.confuse == 0.6
    assert load_lab_policy("lab:0.1:0")[0].config.confuse == 0.0
    prompt = prompter.prompt(MIA_TEXT)
    a = pol.generate([prompt], n=8, seed=1)[0]
    b = pol.generate([prompt, prompter.prompt(MIA_TEXT, ["x = 1"])], n=4, seed=1)[0]
    assert [c.text for c in a[:4]] == [c.text for c in b]          # sample k is its own stream
    assert len({c.text for c in a}) > 1
    greedy = pol.generate([prompt], n=4, temperature=0, seed=1)[0]
    assert {c.text for c in greedy} == {"\n".join(reference_steps(MIA))}
    for bad in ("lab:x", "lab:0.1:2", "lab:0.1:0:0:0", "lab:0.1:0:2", "lab:1.5"):
        with pytest.raises(PrmkitError, match="lab"):
            load_lab_policy(bad)
    with pytest.raises(PrmkitError, match="not a lab problem"):
        pol.generate(["Question: What is 2+2?\nAnswer:\n"])


def test_next_step_is_one_step_and_carries_slips():
    pol = LabPolicy(LabPolicyConfig(slip=0.0, confuse=0.0))
    right = reference_steps(MIA)
    [s] = next_step(pol, pol.prompter, MIA_TEXT, right[:2])
    assert s.step == right[2] and not s.done
    [last] = next_step(pol, pol.prompter, MIA_TEXT, right[:4])
    assert last.step == "The answer is 9." and last.done
    [end] = next_step(pol, pol.prompter, MIA_TEXT, right)
    assert end.text == "" and end.done
    # a wrong carried value is carried on
    [s] = next_step(pol, pol.prompter, MIA_TEXT, [right[0], "She gives away 5, so she has 20 - 5 = 16 marbles."])
    assert s.step == "The number is multiplied by 3: 16 * 3 = 48 marbles."


def test_rollout_success_rate_is_the_product_of_slip_chances():
    # two add/sub steps left, slip 0.4 each at the nominal temperature: success 0.6 ** 2 = 0.36
    pol = LabPolicy(LabPolicyConfig(slip=0.4, hard_factor=1.0, confuse=0.0))
    right = reference_steps(MIA)
    prompt = pol.prompter.prompt(MIA_TEXT, right[:2])
    outs = pol.generate([prompt], n=3000, seed=0, temperature=0.7)[0]
    rate = sum(c.text.endswith("The answer is 9.") for c in outs) / len(outs)
    assert abs(rate - 0.36) < 0.03


def test_cli_problems_and_gold(tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    assert main(["lab", "problems", "--n", "5", "--max-steps", "3", "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and all(len(r["steps"]) <= 4 for r in rows)
    rows[0]["steps"][0] = "1 + 1 = 3"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold = tmp_path / "g.jsonl"
    assert main(["lab", "gold", "--input", str(out), "--output", str(gold)]) == 0
    labelled = [json.loads(line) for line in gold.read_text().splitlines()]
    assert labelled[0]["first_error"] == 0 and labelled[1]["first_error"] == -1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "problem": "What is 2+2?", "steps": ["4"]}) + "\n")
    assert main(["lab", "gold", "--input", str(bad), "--output", str(gold)]) == 2
    assert f"{bad}:1: field 'problem'" in capsys.readouterr().err


def test_confusions_are_systematic_per_problem():
    pol = LabPolicy(LabPolicyConfig(slip=0.0, confuse=1.0))
    outs = pol.generate([pol.prompter.prompt(MIA_TEXT)], n=2000, seed=0, temperature=0.7)[0]
    trap, chance = pol.trap(MIA)                               # at the temperature just used
    assert 0 <= trap < 4 and 0.0 <= chance <= 0.95
    assert pol.trap(MIA) == (trap, chance)                     # the same trap every time
    wrong = [c.text for c in outs if not c.text.endswith("The answer is 9.")]
    assert abs(len(wrong) / len(outs) - chance) < 0.04
    # every wrong sample went wrong at the trap, with the confused operation and the same answer
    right = reference_steps(MIA)
    for text in wrong[:50]:
        labels = gold_labels(MIA_TEXT, text.split("\n"))
        assert labels.index(0) == trap and text.split("\n")[trap] != right[trap]
    assert len({w.split("\n")[-1] for w in wrong}) == 1
    assert GoldPRM().score([MIA_TEXT], [wrong[0].split("\n")])[0][trap] == 0.0
