"""The checks every command makes before it works: an output path that is one of its inputs is
refused (exit 2, the input untouched), an empty input file is named, and `score` and `search`
refuse to resume a partial file written from other input records or with other settings."""

from __future__ import annotations

import os

import pytest

from prmkit import cli
from prmkit.records import Record, read_records, write_records
from partials import killed
import tiny


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def records(n=4, **fields):
    return [Record(id=f"r{i}", problem=f"What is {i} + 1?", steps=[f"{i} + 1 = {i + 1}.",
                   f"The answer is {i + 1}."], labels=[1.0, 1.0], first_error=None,
                   is_correct=True, group=f"g{i // 2}", step_scores=[0.5, 0.5], **fields)
            for i in range(n)]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "in.jsonl"
    write_records(str(path), records())
    return path


def output_is_input_cases(data, tmp_path):
    d = str(data)
    return {
        "eval steps": ["eval", "steps", "--input", d, "--output", d],
        "eval bestofn": ["eval", "bestofn", "--input", d, "--output", d],
        "eval steps plot": ["eval", "steps", "--input", d, "--output", tmp_path / "o.json",
                            "--plot", d],
        "report": ["report", "--input", d, "--output", d],
        "label quality": ["label", "quality", "--gold", d, d, "--output", d],
        "label consensus": ["label", "consensus", "--mc", d, "--judge", d, "--output", d],
        "train prm": ["train", "prm", "--base", tmp_path, "--data", d, "--output", d],
        "train orm": ["train", "orm", "--base", tmp_path, "--data", d, "--output", d],
        "train implicit-prm": ["train", "implicit-prm", "--base", tmp_path, "--data", d,
                               "--output", d],
        "train prm eval": ["train", "prm", "--base", tmp_path, "--data", d, "--eval-data",
                           tmp_path / "dev.jsonl", "--output", tmp_path / "dev.jsonl"],
        "score": ["score", "--input", d, "--output", d],
        "select": ["select", "--input", d, "--by", "majority", "--output", d],
        "convert": ["convert", "--from", "prmkit", "--to", "prmkit", d, d],
        "generate": ["generate", "--policy", "echo", "--input", d, "--output", d],
        "search": ["search", "--method", "best-of-n", "--policy", "x", "--input", d,
                   "--output", d],
        "label mc": ["label", "mc", "--policy", "x", "--input", d, "--output", d],
        "lab gold": ["lab", "gold", "--input", d, "--output", d],
        "select-for-labeling": ["select-for-labeling", "--input", d, "--k", "1", "--output", d],
        "eval processbench": ["eval", "processbench", "--data", d, "--predictions", d,
                              "--output", d],
    }


def test_an_output_that_is_an_input_is_refused_by_every_command(data, tmp_path, capsys):
    write_records(str(tmp_path / "dev.jsonl"), records())
    before = data.read_bytes()
    for name, argv in output_is_input_cases(data, tmp_path).items():
        rc, _, err = run(capsys, *argv)
        assert rc == 2, (name, err)
        assert "is also the input" in err and "Traceback" not in err, (name, err)
        assert data.read_bytes() == before, name
    assert sorted(os.listdir(tmp_path)) == ["dev.jsonl", "in.jsonl"]


def test_the_same_file_by_another_path_is_refused(data, tmp_path, capsys):
    other = tmp_path / "sub" / ".." / "in.jsonl"
    (tmp_path / "sub").mkdir()
    rc, _, err = run(capsys, "eval", "steps", "--input", data, "--output", other)
    assert rc == 2 and "is also the input --input" in err


