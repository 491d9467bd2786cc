"""``prmkit label``: every option has help; mc on the lab policy end to end (resumes, refuses
records without a reference in one line); judge on a tiny real model (its unparseable outputs
are counted); consensus and quality on the files they write."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from prmkit import cli
from prmkit.records import read_records, write_records

LABEL_COMMANDS = ("mc", "judge", "consensus", "quality")


def label_parsers():
    parser = cli.build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    [kinds] = [a for a in sub.choices["label"]._actions
               if isinstance(a, argparse._SubParsersAction)]
    return kinds.choices


@pytest.mark.parametrize("name", LABEL_COMMANDS)
def test_every_option_has_help(name, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["label", name, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    p = label_parsers()[name]
    assert p.description and p.description.strip()
    for action in p._actions:
        assert action.help and action.help.strip(), f"{name}: {action.dest} has no help"
        for option in action.option_strings:
            assert option in text
        for choice in action.choices or ():
            assert str(choice) in text


@pytest.fixture
def lab_solutions(tmp_path):
    """Six lab solutions (sampled by the lab policy) with a reference."""
    assert cli.main(["lab", "problems", "--n", "3", "--min-steps", "4", "--max-steps", "5",
                     "--seed", "3", "--output", str(tmp_path / "p.jsonl")]) == 0
    assert cli.main(["generate", "--policy", "lab", "--input", str(tmp_path / "p.jsonl"),
                     "-n", "2", "--output", str(tmp_path / "s.jsonl")]) == 0
    return tmp_path / "s.jsonl"


def test_label_mc_on_the_lab_policy(tmp_path, lab_solutions, capsys):
    capsys.readouterr()
    out = tmp_path / "mc.jsonl"
    argv = ["label", "mc", "--policy", "lab", "--input", lab_solutions, "--rollouts", 4,
            "--mode", "soft", "--strategy", "binary", "--output", out]
    assert cli.main([str(a) for a in argv]) == 0
    err = capsys.readouterr().err
    assert "labelled 6 records (0 resumed; binary, soft, K=4)" in err
    recs = read_records(str(out))
    assert [r.id for r in recs] == [r.id for r in read_records(str(lab_solutions))]
    for r in recs:
        mc = r.meta["mc"]
        assert (mc["strategy"], mc["mode"], mc["rollouts"], mc["policy"]) == ("binary", "soft", 4, "lab")
        assert r.first_error is not None and len(mc["correct"]) == len(r.steps)
        assert mc["rollouts_spent"] == 4 * sum(s == 4 for s in mc["samples"] if s)
    # the same command again: everything is finished, nothing is redone
    from partials import header_of

    head = header_of(argv, str(out) + ".partial")
    (tmp_path / "mc.jsonl.partial").write_text(head + out.read_text())
    os.unlink(out)
    assert cli.main([str(a) for a in argv]) == 0
    assert "resuming: 6 of 6 records already labelled" in capsys.readouterr().err
    assert read_records(str(out)) == recs


def test_label_mc_with_no_usable_label_says_all_n_of_n_and_exits_non_zero(tmp_path, lab_solutions,
                                                                           capsys):
    """Every rollout fails when the reference column holds something else than the final answer
    (here the whole reference solution): one line, "all N of N", the reference named, exit 2;
    the labels are still written. One record with a right rollout is enough to pass."""
    rows = [json.loads(x) for x in lab_solutions.read_text().splitlines()]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({**r, "reference": "The answer is " + r["reference"] + " and "
                                       "more words."}) + "\n" for r in rows))
    capsys.readouterr()
    rc = cli.main(["label", "mc", "--policy", "lab", "--input", str(bad), "--rollouts", "2",
                   "--output", str(tmp_path / "mc.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"prmkit: all {len(rows)} of {len(rows)} records: no rollout")
    assert "reference column" in err[-1]
    assert len(read_records(str(tmp_path / "mc.jsonl"))) == len(rows)
    half = tmp_path / "half.jsonl"
    half.write_text("".join(json.dumps(r if i == 0 else {**r, "reference": "no such answer"}) + "\n"
                            for i, r in enumerate(rows)))
    assert cli.main(["label", "mc", "--policy", "lab", "--input", str(half), "--rollouts", "8",
                     "--output", str(tmp_path / "mc2.jsonl")]) == 0


def test_label_mc_refuses_a_record_without_reference(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"id": "a", "problem": "p", "steps": ["x"], "reference": "1"}) + "\n"
                    + json.dumps({"id": "b", "problem": "p", "steps": ["x"]}) + "\n")
    rc = cli.main(["label", "mc", "--policy", "lab", "--input", str(path), "--output",
                   str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}:2: field 'reference'" in err
    assert not list(tmp_path.glob("o.jsonl*"))


def test_label_judge_on_a_tiny_model_counts_what_it_cannot_parse(tmp_path, lab_solutions, capsys):
    tiny = pytest.importorskip("tiny")
    folder = tmp_path / "judge"
    tiny.causal_lm().save_pretrained(folder)
    tiny.tokenizer().save_pretrained(folder)
    capsys.readouterr()
    out = tmp_path / "judge.jsonl"
    argv = ["label", "judge", "--judge", folder, "--input", lab_solutions, "--samples", 2,
            "--temperature", 1.0, "--max-tokens", 6, "--dtype", "float32", "--limit", 3,
            "--output", out]
    assert cli.main([str(a) for a in argv]) == 0
    err = capsys.readouterr().err
    # a random model writes no \boxed{index}: every output is counted as unparseable
    assert "judged 3 records (0 resumed): 0 with a verdict" in err
    assert "6 of 6 outputs unparseable" in err
    for r in read_records(str(out)):
        assert r.first_error is None and r.labels is None
        assert r.meta["judge"]["unparseable"] == 2 and len(r.meta["judge"]["unparsed_tails"]) == 2


def test_consensus_and_quality_commands(tmp_path, lab_solutions, capsys):
    recs = read_records(str(lab_solutions))
    mc, judge = tmp_path / "mc.jsonl", tmp_path / "judge.jsonl"
    assert cli.main(["label", "mc", "--policy", "lab", "--input", str(lab_solutions),
                     "--rollouts", "4", "--output", str(mc)]) == 0
    labelled = read_records(str(mc))
    # a judge that agrees on the first two records, disagrees on the third, misses the rest
    verdicts = [labelled[0].first_error, labelled[1].first_error,
                1 if labelled[2].first_error != 1 else 0]
    for r, v in zip(recs, verdicts):
        r.first_error, r.meta = v, {"judge": {"model": "hand", "samples": 1}}
    write_records(str(judge), recs[:3])
    capsys.readouterr()
    agreed = tmp_path / "agreed.jsonl"
    assert cli.main(["label", "consensus", "--mc", str(mc), "--judge", str(judge),
                     "--output", str(agreed)]) == 0
    assert "kept 2, dropped 1 (first errors differ), missing 3" in capsys.readouterr().out
    assert [r.id for r in read_records(str(agreed))] == [r.id for r in labelled[:2]]

    report = tmp_path / "q.json"
    assert cli.main(["label", "quality", "--gold", "lab", "--output", str(report), str(mc),
                     str(judge)]) == 0
    text = capsys.readouterr().out
    assert "mc per-step hard K=4" in text and "judge hand x1" in text
    rows = json.loads(report.read_text())["rows"]
    assert [q["records"] for q in rows] == [6, 3]
    assert rows[0]["rollouts_per_record"] > 0
