"""scripts/train_default_prm.py: its ProcessBench figures against a hand-worked example, and a
clear error for a PRMBench category with no file."""

import importlib.util
import os

import pytest

from prmkit.shareddata import shared_data_dir

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "train_default_prm.py")


@pytest.fixture(scope="module")
def rebuild():
    spec = importlib.util.spec_from_file_location("train_default_prm", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pb(labels, model, heuristic):
    preds = [{"split": s, "label": y, "predicted": p}
             for s in labels for y, p in zip(labels[s], model[s])]
    return {"threshold": 0.5, "model": {"splits": {s: {"f1": None} for s in labels}},
            "predictions": preds, "beats_position_length": False,
            "baselines": {"position_length": {"predictions": heuristic,
                                              "splits": {s: {"f1": None} for s in labels}}}}


def test_processbench_figures_by_hand(rebuild):
    # split a: correct samples 0 and 3, erroneous 1 and 2.
    #   model: sample 0 right, 3 wrong (correct acc 50); 1 right, 2 wrong (error acc 50): F1 50.
    #   heuristic says "no error" everywhere: correct acc 100, error acc 0: F1 0.
    #   sources heuristic is exact: F1 100.
    # split b: model exact (F1 100); heuristic flags step 0 on both: error acc 100, correct 0: 0.
    labels = {"a": [-1, 2, 1, -1], "b": [0, -1]}
    model = {"a": [-1, 2, 0, 0], "b": [0, -1]}
    heuristic = {"a": [-1, -1, -1, -1], "b": [0, 0]}
    sources = {"a": [-1, 2, 1, -1], "b": [0, -1]}
    fig = rebuild.processbench_figures(_pb(labels, model, heuristic), sources, draws=200)
    assert fig["average_f1"] == 75.0
    assert fig["heuristic_average_f1"] == 0.0
    assert fig["sources_heuristic_average_f1"] == 100.0
    assert fig["model_minus_heuristic"] == 75.0
    assert fig["model_minus_sources_heuristic"] == -25.0
    lo, hi = fig["model_minus_sources_heuristic_interval"]
    assert lo <= -25.0 <= hi and lo < hi   # split a resamples, so the interval is not a point
    assert fig["sources_heuristic_average_f1_interval"] == [100.0, 100.0]
    assert fig["per_split_f1_interval"]["b"] == [100.0, 100.0]   # exact on every resample
    lo, hi = fig["per_split_f1_interval"]["a"]
    assert lo <= 50.0 <= hi and lo < hi
    assert fig["heuristic_per_split_f1_interval"] == {"a": [0.0, 0.0], "b": [0.0, 0.0]}
    assert "sources_heuristic_average_f1" not in rebuild.processbench_figures(
        _pb(labels, model, heuristic), draws=50)


def test_unknown_prmbench_category_names_the_folder_and_the_known_ones(rebuild):
    folder = os.path.join(shared_data_dir(), "prmbench_train_p1_first400")
    if not os.path.isdir(folder):
        pytest.skip(f"{folder} is missing")
    with pytest.raises(SystemExit) as e:
        rebuild.prmbench(["counterfactual", "redundancy"])
    msg = str(e.value)
    assert "redundancy" in msg and folder in msg and "redundency" in msg


def test_recipe_flags_keep_what_defines_the_recipe(rebuild):
    argv = ["--recipe", "small", "--n-prm800k", "600", "--work=/tmp/w", "--no-install",
            "--model", "m", "--last-k", "1", "--card-only"]
    assert rebuild.recipe_flags(argv) == ["--n-prm800k", "600", "--last-k", "1"]


def test_the_card_s_verdict_follows_the_interval():
    import sys

    sys.path.insert(0, os.path.dirname(SCRIPT))
    from default_prm_card import plainly

    def fig(lo, hi):
        pb = {"average_f1": 20.0, "average_f1_interval": [15.0, 25.0], "heuristic_average_f1": 30.0,
              "heuristic_average_f1_interval": [25.0, 35.0], "model_minus_heuristic": (lo + hi) / 2,
              "model_minus_heuristic_interval": [lo, hi], "per_split_f1": {"a": 10.0, "b": 40.0},
              "heuristic_per_split_f1": {"a": 20.0, "b": 30.0}, "random_average_f1": 12.0}
        return {"processbench": pb, "sizes": {"dev": 5}}

    assert "does **not** beat" in plainly(fig(-9.0, -1.0))
    assert "Why it stays below" in plainly(fig(-9.0, -1.0))
    assert "- It beats" in plainly(fig(1.0, 9.0)) and "Why" not in plainly(fig(1.0, 9.0))
    assert "is not told apart from" in plainly(fig(-3.0, 2.0))
    assert "Splits where it is ahead: b." in plainly(fig(-3.0, 2.0))