@pytest.mark.parametrize("argv", [
    ["eval", "steps", "--input", "EMPTY", "--output", "OUT"],
    ["eval", "bestofn", "--input", "EMPTY", "--output", "OUT"],
    ["report", "--input", "EMPTY", "--output", "OUT"],
    ["train", "prm", "--base", "BASE", "--data", "EMPTY", "--output", "OUT"],
    ["train", "orm", "--base", "BASE", "--data", "EMPTY", "--output", "OUT"],
    ["train", "implicit-prm", "--base", "BASE", "--data", "EMPTY", "--output", "OUT"],
    ["train", "prm", "--base", "BASE", "--data", "DATA", "--eval-data", "EMPTY", "--output",
     "OUT"],
    ["score", "--input", "EMPTY", "--output", "OUT"],
    ["select", "--input", "EMPTY", "--by", "majority"],
    ["label", "quality", "--gold", "DATA", "EMPTY"],
    ["eval", "processbench", "--data", "EMPTY", "--predictions", "DATA", "--output", "OUT"],
])
def test_an_empty_input_is_named(argv, data, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    names = {"EMPTY": empty, "OUT": tmp_path / "out", "BASE": tmp_path, "DATA": data}
    rc, _, err = run(capsys, *[names.get(a, a) for a in argv])
    assert rc == 2 and f"{empty}: no records" in err, err
    assert "labelled steps" not in err


def test_train_orm_without_usable_records_names_the_file_and_no_steps(tiny_base, tmp_path,
                                                                     capsys):
    path = tmp_path / "none.jsonl"
    write_records(str(path), [Record(id="a", problem="p", steps=["s"])])  # no is_correct
    rc, _, err = run(capsys, "train", "orm", "--base", tiny_base, "--data", path,
                     "--output", tmp_path / "o")
    assert rc == 2 and f"{path}: " in err and "is_correct" in err
    assert "labelled step" not in err


# ---------------------------------------------------------------------------------------------
# score: a resume must come from the same input, model and settings


@pytest.fixture
def models(tmp_path):
    out = {}
    for name, seed in (("m1", 0), ("m2", 1)):
        path = tmp_path / name
        tiny.causal_lm(seed=seed).save_pretrained(path, safe_serialization=True)
        tiny.tokenizer().save_pretrained(path)
        out[name] = path
    return out


def score(capsys, model, src, out, *extra):
    return run(capsys, "score", "--model", model, "--format", "math-shepherd", "--input", src,
               "--output", out, "--dtype", "float32", *extra)


def make_partial(capsys, model, src, out, *extra, keep=2):
    """The partial file of a run killed after its first ``keep`` records (its header first)."""
    killed(["score", "--model", model, "--format", "math-shepherd", "--input", src, "--output",
            out, "--dtype", "float32", *extra], str(out) + ".partial", keep)
    capsys.readouterr()


def test_score_resumes_its_own_partial_to_the_same_output(models, data, tmp_path, capsys):
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"
    assert score(capsys, models["m1"], data, whole)[0] == 0
    make_partial(capsys, models["m1"], data, out)
    rc, _, err = score(capsys, models["m1"], data, out)
    assert rc == 0 and "resuming: 2 of 4" in err
    assert out.read_text() == whole.read_text()


@pytest.mark.parametrize("change, named", [
    ("model", "model="), ("dtype", "dtype="), ("max-length", "max_length="),
    ("format", "format="), ("input", "'problem'"), ("other ids", "not in the input"),
])
def test_score_refuses_a_partial_from_another_run(change, named, models, data, tmp_path,
                                                  capsys):
    out = tmp_path / "out.jsonl"
    make_partial(capsys, models["m1"], data, out)
    model, src, extra = models["m1"], data, []
    if change == "model":
        model = models["m2"]
    elif change == "dtype":
        extra = ["--dtype", "bfloat16"]
    elif change == "max-length":
        extra = ["--max-length", "64"]
    elif change == "format":
        extra = ["--format", "rlhflow"]
    elif change in ("input", "other ids"):
        recs = records()
        for r in recs:
            if change == "input":
                r.problem += " (changed)"
            else:
                r.id += "x"
        src = tmp_path / "other.jsonl"
        write_records(str(src), recs)
    rc, _, err = run(capsys, "score", "--model", model, "--format", "math-shepherd", "--input",
                     src, "--output", out, "--dtype", "float32", *extra)
    assert rc == 2 and named in err and "--no-resume" in err, err
    assert not out.exists()
    rc, _, err = run(capsys, "score", "--model", model, "--format", "math-shepherd", "--input",
                     src, "--output", out, "--dtype", "float32", *extra, "--no-resume")
    assert rc == 0, err
    assert len(read_records(str(out))) == 4


def test_score_checks_the_output_folder_before_loading_the_model(data, tmp_path, capsys,
                                                                 monkeypatch):
    from prmkit.models import load

    def forbidden(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(load, "open_prm", forbidden)
    rc, _, err = run(capsys, "score", "--input", data, "--output", tmp_path / "no" / "o.jsonl")
    assert rc == 2 and "the folder does not exist" in err


def test_search_checks_the_output_folder_before_loading_a_model(data, tmp_path, capsys,
                                                                monkeypatch):
    import prmkit.search.cli as search_cli

    def forbidden(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(search_cli, "open_prm", forbidden)
    monkeypatch.setattr("prmkit.generate.cli.load_policy", forbidden)
    rc, _, err = run(capsys, "search", "--method", "best-of-n", "--policy", "x", "--input", data,
                     "--output", tmp_path / "no" / "o.jsonl")
    assert rc == 2 and "the folder does not exist" in err
