"""The ``prmkit`` command, run in-process through ``prmkit.cli.main`` (and once as a real
process): help texts, exit status 2 with a one-line message for user mistakes, no partial
output, and the acceptance example of ``select``. No test here loads a model."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from prmkit import cli
from prmkit.records import read_records


def run(capsys, *argv):
    """(exit status, stdout, stderr) of ``prmkit ARGV``."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_user_error(rc, err, *fragments):
    assert rc == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line
    assert lines[0].startswith("prmkit: ")
    for fragment in fragments:
        assert fragment in lines[0]


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def rec(id, steps=("a", "b"), **fields):
    return {"id": id, "problem": f"problem {id}", "steps": list(steps), **fields}


# ---------------------------------------------------------------------------------------------
# help


def subparsers(parser):
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def test_top_level_help(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # help may wrap anywhere between words
    parser = cli.build_parser()
    for action in parser._actions:
        for option in action.option_strings:
            assert option in text
        if not isinstance(action, argparse._SubParsersAction):
            assert action.help and action.help.strip() and action.help != argparse.SUPPRESS
    sub = subparsers(parser)
    for name in ("convert", "score", "select", "demo"):
        assert name in sub.choices
    for choice in sub._choices_actions:  # every subcommand is listed with its help
        assert choice.dest in text
        assert choice.help and choice.help.strip()
        assert choice.help in text


def test_no_command_prints_help(capsys):
    rc, out, _ = run(capsys)
    assert rc == 2
    assert "convert" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("prmkit ")


@pytest.mark.parametrize("name", list(subparsers(cli.build_parser()).choices))
def test_subcommand_help(name, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([name, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith(f"usage: prmkit {name}")
    sub = subparsers(cli.build_parser()).choices[name]
    assert sub.description and sub.description.strip()
    for action in sub._actions:
        assert action.help and action.help.strip() and action.help != argparse.SUPPRESS, \
            f"{name}: {action.dest} has no help"
        for option in action.option_strings:
            assert option in text, f"{name}: {option} missing from --help"
        if not action.option_strings:  # a positional argument: its metavar is shown
            assert (action.metavar or action.dest) in text
        if action.choices and not isinstance(action.choices, dict):
            for choice in action.choices:
                assert str(choice) in text, f"{name}: choice {choice} of {action.dest}"


# ---------------------------------------------------------------------------------------------
# convert


@pytest.fixture
def broken_third_line(tmp_path):
    return write_jsonl(tmp_path / "in.jsonl", [rec("a", labels=[1, 0]), rec("b", labels=[1, 1]),
                                               '{"id": "c", "problem": '])


def test_convert_broken_third_line(tmp_path, broken_third_line, capsys):
    out = tmp_path / "out.jsonl"
    rc, _, err = run(capsys, "convert", "--from", "prmkit", "--to", "trl", broken_third_line, out)
    assert_user_error(rc, err, f"{broken_third_line}:3:", "invalid JSON")
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]  # no output, no temporary file


def test_convert_invalid_third_record_keeps_previous_output(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [rec("a"), rec("b"), rec("c", steps=[])])
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n", encoding="utf-8")
    rc, _, err = run(capsys, "convert", "--from", "prmkit", "--to", "prmkit", src, out)
    assert_user_error(rc, err, f"{src}:3:", "field 'steps'")
    assert out.read_text(encoding="utf-8") == "previous\n"
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl", "out.jsonl"]


def test_convert_broken_third_line_in_a_real_process(tmp_path, broken_third_line):
    script = os.path.join(os.path.dirname(sys.executable), "prmkit")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "prmkit.cli"]
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(command + ["convert", "--from", "prmkit", "--to", "trl",
                                     str(broken_third_line), str(out)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert f"{broken_third_line}:3:" in proc.stderr
    assert proc.stdout == ""
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_convert_prmkit_trl_prmkit_round_trip(tmp_path, capsys):
    rows = [rec("a", steps=["x = 1", "y = 2", "so 3"], labels=[1, 1, 0]),
            rec("b", steps=["only step é"], labels=[1]),
            rec("c", steps=["s1", "s2"], labels=[0, 1])]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    trl_file, back = tmp_path / "trl.jsonl", tmp_path / "back.jsonl"

    rc, _, err = run(capsys, "convert", "--from", "prmkit", "--to", "trl", src, trl_file)
    assert rc == 0, err
    assert "converted 3 records" in err
    trl_rows = [json.loads(x) for x in trl_file.read_text(encoding="utf-8").splitlines()]
    assert trl_rows[0]["prompt"] == "problem a"
    assert trl_rows[0]["completions"] == ["x = 1", "y = 2", "so 3"]
    assert trl_rows[0]["labels"] == [True, True, False]

    rc, _, err = run(capsys, "convert", "--from", "trl", "--to", "prmkit", trl_file, back)
    assert rc == 0, err
    got = read_records(str(back))
    assert [r.id for r in got] == ["a", "b", "c"]
    assert [r.problem for r in got] == [r["problem"] for r in rows]
    assert [r.steps for r in got] == [r["steps"] for r in rows]
    assert [r.labels for r in got] == [[1.0, 1.0, 0.0], [1.0], [0.0, 1.0]]


def test_convert_to_stdout(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [rec("a", labels=[1, 0])])
    rc, out, _ = run(capsys, "convert", "--from", "prmkit", "--to", "trl", src, "-")
    assert rc == 0
    assert json.loads(out)["labels"] == [True, False]


def test_convert_missing_input(tmp_path, capsys):
    rc, _, err = run(capsys, "convert", "--from", "prmkit", "--to", "trl",
                     tmp_path / "nope.jsonl", tmp_path / "out.jsonl")
    assert_user_error(rc, err, "nope.jsonl", "no such file")
    assert os.listdir(tmp_path) == []


def test_convert_unknown_format(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [rec("a")])
    with pytest.raises(SystemExit) as info:
        cli.main(["convert", "--from", "nope", "--to", "trl", str(src), str(tmp_path / "o")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


# ---------------------------------------------------------------------------------------------
# select: the acceptance example

A = rec("A", steps=["a1", "a2", "a3", "a4"], step_scores=[0.97, 0.93, 0.95, 0.94], answer="1",
        is_correct=True, group="q")   # prod 0.8056, min 0.93, last 0.94
B = rec("B", steps=["b1", "b2", "b3", "b4"], step_scores=[0.99, 0.24, 0.96, 0.98], answer="2",
        is_correct=False, group="q")  # prod 0.2235, min 0.24, last 0.98
C = rec("C", steps=["c1", "c2", "c3"], step_scores=[0.91, 0.88, 0.90], answer="3",
        is_correct=False, group="q")  # prod 0.7207, min 0.88, last 0.90


@pytest.mark.parametrize("by,chosen,accuracy", [
    ("prm-prod", "A", "accuracy 100.0% (1/1)"),
    ("prm-min", "A", "accuracy 100.0% (1/1)"),
    ("prm-last", "B", "accuracy 0.0% (0/1)"),
])
def test_select_acceptance_example(tmp_path, capsys, by, chosen, accuracy):
    src = write_jsonl(tmp_path / "cands.jsonl", [A, B, C])
    out = tmp_path / "chosen.jsonl"
    rc, stdout, err = run(capsys, "select", "--input", src, "--by", by, "--output", out)
    assert rc == 0, err
    got = read_records(str(out))
    assert [r.id for r in got] == [chosen]
    assert got[0].step_scores == {"A": A, "B": B}[chosen]["step_scores"]
    assert f"{by}: chose 1 of 3 candidates" in stdout
    assert accuracy in stdout


def test_select_without_is_correct_prints_no_accuracy(tmp_path, capsys):
    cands = [{k: v for k, v in r.items() if k != "is_correct"} for r in (A, B, C)]
    src = write_jsonl(tmp_path / "cands.jsonl", cands)
    rc, stdout, _ = run(capsys, "select", "--input", src, "--by", "prm-prod")
    assert rc == 0
    assert "chose 1 of 3" in stdout and "accuracy" not in stdout
    assert sorted(os.listdir(tmp_path)) == ["cands.jsonl"]  # no --output, nothing written


def test_select_missing_step_scores(tmp_path, capsys):
    c = {k: v for k, v in C.items() if k != "step_scores"}
    src = write_jsonl(tmp_path / "cands.jsonl", [A, B, c])
    out = tmp_path / "chosen.jsonl"
    rc, _, err = run(capsys, "select", "--input", src, "--by", "prm-min", "--output", out)
    assert_user_error(rc, err, "'C'", "step_scores")
    assert not out.exists()


def test_select_bad_input_line(tmp_path, capsys):
    src = write_jsonl(tmp_path / "cands.jsonl", [A, {**B, "steps": "b1 b2"}])
    rc, _, err = run(capsys, "select", "--input", src, "--by", "prm-prod")
    assert_user_error(rc, err, f"{src}:2:", "field 'steps'")


# ---------------------------------------------------------------------------------------------
# score: user mistakes fail before any model is loaded


@pytest.fixture
def no_model_load(monkeypatch):
    from prmkit.models.backends import hf

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(hf, "load_hf_prm", forbidden)


def score(capsys, tmp_path, src, model, *extra):
    return run(capsys, "score", "--model", model, "--format", "math-shepherd", "--input", src,
               "--output", tmp_path / "scored.jsonl", *extra)


def test_score_steps_not_a_list(tmp_path, capsys, no_model_load):
    src = write_jsonl(tmp_path / "in.jsonl", [rec("a"), {**rec("b"), "steps": "one step"}])
    rc, _, err = score(capsys, tmp_path, src, tmp_path / "model")
    assert_user_error(rc, err, f"{src}:2:", "field 'steps'")
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_score_empty_problem(tmp_path, capsys, no_model_load):
    src = write_jsonl(tmp_path / "in.jsonl", [{**rec("a"), "problem": ""}])
    rc, _, err = score(capsys, tmp_path, src, tmp_path / "model")
    assert_user_error(rc, err, f"{src}:1:", "field 'problem'")
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_score_bad_chunk(tmp_path, capsys, no_model_load):
    src = write_jsonl(tmp_path / "in.jsonl", [rec("a")])
    rc, _, err = score(capsys, tmp_path, src, tmp_path / "model", "--chunk", "0")
    assert_user_error(rc, err, "--chunk")


def test_score_missing_input(tmp_path, capsys, no_model_load):
    rc, _, err = score(capsys, tmp_path, tmp_path / "nope.jsonl", tmp_path / "model")
    assert_user_error(rc, err, "nope.jsonl", "no such file")


def test_score_model_path_does_not_exist(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [rec("a")])
    model = tmp_path / "no-such-model"
    rc, _, err = score(capsys, tmp_path, src, model)
    assert_user_error(rc, err, str(model))
    assert not (tmp_path / "scored.jsonl").exists()


def test_score_model_failure_leaves_no_partial(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [rec("a")])
    rc, _, _ = score(capsys, tmp_path, src, tmp_path / "no-such-model")
    assert rc == 2
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


# ---------------------------------------------------------------------------------------------
# demo


def test_demo_missing_data_folder(tmp_path, capsys):
    data, out = tmp_path / "no-data", tmp_path / "demo_out"
    rc, _, err = run(capsys, "demo", "--real-data", "--data", data, "--output", out)
    assert_user_error(rc, err, str(data), "--data")
    assert not out.exists()
