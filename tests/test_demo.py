"""The lab demo end to end on a tiny model: every stage runs, the summary is what the files say,
and a rerun reuses the finished stages."""

from __future__ import annotations

import json
import re

import pytest

from prmkit.cli import main
from prmkit.records import read_records


@pytest.fixture
def base(tmp_path):
    """A tiny random causal LM with tied embeddings (the demo's default surprisal head reads
    the LM through them), and its tokenizer."""
    import tiny

    path = tmp_path / "base"
    tiny.causal_lm(tie_word_embeddings=True).save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


def demo_args(base, out, *extra):
    return ["demo", "--base", base, "--output", str(out), "--train-problems", "6",
            "--train-n", "2", "--test-problems", "4", "--n", "4", "--search-problems", "2",
            "--search-min-steps", "2", "--search-max-steps", "3", "--beam-n", "1", "2",
            "--beam-m", "1", "--last-k", "1", "--full", *extra]


def test_the_demo_without_full_skips_the_search_stage_and_full_then_reuses_the_rest(
        base, tmp_path, capsys):
    out = tmp_path / "demo"
    quick = [a for a in demo_args(base, out) if a != "--full"]
    assert main(quick) == 0
    printed = capsys.readouterr().out
    assert "5. " not in printed and "6. " in printed
    doc = json.loads((out / "summary.json").read_text())
    assert doc["search"] is None and "beam_matches_4x_best_of_n" not in doc["claims"]
    assert set(doc["claims"]) == {"prm_beats_majority", "prm_beats_orm", "gap_grows_with_n"}
    assert "prmkit demo --full" in doc["summary"]["claim: beam >= best-of-4B (search stage)"]
    assert not (out / "search.json").exists() and (out / "report.html").is_file()
    scored = (out / "test_scored.jsonl").stat().st_mtime_ns
    assert main(demo_args(base, out)) == 0
    printed = capsys.readouterr().out
    assert "5. " in printed and "resuming the run" in printed
    assert (out / "test_scored.jsonl").stat().st_mtime_ns == scored   # stages 1-4 reused
    doc = json.loads((out / "summary.json").read_text())
    assert doc["search"]["rows"] and "beam_matches_4x_best_of_n" in doc["claims"]


