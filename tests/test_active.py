"""Active learning: convincing wrong-answer solutions, worked by hand."""

import pytest

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.records import Record, read_records, write_records
from prmkit.train.active import convincing_wrong


def rec(i, group, scores, correct=None, answer=None, reference=None):
    return Record(id=i, group=group, problem="p" + group, steps=["s"] * len(scores),
                  step_scores=scores, is_correct=correct, answer=answer, reference=reference)


def test_picks_high_scoring_wrong_answers_with_a_per_problem_cap():
    recs = [rec("a", "1", [0.9, 0.9], correct=True),    # right: never picked
            rec("b", "1", [0.9, 0.8], correct=False),   # prod 0.72
            rec("c", "1", [0.8, 0.8], correct=False),   # prod 0.64
            rec("d", "2", [0.5, 0.5], correct=False),   # prod 0.25
            rec("e", "2", [0.1, 0.9], answer="3", reference="3.0"),  # right by equivalence
            rec("f", "3", [0.7, 0.9], answer="4", reference="5")]    # wrong, prod 0.63
    assert [r.id for r in convincing_wrong(recs, 3)] == ["b", "c", "f"]
    assert [r.id for r in convincing_wrong(recs, 3, per_problem=1)] == ["b", "f", "d"]
    assert [r.id for r in convincing_wrong(recs, 2, how="min")] == ["b", "c"]
    assert convincing_wrong(recs, 1)[0].meta["selection_score"] == pytest.approx(0.72)


def test_errors():
    with pytest.raises(PrmkitError, match="step_scores"):
        convincing_wrong([Record(id="x", problem="p", steps=["s"], is_correct=False)], 1)
    with pytest.raises(PrmkitError, match="is_correct"):
        convincing_wrong([Record(id="x", problem="p", steps=["s"], step_scores=[0.5])], 1)


def test_cli(tmp_path, capsys):
    src, out = tmp_path / "c.jsonl", tmp_path / "o.jsonl"
    write_records(str(src), [rec("b", "1", [0.9], correct=False), rec("c", "1", [0.2], correct=False)])
    assert main(["select-for-labeling", "--input", str(src), "--k", "1", "--output", str(out)]) == 0
    assert [r.id for r in read_records(str(out))] == ["b"]
