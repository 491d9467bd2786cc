"""The lab policy's recoveries against gold labels, the trace-error statistics against
hand-worked examples, and ``prmkit lab trace-error`` end to end on a tiny model (with a resume
after a kill)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prmkit.lab import LabConfig, gold_labels, load_lab_policy, make_problems
from prmkit.lab.candidates import candidates_of
from prmkit.world.policy import slipped_from
from prmkit.lab import stats
from prmkit.lab.traceerror.stats import (PerProblem, equivalent, majority_picks, picks,
                                  ratio_difference, subsets)
from prmkit.world.problems import has_wrong_step, load_problem, reference_steps, trace_error
from prmkit.records import Record


def sample(name, n_problems=30, n=4, seed=0):
    policy, prompter = load_lab_policy(name)
    problems = make_problems(LabConfig(n=n_problems, seed=seed))
    return candidates_of(problems, n, policy, prompter, name, seed)


def test_a_recovered_slip_is_labelled_wrong_and_the_answer_is_right():
    # no confusions, every slip recovered: every answer is right, and the slips stay wrong steps
    cands = sample("lab:0.3:0:1")
    assert all(r.is_correct for r in cands)
    flawed = [r for r in cands if has_wrong_step(r)]
    assert len(flawed) >= 10
    for r in flawed:
        labels = gold_labels(r.problem, r.steps)
        first = labels.index(0)
        assert all(y == 0 for y in labels[first:])          # the slip and every step after it
        assert slipped_from(r.steps[:first + 1]) is not None  # the first wrong step is a slip


def test_without_recoveries_a_slip_carries_on_and_the_old_policy_is_unchanged():
    old, zero = sample("lab:0.3:0"), sample("lab:0.3:0:0")
    assert [r.steps for r in old] == [r.steps for r in zero]   # recover 0 draws nothing
    slipped = [r for r in old if has_wrong_step(r)]
    # no confusions: a slip is fatal, unless a second slip happens to cancel it
    assert len(slipped) >= 10 and sum(bool(r.is_correct) for r in slipped) < 0.15 * len(slipped)


def test_a_written_prefix_that_slipped_is_continued_by_the_same_rule():
    problem = make_problems(LabConfig(n=1, seed=3, min_steps=3, max_steps=3))[0].problem
    p = load_problem(problem)
    right = reference_steps(p)
    first = right[0].rsplit("= ", 1)
    slipped = f"{first[0]}= {p.values[0] + 1} {first[1].split(' ', 1)[1]}"
    assert gold_labels(problem, [slipped]) == [0]
    assert slipped_from([slipped]) == p.values[0]
    for recover, answer_right in ((1.0, True), (0.0, False)):
        policy, prompter = load_lab_policy(f"lab:0:0:{recover}")
        prompt = prompter.prompt(problem, [slipped])
        text = policy.generate([prompt], n=1, seed=0)[0][0].text
        steps = [slipped] + [s for s in text.split("\n") if s.strip()]
        assert steps[-1] == f"The answer is {p.answer}." if answer_right else \
            steps[-1] != f"The answer is {p.answer}."
        assert gold_labels(problem, steps)[0] == 0


def test_slipped_from_reads_the_last_calculation():
    assert slipped_from(["She has 14 + 6 = 21 apples."]) == 20
    assert slipped_from(["She has 14 + 6 = 20 apples."]) is None
    assert slipped_from(["One of the 3 groups has 7 / 3 = 2.33 cards."]) is None   # rounding
    assert slipped_from([]) is None


def record(rid, group, correct, labels):
    return Record(id=rid, problem="p", steps=["s"] * len(labels), labels=labels, group=group,
                  is_correct=correct)


def test_trace_error_counts_wrong_steps_among_right_answers():
    problem = make_problems(LabConfig(n=1, seed=0))[0]
    good = Record(id="a", problem=problem.problem, steps=problem.steps, is_correct=True)
    bad_steps = ["She has 1 + 1 = 3 apples."] + problem.steps[1:]
    bad = Record(id="b", problem=problem.problem, steps=bad_steps, is_correct=True)
    wrong = Record(id="c", problem=problem.problem, steps=bad_steps, is_correct=False)
    assert trace_error([good, bad, wrong]) == 0.5
    assert trace_error([wrong]) is None


def hand_example():
    """Problem A: scores 0.9 / 0.5 / 0.1, answers right / right / wrong, the first with a
    wrong step; problem B: 0.2 / 0.8, wrong / right. A second verifier scores the other way."""
    recs = [record("A0", "A", True, [1, 0]), record("A1", "A", True, [1, 1]),
            record("A2", "A", False, [0, 0]), record("B0", "B", False, [0]),
            record("B1", "B", True, [1])]
    first = {"A0": 0.9, "A1": 0.5, "A2": 0.1, "B0": 0.2, "B1": 0.8}
    second = {"A0": 0.1, "A1": 0.9, "A2": 0.5, "B0": 0.8, "B1": 0.2}
    flawed = lambda r: 0 in r.labels
    draws = subsets({"A": 3, "B": 2}, 2, 50, 0)
    full = {"A": np.arange(3)[None, :], "B": np.arange(2)[None, :]}
    return recs, first, second, flawed, draws, full


def test_picks_on_a_hand_worked_example():
    recs, first, second, flawed, draws, full = hand_example()
    a = picks(recs, lambda r: first[r.id], flawed, full)
    b = picks(recs, lambda r: second[r.id], flawed, full)
    assert a.right == {"A": 1.0, "B": 1.0} and a.flawed == {"A": 1.0, "B": 0.0}
    assert b.right == {"A": 1.0, "B": 0.0} and b.flawed == {"A": 0.0, "B": 0.0}
    assert a.trace_error() == 50.0 and b.trace_error() == 0.0
    assert a.final_error() == 0.0 and b.final_error() == 50.0
    # two of three candidates of A: the pick is right in every pair, flawed when A0 is in it
    part = picks(recs, lambda r: first[r.id], flawed, draws)
    share = np.mean([0 in row for row in draws["A"]])
    assert part.right["A"] == 1.0 and part.flawed["A"] == pytest.approx(share)
    assert draws["A"].shape == (50, 2) and draws["B"].shape == (1, 2)


def test_the_ratio_difference_on_a_hand_worked_example():
    recs, first, second, flawed, _, full = hand_example()
    a = picks(recs, lambda r: first[r.id], flawed, full)
    b = picks(recs, lambda r: second[r.id], flawed, full)
    cols = np.array([[a.flawed[k], a.right[k], b.flawed[k], b.right[k]] for k in "AB"])
    point, ci, left_out = stats.ratio_difference(cols)
    # resamples AA: 100 - 0; AB, BA: 50 - 0; BB: b has no right pick, left out
    assert point == 50.0 and ci == [50.0, 100.0] and 2000 < left_out < 3000
    # b has no flawed pick at all: Newcombe's interval from Wilson's, by hand: a 1 of 2,
    # Wilson [0.0945, 0.9055]; b 0 of 1, Wilson [0, 0.7934]; 50 - sqrt(40.55^2 + 79.34^2) and
    # 50 + sqrt(40.55^2 + 0^2)
    c = ratio_difference(a, b)
    assert c.difference == 50.0 and c.ci95 == pytest.approx([-39.1, 90.55], abs=0.02)
    assert not c.holds and c.problems == 2
    assert not ratio_difference(b, a).holds


def test_majority_picks_the_first_met_of_the_most_common_answer():
    recs = [Record(id=f"A{i}", problem="p", steps=[f"The answer is {x}."], labels=[y],
                   group="A", answer=str(x), is_correct=x == 1)
            for i, (x, y) in enumerate([(2, 0), (1, 0), (1, 1), (2, 1)])]
    flawed = lambda r: 0 in r.labels
    draws = {"A": np.array([[0, 1, 2], [1, 0, 3], [3, 2, 0], [2, 1, 3]])}
    m = majority_picks(recs, flawed, draws)
    # picks: A1 (1 twice), A0 (2 twice: A0 met first), A3 (2 twice), A2 (1 twice)
    assert m.right == {"A": 0.5} and m.flawed == {"A": 0.25}
    assert m.trace_error() == 50.0


def test_equivalence_holds_only_when_the_whole_interval_is_within_the_margin():
    a, b = {"A": 1.0, "B": 0.5}, {"A": 1.0, "B": 1.0}
    c = equivalent(a, b, margin=5.0, level=0.95)
    assert c.difference == -25.0 and c.ci95 == [-50.0, 0.0] and not c.holds
    assert equivalent(a, b, margin=5.0).ci95 == [-50.0, 0.0]     # 90%: the same two means
    assert equivalent(a, b, margin=60.0).holds
    same = PerProblem({"A": 1.0}, {"A": 0.0})
    assert equivalent(same.right, same.right, margin=1.0).holds


# --------------------------------------------------------------------------------- end to end


@pytest.fixture
def base(tmp_path):
    import tiny

    path = tmp_path / "base"
    tiny.causal_lm(tie_word_embeddings=True).save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


def args(base, out):
    return ["lab", "trace-error", "--base", base, "--output", str(out), "--train-problems", "6",
            "--train-n", "2", "--test-problems", "5", "--n", "4", "--epochs", "2",
            "--draws", "20"]


def test_trace_error_runs_resumes_after_a_kill_and_writes_its_claims(base, tmp_path, capsys,
                                                                    monkeypatch):
    from prmkit.cli import main
    from prmkit.lab.verifiers import heads

    out = tmp_path / "te"
    real, calls = heads.train_and_score, []

    def killed(*a, **k):
        calls.append(a[2])
        if len(calls) == 5:
            raise KeyboardInterrupt      # killed while training the fifth verifier
        return real(*a, **k)

    monkeypatch.setattr(heads, "train_and_score", killed)
    assert main(args(base, out)) != 0      # the CLI reports the interruption
    kept = {p.name: p.stat().st_mtime_ns for p in [*out.glob("scores_*.json"),
                                                   *out.glob("*.jsonl")]}
    assert "scores_calculator.json" in kept and "scores_no-calculator_orm.json" in kept
    monkeypatch.setattr(heads, "train_and_score", real)
    capsys.readouterr()
    assert main(args(base, out)) == 0
    printed = capsys.readouterr().out
    assert "resuming" in printed and "5. report" in printed
    for name, mtime in kept.items():       # finished stages are reused, not redone
        assert (out / name).stat().st_mtime_ns == mtime
    summary = json.loads((out / "summary.json").read_text())
    claims = summary["claims"]
    assert set(claims) == {"trace_error_prm_below_majority", "final_error_similar",
                           "exact_labels_beat_mc"}
    assert set(summary["contrasts"]) == {"trace_error_orm_minus_prm", "trace_error_mc_minus_prm"}
    assert summary["claim_setting"] == "no-calculator" and summary["claim_n"] == 4
    for c in claims.values():
        assert isinstance(c["holds"], bool) and c["ci95"][0] <= c["difference"] <= c["ci95"][1]
    # the figures are the scores' own: the ORM's best-of-4 pick on each problem, by hand
    test = {r["id"]: r for r in map(json.loads, (out / "test_candidates.jsonl").open())}
    orm = json.loads((out / "scores_calculator_orm.json").read_text())
    groups = {}
    for rid, r in test.items():
        groups.setdefault(r["group"], []).append(rid)
    chosen = [max(ids, key=lambda i: orm[i][-1]) for ids in groups.values()]
    err = 100 * sum(not test[i]["is_correct"] for i in chosen) / len(chosen)
    assert summary["settings"]["calculator"]["at_n"]["orm"]["final_error"] == pytest.approx(err)
    assert "<img" in (out / "report.html").read_text()