def test_demo_runs_every_stage_and_reports_what_it_measured(base, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(demo_args(base, out)) == 0
    printed = capsys.readouterr().out
    for stage in ("1. ", "2. ", "3. ", "4. ", "5. ", "6. "):
        assert stage in printed
    for word in ("PRM", "ORM", "majority", "oracle", "MC labels vs gold"):
        assert word in printed
    report = (out / "report.html").read_text()
    assert "<img" in report and "Best-of-N" in report and "Monte Carlo" in report
    # the ORM is Let's Verify's, a class head read at the last step, trained on the outcomes
    # with the PRM's budget, reading the PRM's stored frozen pass (gone once both have trained)
    trained = {k: json.loads((out / k / "last" / "prmkit_train.json").read_text())
               for k in ("prm", "orm")}
    assert trained["orm"]["kind"] == "orm" and trained["orm"]["config"]["head"] == "class"
    assert trained["prm"]["config"]["head"] == "surprisal"
    assert trained["orm"]["config"]["loop"] == trained["prm"]["config"]["loop"]
    assert trained["orm"]["config"]["frozen_store"] == str(out / "frozen")
    assert not (out / "frozen").exists()

    summary = json.loads((out / "summary.json").read_text())
    test = read_records(str(out / "test_scored.jsonl"))
    assert len(test) == 4 * 4 and all(r.step_scores and "outcome_score" in r.meta for r in test)
    # at N = all candidates every draw holds the whole group: the oracle is pass@N exactly
    groups = {}
    for r in test:
        groups.setdefault(r.group, []).append(r.is_correct)
    pass_at_n = 100 * sum(any(v) for v in groups.values()) / len(groups)
    assert summary["summary"]["best-of-4 accuracy, oracle"] == f"{pass_at_n:.1f}%"
    assert summary["bestofn"]["methods"]["oracle"][-1]["accuracy"] == pytest.approx(pass_at_n)
    # the exact-label PRM scores a solution with every step right 1 at every step (min 1) and
    # any other below, so with every candidate in the draw it picks a right one whenever some
    # candidate is right at every step
    flawless = {r.group for r in test if r.first_error == -1}
    gold = summary["bestofn"]["methods"]["gold-prm"][-1]["accuracy"]
    assert 100 * len(flawless) / len(groups) - 1e-9 <= gold <= pass_at_n + 1e-9
    # the PRM's step AUC against gold, by brute force over every (right, wrong) pair of steps
    steps = [(x, y >= 0.5) for r in test for x, y in zip(r.step_scores, r.labels)]
    right = [x for x, y in steps if y]
    wrong = [x for x, y in steps if not y]
    assert right and wrong  # the lab policy at these seeds makes both
    by_pairs = sum((a > b) + 0.5 * (a == b) for a in right for b in wrong) / (len(right) * len(wrong))
    row = summary["summary"]["PRM step AUC vs gold labels (test)"]
    assert row.startswith(f"{by_pairs:.3f} ")
    assert row.endswith("(the exact-label PRM: 1.000)")   # its scores are the gold labels
    mc = read_records(str(out / "train_mc.jsonl"))
    assert len(mc) == 12 and all("mc" in r.meta for r in mc)
    binary = read_records(str(out / "train_mc_binary.jsonl"))
    spent = (sum(r.meta["mc"]["rollouts_spent"] for r in binary),
             sum(r.meta["mc"]["rollouts_spent"] for r in mc))
    assert f"({spent[0]} / {spent[1]})" in printed
    assert [(row["method"], row["n"]) for row in summary["search"]["rows"]] == [
        ("beam", 1), ("best-of-n", 4), ("beam", 2), ("best-of-n", 8)]
    # every claim is a verdict with its paired interval, printed as YES or NO; the widths'
    # claims are Holm's: one holds only where its interval is above -5, and the family claim
    # is the first in Holm's order
    widths = {"beam_b1_matches_best_of_4", "beam_b2_matches_best_of_8"}
    assert set(summary["claims"]) == {"prm_beats_majority", "prm_beats_orm", "gap_grows_with_n",
                                      "beam_matches_4x_best_of_n"} | widths
    for name, claim in summary["claims"].items():
        lo, hi = claim["ci95"]
        assert lo <= claim["difference"] <= hi
        if name.startswith("beam"):          # Holm's interval decides, and holds the 95% one
            h_lo, h_hi = claim["ci_holm"]
            assert h_lo <= lo <= hi <= h_hi and claim["holm_level"] >= 0.95
            assert not claim["holds"] or h_lo > -5.0
        else:
            assert claim["holds"] == (lo > 0.0)
    family = summary["claims"]["beam_matches_4x_best_of_n"]
    first = summary["claims"][family.pop("width")]
    assert family == first and first["holm_step"] == 1
    assert family["holds"] == (family["ci_holm"][0] > -5.0)
    assert family["holds"] == any(summary["claims"][w]["holds"] for w in widths)
    assert printed.count("claim: ") == 4 and ("YES: " in printed or "NO: " in printed)
    assert printed.count("  beam at B=") == 2
    assert summary["prm_step_auc"] == pytest.approx(by_pairs)
    # the ORM's step AUC, the same brute force over its own step scores (its last one is the
    # outcome score that ranks candidates)
    assert all(r.meta["orm_step_scores"][-1] == r.meta["outcome_score"] for r in test)
    orm = [(x, y >= 0.5) for r in test for x, y in zip(r.meta["orm_step_scores"], r.labels)]
    orm_right, orm_wrong = [x for x, y in orm if y], [x for x, y in orm if not y]
    orm_pairs = sum((a > b) + 0.5 * (a == b) for a in orm_right for b in orm_wrong) / (
        len(orm_right) * len(orm_wrong))
    assert summary["orm_step_auc"] == pytest.approx(orm_pairs)
    assert summary["summary"]["ORM step AUC vs gold labels (test)"].startswith(f"{orm_pairs:.3f} ")
    # both read the calculator's notes (stored in their formats), and the calculator alone is
    # a verifier of its own: 1 until a step holds a wrong equation (worked out here with the
    # lab's own check of each calculation), 0 from there
    for k in ("prm", "orm"):
        assert json.loads((out / k / "last" / "prmkit_format.json").read_text())["calculator"]
    alone = []
    for r in test:
        wrong = False
        for step, y in zip(r.steps, r.labels):
            # the lab writes at most 2 decimals: a result within 0.005 of the value is right
            wrong = wrong or any(abs(eval(f"{a} {op} {b}") - float(c)) >= 0.005 for a, op, b, c in
                                 re.findall(r"(-?[\d.]+) ([-+*/]) (\d+) = (-?[\d.]+)", step))
            alone.append((0.0 if wrong else 1.0, y >= 0.5))
    a_right = [x for x, y in alone if y]
    a_wrong = [x for x, y in alone if not y]
    by_pairs = sum((a > b) + 0.5 * (a == b) for a in a_right for b in a_wrong) / (
        len(a_right) * len(a_wrong))
    assert summary["summary"]["the calculator alone: step AUC"].startswith(f"{by_pairs:.3f} ")

    # a rerun with the same settings reuses every stage and prints the same summary
    before = (out / "test_scored.jsonl").read_text()
    assert main(demo_args(base, out)) == 0
    again = capsys.readouterr().out
    assert "resuming the run" in again
    assert (out / "test_scored.jsonl").read_text() == before
    assert again.split("prmkit demo summary")[1].split("\n", 1)[1].split("report written")[0] == \
        printed.split("prmkit demo summary")[1].split("\n", 1)[1].split("report written")[0]


def test_demo_with_other_settings_starts_again(base, tmp_path, capsys):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "settings.json").write_text("{}")
    (out / "stale.jsonl").write_text("old")
    assert main(demo_args(base, out, "--seed", "3", "--rollouts", "2")) == 0
    assert not (out / "stale.jsonl").exists()
    assert json.loads((out / "settings.json").read_text())["seed"] == 3
    # the same settings written by an older version of the stages: started again too
    from prmkit.lab.demo import run as demo

    settings = json.loads((out / "settings.json").read_text())
    (out / "settings.json").write_text(json.dumps({**settings, "stages_version": 1}))
    (out / "stale.jsonl").write_text("old")
    assert main(demo_args(base, out, "--seed", "3", "--rollouts", "2")) == 0
    assert "resuming" not in capsys.readouterr().out and not (out / "stale.jsonl").exists()
    assert json.loads((out / "settings.json").read_text())["stages_version"] == demo.STAGES_VERSION


