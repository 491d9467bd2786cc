"""The lab's shared statistics (prmkit/lab/stats.py) against hand-worked and published examples."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from prmkit.lab import stats
from prmkit.lab.traceerror.stats import PerProblem, newcombe


def test_wilson_on_zero_of_n_by_hand():
    # 0 of 100, z = 1.95996: centre = (z^2 / 200) / (1 + z^2 / 100) = half-width, so the
    # interval is [0, 2 * 0.018497] = [0, 0.036994]
    lo, hi = stats.wilson(0, 100)
    assert lo == 0.0 and hi == pytest.approx(0.036994, abs=1e-6)
    assert stats.wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("k, n, lo, hi", [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605),
                                          (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)])
def test_wilson_against_newcombe_1998_table_1(k, n, lo, hi):
    got = stats.wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=6e-5)


@pytest.mark.parametrize("k, n, lo, hi", [(81, 263, 0.2527, 0.3676), (15, 148, 0.0578, 0.1617),
                                          (0, 20, 0.0, 0.1684), (1, 29, 0.0009, 0.1776)])
def test_clopper_pearson_against_newcombe_1998_table_1(k, n, lo, hi):
    got = stats.clopper_pearson(k, n)
    assert got == pytest.approx((lo, hi), abs=6e-5)


def test_clopper_pearson_on_zero_and_all_of_n_in_closed_form():
    # 0 of n: [0, 1 - 0.025^(1/n)]; n of n: [0.025^(1/n), 1]
    assert stats.clopper_pearson(0, 100) == (0.0, pytest.approx(1 - 0.025 ** 0.01, abs=1e-9))
    assert stats.clopper_pearson(100, 100) == (pytest.approx(0.025 ** 0.01, abs=1e-9), 1.0)
    assert 1 - 0.025 ** 0.01 == pytest.approx(0.036217, abs=1e-6)


def test_newcombe_difference_against_newcombe_1998b():
    # 56/70 - 48/80: 0.2000, hybrid score interval [0.0524, 0.3339] (Newcombe 1998, method 10)
    a = PerProblem({str(i): 1.0 for i in range(70)}, {str(i): float(i < 56) for i in range(70)})
    b = PerProblem({str(i): 1.0 for i in range(80)}, {str(i): float(i < 48) for i in range(80)})
    assert newcombe(a, b) == pytest.approx([5.24, 33.39], abs=0.01)


def test_paired_bootstrap_on_a_tiny_case():
    # differences 100 and 0 points: resample means are 0, 50 or 100 (chances 1/4, 1/2, 1/4),
    # so the central 95% and 90% intervals are [0, 100]
    a, b = {"A": 1.0, "B": 0.0}, {"A": 0.0, "B": 0.0}
    for level in (0.95, 0.90):
        c = stats.paired(a, b, level=level)
        assert c.difference == 50.0 and c.ci95 == [0.0, 100.0] and not c.holds
    # at 95% it is evaluate.paired's, draw for draw
    x = {str(i): float(i % 3 == 0) for i in range(30)}
    y = {str(i): float(i % 5 == 0) for i in range(30)}
    assert stats.paired(x, y, seed=4) == stats.paired_difference(x, y, seed=4)
    # one constant difference: every resample has it
    assert stats.paired({"A": 1.0, "B": 1.0}, b, level=0.9).ci95 == [100.0, 100.0]


def test_percentile_interval_and_cover():
    assert stats.percentile_interval(list(range(101))) == [2.5, 97.5]
    assert stats.percentile_interval(list(range(101)), level=0.9) == [5.0, 95.0]
    assert stats.percentile_interval([]) == [0.0, 0.0]
    assert stats.cover(3.0, 1.0, 2.0) == (1.0, 3.0) and stats.cover(1.5, 1.0, 2.0) == (1.0, 2.0)


def test_ratio_bootstrap_on_a_tiny_case():
    # problem A: 1 flawed of 1 right against 0 of 1; problem B: 0 of 1 against 0 of 0.
    # resamples AA: 100 - 0, AB and BA: 50 - 0, BB: the second has no right pick, left out
    cols = np.array([[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    point, ci, left_out = stats.ratio_difference(cols, bootstrap=4000, seed=1)
    assert point == 50.0 and ci == [50.0, 100.0]
    assert left_out == pytest.approx(1000, rel=0.1)


def test_summary_is_written_whole_and_rows_print_aligned(tmp_path, capsys):
    path = stats.write_summary(str(tmp_path), {"claims": {"x": 1}})
    assert json.loads(open(path).read()) == {"claims": {"x": 1}}
    assert not (tmp_path / "summary.json.tmp").exists()
    stats.print_rows("title", [("a", "1"), ("long name", "2")])
    assert capsys.readouterr().out == "\ntitle\n  a          1\n  long name  2\n"
    c = {"holds": True, "difference": 2.0, "ci95": [0.5, 3.25], "problems": 80}
    assert stats.verdict(c) == "YES: +2.0 points, 95% CI [+0.5, +3.2] over 80 problems"
    assert stats.verdict({**c, "holds": False}, level="90%").startswith("NO: +2.0 points, 90% CI")
    assert not math.isnan(stats.wilson(0.5, 1.5)[1])      # fractional counts (draw averages)


def test_holm_on_a_textbook_case():
    # four p-values at alpha 0.05: sorted 0.005 (<= 0.05/4), 0.01 (<= 0.05/3), 0.03 (> 0.05/2):
    # the first two are rejected; the step-down stops at the third, so 0.04 is not.
    out = stats.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}, 0.05)
    assert {k: v[0] for k, v in out.items()} == {"a": True, "b": False, "c": False, "d": True}
    assert out["d"][1] == pytest.approx(0.0125) and out["a"][1] == pytest.approx(0.05 / 3)
    assert out["c"][1] == pytest.approx(0.025) and out["b"][1] == pytest.approx(0.05)
    assert list(out) == ["d", "a", "c", "b"]          # Holm's order


def test_paired_holm_reads_each_claim_at_its_level():
    keys = [str(i) for i in range(40)]
    same = {k: 1.0 for k in keys}
    # "tie": a and b agree on every problem: every bootstrap mean is 0, p = 0, interval [0, 0]
    # "worse": a is 10 points below b on 4 of 40 problems' worth (4 problems lost): mean -10
    worse = {k: (0.0 if i < 4 else 1.0) for i, k in enumerate(keys)}
    out = stats.paired_holm({"tie": (same, same), "worse": (worse, same)}, margin=5.0, seed=0)
    tie, bad = out["tie"], out["worse"]
    assert tie["p_value"] == 0.0 and tie["holm_level"] == pytest.approx(0.975)  # 0.025 / 2 a tail
    assert tie["ci_holm"] == [0.0, 0.0] and tie["claim"].holds and tie["holm_step"] == 1
    assert bad["claim"].difference == -10.0 and bad["holm_level"] == pytest.approx(0.95)
    assert bad["p_value"] > 0.5 and not bad["claim"].holds and bad["holm_step"] == 2
    assert bad["ci_holm"] == bad["claim"].ci95        # read at 95%, its Holm level is its 95%
    # one claim alone is paired's claim, draw for draw
    alone = stats.paired_holm({"worse": (worse, same)}, margin=5.0, seed=0)["worse"]["claim"]
    assert alone == stats.paired(worse, same, margin=5.0, seed=0)


def test_verdict_reads_differences_ratios_and_holm_alike():
    from prmkit.lab.stats import verdict

    assert verdict({"holds": True, "difference": 2.25, "ci95": [0.31, 3.8]}) == \
        "YES: +2.2 points, 95% CI [+0.3, +3.8]"
    assert verdict({"holds": False, "difference": 0.57, "ci95": [0.321, 0.99], "problems": 150},
                   unit="x", digits=2) == "NO: 0.57x, 95% CI [0.32, 0.99] over 150 problems"
    holm = {"holds": False, "difference": 0.0, "ci95": [-5.0, 5.0], "holm_step": 1,
            "holm_level": 0.975, "ci_holm": [-6.25, 6.25], "margin": 5}
    assert verdict(holm, level="95%") == ("NO: +0.0 points, 95% CI [-5.0, +5.0]; Holm step 1 at "
                                          "97.5%: [-6.2, +6.2], margin -5")
