"""A newcomer's near misses, each one line: a field written under another toolkit's name is named
with the field meant (one table, ``NEAR_NAMES``); every layout reads from a JSON list as from
JSONL; ``--limit N`` takes both kinds of solution, so a quick look has an F1."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.evaluate.common import quick_look
from prmkit.formats.detect import read_records


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("row, wrote, meant", [
    ({"id": "a", "question": "What is 6 * 7?", "steps": ["6 * 7 = 42."]}, "question", "problem"),
    ({"id": "a", "query": "What is 6 * 7?", "steps": ["6 * 7 = 42."]}, "query", "problem"),
    ({"id": "a", "problem": "What is 6 * 7?", "solution": "6 * 7 = 42."}, "solution", "steps"),
    ({"id": "a", "problem": "6 * 7?", "steps": ["42."], "step_labels": [1]}, "step_labels", "labels"),
])
def test_a_near_name_is_one_line_naming_both_fields(tmp_path, capsys, row, wrote, meant):
    path = write(tmp_path / "r.jsonl", [row])
    with pytest.raises(PrmkitError, match=f"'{wrote}' where prmkit reads '{meant}'"):
        read_records(path)
    assert main(["score", "--input", path, "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert wrote in err and meant in err and len(err.strip().splitlines()) <= 3
    assert "Traceback" not in err and not (tmp_path / "o.jsonl").exists()


def test_two_near_names_are_named_together_and_a_stranger_layout_is_not_guessed(tmp_path):
    path = write(tmp_path / "r.jsonl", [{"id": "a", "question": "q", "solution": "s"}])
    with pytest.raises(PrmkitError, match="'question' where .*'problem'.*'solution' where"):
        read_records(path)
    other = write(tmp_path / "o.jsonl", [{"id": "a", "question": "q", "solution": "s", "x": 1}])
    with pytest.raises(PrmkitError, match="not a known layout"):
        read_records(other)


def test_trl_rows_read_from_a_json_list_as_from_jsonl(tmp_path):
    rows = [{"prompt": f"What is {i} + {i}?", "completions": [f"{i} + {i} = {2 * i}.", "Done."],
             "labels": [True, i != 1]} for i in range(3)]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    listed = read_records(str(tmp_path / "rows.json"))
    lined = read_records(write(tmp_path / "rows.jsonl", rows))
    assert [r.to_dict() for r in listed] == [r.to_dict() for r in lined]
    assert [r.id for r in listed] == ["trl-0", "trl-1", "trl-2"]
    rows[1]["completions"] = "one string"
    (tmp_path / "bad.json").write_text(json.dumps(rows))
    with pytest.raises(PrmkitError, match=r"bad.json: record 1: field 'completions'"):
        read_records(str(tmp_path / "bad.json"))


def test_a_record_without_an_id_gets_one_from_its_line(tmp_path):
    path = write(tmp_path / "r.jsonl", [{"problem": "p", "steps": ["a"]},
                                         {"id": "x", "problem": "q", "steps": ["b"]},
                                         {"problem": "r", "steps": ["c"]}])
    assert [r.id for r in read_records(path)] == ["rec-0", "x", "rec-2"]
    (tmp_path / "r.json").write_text(json.dumps([{"problem": "p", "steps": ["a"]}]))
    assert [r.id for r in read_records(str(tmp_path / "r.json"))] == ["rec-0"]


def test_a_single_solution_request_gets_the_list_form_in_one_line():
    from prmkit.serve.queries import one_solution_hint

    hint = one_solution_hint({"problem": "p", "steps": ["a", "b"]})
    assert "'problem' where the request takes 'problems'" in hint and '"problems": [' in hint
    assert "list per solution" in hint and "\n" not in hint
    assert one_solution_hint({"problems": ["p"], "steps": [["a"]], "stpes": 1}) is None


def solutions(first_errors):
    return [SimpleNamespace(i=i, first_error=f) for i, f in enumerate(first_errors)]


@pytest.mark.parametrize("first_errors, n, kept", [
    ([0, 1, 2, -1, 3, -1], 4, [0, 1, 3, 5]),     # the first two of each kind, in file order
    ([0, 1, 2, -1, 3, -1], 3, [0, 1, 3]),        # odd: one more with an error
    ([0, 1, 2, -1], 4, [0, 1, 2, 3]),            # one correct solution only: more wrong ones
    ([-1, -1, -1, 0], 2, [0, 3]),
    ([-1, 2], 10, [0, 1]),
    ([None, -1, 1], 2, [0, 1]),                  # an unknown first error is not a correct one
])
def test_a_quick_look_takes_both_kinds(first_errors, n, kept):
    assert [r.i for r in quick_look(solutions(first_errors), n)] == kept
    assert [r.i for r in quick_look(solutions(first_errors), None)] == list(range(len(first_errors)))
