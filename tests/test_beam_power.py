"""scripts/beam_power.py, the simulation that sized the demo's beam claim, on hand-made runs."""

import importlib.util
import os

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "beam_power.py")


@pytest.fixture(scope="module")
def power():
    spec = importlib.util.spec_from_file_location("beam_power", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(beam4, bon16, beam8, bon32):
    """A demo summary.json's search stage with these per-problem outcomes."""
    per = lambda xs: {f"p{i}": float(x) for i, x in enumerate(xs)}  # noqa: E731
    return {"search": {"rows": [{"method": "beam", "n": 4, "per_problem": per(beam4)},
                                {"method": "beam", "n": 8, "per_problem": per(beam8)},
                                {"method": "best-of-n", "n": 16, "per_problem": per(bon16)},
                                {"method": "best-of-n", "n": 32, "per_problem": per(bon32)}]}}


def test_the_pool_pairs_each_width_with_best_of_4b_and_the_summary_by_hand(power):
    pool = power.pool_of([run([1, 1], [0, 1], [1, 0], [1, 0]), run([0, 1], [1, 1], [1, 1], [1, 1])])
    assert len(pool) == 4
    assert pool[0] == {4: (1.0, 0.0), 8: (1.0, 1.0)}
    # B=4 differences 100, 0, -100, 0: mean 0, SD sqrt(20000 / 3) = 81.6; B=8 all 0.
    assert power.summary(pool) == ("4 problems pooled; beam minus best-of-4B per problem: "
                                   "B=4: +0.0 points (SD 81.6); B=8: +0.0 points (SD 0.0)")


def test_power_is_one_where_beam_equals_best_of_4b_and_zero_where_it_always_loses(power):
    same = power.pool_of([run([1, 0, 1], [1, 0, 1], [0, 1, 1], [0, 1, 1])])
    assert power.power(same, 40, draws=5, margin=5.0) == 1.0
    worse = power.pool_of([run([0, 0, 1], [1, 1, 1], [0, 0, 0], [1, 1, 1])])
    assert power.power(worse, 40, draws=5, margin=5.0) == 0.0


def test_a_run_without_the_search_stage_is_refused(power):
    with pytest.raises(SystemExit, match="--full"):
        power.pool_of([{"search": None}])