def test_demo_orm_with_its_own_recipe(base, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(demo_args(base, out, "--orm-recipe", "own")) == 0
    orm = json.loads((out / "orm" / "last" / "prmkit_train.json").read_text())["config"]
    assert orm["head"] == "class" and orm["loop"]["last_k"] == 1 and not orm["cache_frozen"]
    assert "class head, last 1 layers + head" in capsys.readouterr().out


def test_demo_orm_with_the_prms_survival_head(base, tmp_path, capsys):
    # --orm-recipe prm: the PRM's own head and recipe on the outcomes (an outcome-supervised PRM)
    out = tmp_path / "demo"
    assert main(demo_args(base, out, "--orm-recipe", "prm")) == 0
    trained = {k: json.loads((out / k / "last" / "prmkit_train.json").read_text())["config"]
               for k in ("prm", "orm")}
    assert trained["orm"]["head"] == trained["prm"]["head"] == "surprisal"
    assert trained["orm"]["loop"] == trained["prm"]["loop"]
    assert "the same head and recipe" in capsys.readouterr().out


def test_demo_never_deletes_a_folder_it_did_not_make(base, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    assert main(demo_args(base, out)) == 2
    assert "not a lab run's folder" in capsys.readouterr().err
    assert (out / "thesis.tex").read_text() == "precious"


def test_demo_searches_harder_problems_of_its_own(base, tmp_path, capsys):
    # the search problems are their own (seed + 2000), of --search-min-steps to
    # --search-max-steps operations; best-of-4B takes 4 x the largest width's samples of them,
    # scored by the same PRM, and a smaller 4B is drawn from those
    from prmkit.lab import parse_problem

    out = tmp_path / "demo"
    args = demo_args(base, out, "--search-min-steps", "3", "--search-max-steps", "4")
    assert main(args) == 0
    doc = json.loads((out / "summary.json").read_text())
    search = doc["search"]
    assert search["problems"] == 2 and search["operations"] == [3, 4]
    rows = {(r["method"], r["n"]): r for r in search["rows"]}
    assert set(rows) == {("beam", 1), ("best-of-n", 4), ("beam", 2), ("best-of-n", 8)}
    test_groups = {r.group for r in read_records(str(out / "test_candidates.jsonl"))}
    groups = set(rows["beam", 2]["per_problem"])
    assert groups == set(rows["best-of-n", 8]["per_problem"]) and not groups & test_groups
    assert all(g.startswith("lab-2000-") for g in groups)     # seed 0 + 2000
    for r in read_records(str(out / "search_candidates.jsonl")):
        assert 3 <= len(parse_problem(r.problem).ops) <= 4
    assert doc["claims"]["beam_matches_4x_best_of_n"]["problems"] == 2
    # the search samples are read one tree per problem: their scores are one-pass scoring's,
    # each sample alone
    from prmkit.models.backends.hf import HFConfig, load_hf_prm

    more = read_records(str(out / "search_scored.jsonl"))
    assert sorted(int(r.id.rsplit("-", 1)[1]) for r in more) == sorted(list(range(8)) * 2)
    assert len({r.group for r in more}) == 2
    # the demo scored in what auto means here (PRMKIT_AUTO_DTYPE or the CPU): the reference
    # reads in the same dtype, and the tolerance is that dtype's (ARCHITECTURE.md, "Numerics")
    from prmkit.models.reading import fast_dtype

    ran_in = fast_dtype()
    prm = load_hf_prm(str(out / "prm" / "last"), config=HFConfig(dtype=ran_in))
    for r in more:
        alone = prm.score([r.problem], [r.steps])[0]
        assert r.step_scores == pytest.approx(alone, abs=1e-5 if ran_in == "float32" else 3e-2)


def test_demo_search_settings_are_the_search_stages_own(base, tmp_path, capsys):
    # changing a search setting redoes the search stage alone; --margin only the summary
    out = tmp_path / "demo"
    assert main(demo_args(base, out)) == 0
    capsys.readouterr()
    kept = {name: (out / name).read_text() for name in
            ("train_mc.jsonl", "test_scored.jsonl", "prm/last/prmkit_train.json")}
    mtimes = {p.name: p.stat().st_mtime_ns for p in (out / "prm" / "last").iterdir()}
    before = json.loads((out / "summary.json").read_text())["search"]
    assert main(demo_args(base, out, "--beam-n", "1", "2", "3", "--search-problems", "3")) == 0
    assert "resuming the run" in capsys.readouterr().out
    assert {name: (out / name).read_text() for name in kept} == kept
    assert {p.name: p.stat().st_mtime_ns for p in (out / "prm" / "last").iterdir()} == mtimes
    doc = json.loads((out / "summary.json").read_text())
    assert doc["search"]["problems"] == 3
    assert {(r["method"], r["n"]) for r in doc["search"]["rows"]} == {
        ("beam", 1), ("best-of-n", 4), ("beam", 2), ("best-of-n", 8), ("beam", 3),
        ("best-of-n", 12)}
    samples = read_records(str(out / "search_scored.jsonl"))
    assert len(samples) == 3 * 12 and all(r.step_scores for r in samples)
    assert json.loads((out / "search_settings.json").read_text())["beam_n"] == [1, 2, 3]
    # back to the first settings: the same search as the first run, made again
    assert main(demo_args(base, out, "--margin", "7")) == 0
    assert "resuming the run" in capsys.readouterr().out
    doc = json.loads((out / "summary.json").read_text())
    assert _timeless(doc["search"]) == _timeless(before) and doc["config"]["margin"] == 7
    assert doc["claims"]["beam_matches_4x_best_of_n"]["problems"] == 2


def _timeless(search):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in search["rows"]]


@pytest.mark.parametrize("extra, message", [
    (["--select", "prm-mean"], "--select 'prm-mean' is not one of prm-prod, prm-min, prm-last"),
    (["--margin", "-1"], "--margin must be at least 0"),
    (["--beam-n", "3", "--beam-m", "2"], "--beam-n 3: each width must be a positive multiple of --beam-m 2"),
    (["--beam-n", "2", "2"], "--beam-n 2 2: a width twice"),
    (["--search-problems", "0"], "--search-problems must be at least 1"),
    (["--search-max-steps", "1"], "need 1 <= min_steps <= max_steps"),
    (["--orm-recipe", "mine"], "--orm-recipe 'mine' is not one of class, prm, own"),
])
def test_demo_refuses_bad_claim_settings(base, tmp_path, capsys, extra, message):
    assert main(demo_args(base, tmp_path / "demo", *extra)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


def test_demo_scoring_prints_progress_lines_off_a_terminal(base, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PRMKIT_PROGRESS_EVERY", "0")
    assert main(demo_args(base, tmp_path / "demo")) == 0
    err = capsys.readouterr().err
    # the default ORM is a class head on the PRM's frozen body: read in the PRM's passes
    name = "PRM and the ORM (one pass)"
    lines = [l for l in err.splitlines() if f"demo: scoring with the {name}:" in l]
    # 4 x 4 test candidates; then the search stage's 2 problems x 8 samples (4 x the largest
    # width, 2), by the PRM alone
    assert lines and lines[-1].split(f"{name}: ")[1].startswith("16/16 rec"), lines
    search = [l for l in err.splitlines() if "demo: scoring with the PRM (search samples):" in l]
    assert search and search[-1].split("samples): ")[1].startswith("16/16 rec"), search


def test_demo_without_the_calculator(base, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(demo_args(base, out, "--no-calculator")) == 0
    assert "the calculator alone" not in capsys.readouterr().out
    for k in ("prm", "orm"):
        assert not json.loads((out / k / "last" / "prmkit_format.json").read_text())["calculator"]


def _pairs_auc(steps):
    right = [x for x, y in steps if y]
    wrong = [x for x, y in steps if not y]
    return sum((a > b) + 0.5 * (a == b) for a in right for b in wrong) / (len(right) * len(wrong))


def test_demo_implicit_prm_is_its_own_stage_with_its_own_rows(base, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(demo_args(base, out)) == 0
    capsys.readouterr()
    scored_before = (out / "test_scored.jsonl").read_text()
    prm_files = {p.name: p.stat().st_mtime_ns for p in (out / "prm" / "last").iterdir()}
    implicit = ["--implicit", "--implicit-last-k", "1", "--implicit-epochs", "1"]
    assert main(demo_args(base, out, *implicit)) == 0
    printed = capsys.readouterr().out
    # turning it on reuses every other stage: the PRM is not trained again
    assert "resuming the run" in printed
    assert (out / "test_scored.jsonl").read_text() == scored_before
    assert {p.name: p.stat().st_mtime_ns for p in (out / "prm" / "last").iterdir()} == prm_files
    trained = json.loads((out / "implicit" / "last" / "prmkit_train.json").read_text())
    assert trained["kind"] == "implicit-prm" and trained["config"]["calculator"] is True
    assert trained["config"]["loop"]["last_k"] == 1
    assert json.loads((out / "implicit" / "last" / "prmkit_format.json").read_text())["calculator"]

    summary = json.loads((out / "summary.json").read_text())
    figures = summary["implicit"]
    implicit_scored = read_records(str(out / "implicit_scored.jsonl"))
    test = {r.id: r for r in read_records(str(out / "test_scored.jsonl"))}
    assert sorted(r.id for r in implicit_scored) == sorted(test)
    # at N = every candidate of a group, prm-prod picks the candidate whose step scores have the
    # largest product (identical texts have identical scores and outcomes)
    best: dict[str, tuple[float, bool]] = {}
    for r in implicit_scored:
        prod = 1.0
        for s in r.step_scores:
            prod *= s
        if r.group not in best or prod > best[r.group][0]:
            best[r.group] = (prod, bool(r.is_correct))
    by_hand = 100 * sum(ok for _, ok in best.values()) / len(best)
    assert figures["best_of_n"]["prm-prod"] == pytest.approx(by_hand)
    # its step AUC against the gold labels, by brute force over every (right, wrong) pair
    steps = [(x, y >= 0.5) for r in implicit_scored
             for x, y in zip(r.step_scores, test[r.id].labels)]
    assert figures["step_auc"] == pytest.approx(_pairs_auc(steps))
    row = summary["summary"]["implicit PRM step AUC vs gold labels (test)"]
    assert row.startswith(f"{_pairs_auc(steps):.3f} (outcome labels only")
    assert summary["summary"]["best-of-4 accuracy, implicit PRM (prod / min / last)"].startswith(
        f"{by_hand:.1f}% / ")
    assert {"prm_beats_majority", "prm_beats_orm", "gap_grows_with_n",
            "beam_matches_4x_best_of_n"} <= set(summary["claims"])

    # its own settings changed: only its stage is done again
    assert main(demo_args(base, out, *implicit[:-1], "2")) == 0
    assert "resuming the run" in capsys.readouterr().out
    assert json.loads((out / "implicit" / "last" / "prmkit_train.json").read_text())[
        "config"]["loop"]["epochs"] == 2
    assert (out / "test_scored.jsonl").read_text() == scored_before
    # and off again: no implicit rows
    assert main(demo_args(base, out)) == 0
    assert "implicit PRM" not in capsys.readouterr().out.split("prmkit demo summary")[1]
    assert json.loads((out / "summary.json").read_text())["implicit"] is None
