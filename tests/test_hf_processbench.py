"""One-pass scores equal per-prefix scores on the real ProcessBench dev slice (float32)."""

from __future__ import annotations

import json

import pytest

from prmkit.models.backends.hf import HFConfig, HFPRM, load_hf_prm
from prmkit.stepformat import PRESETS
import tiny


def processbench(shared_data, splits=("gsm8k", "math", "olympiadbench", "omnimath")):
    rows = []
    for split in splits:
        rows += json.load(open(shared_data / "processbench_dev" / f"{split}.json"))
    return [r["problem"] for r in rows], [r["steps"] for r in rows]


def max_diff(a, b):
    assert [len(x) for x in a] == [len(x) for x in b]
    assert all((x is None) == (y is None) for u, v in zip(a, b) for x, y in zip(u, v))
    return max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v) if x is not None)


TINY = [("math-shepherd", tiny.causal_lm), ("qwen-prm", lambda: tiny.token_classifier(2))]


@pytest.mark.parametrize("fmt,make", TINY, ids=[t[0] for t in TINY])
def test_tiny_models_on_the_gsm8k_split(shared_data, fmt, make):
    problems, steps = processbench(shared_data, ("gsm8k",))
    assert len(problems) == 40
    check_tiny(fmt, make, problems, steps)


@pytest.mark.slow
@pytest.mark.parametrize("fmt,make", TINY, ids=[t[0] for t in TINY])
def test_tiny_models_on_the_whole_dev_slice(shared_data, fmt, make):
    problems, steps = processbench(shared_data)
    assert len(problems) == 347
    check_tiny(fmt, make, problems, steps)


def check_tiny(fmt, make, problems, steps):
    prm = HFPRM(make(), tiny.tokenizer(), PRESETS[fmt], HFConfig(dtype="float32"))
    one = prm.score(problems, steps)
    pre = prm.score_per_prefix(problems, steps)
    assert all(len(s) == len(t) for s, t in zip(one, steps))
    assert max_diff(one, pre) < 1e-4


def test_default_model_one_pass_equals_per_prefix(shared_data):
    problems, steps = processbench(shared_data, ("gsm8k",))
    prm = load_hf_prm("smollm2-135m", "math-shepherd", HFConfig(dtype="float32"))
    one = prm.score(problems[:3], steps[:3])
    pre = prm.score_per_prefix(problems[:3], steps[:3])
    assert max_diff(one, pre) < 1e-4


@pytest.mark.slow
def test_default_model_on_the_whole_dev_slice(shared_data):
    problems, steps = processbench(shared_data)
    prm = load_hf_prm("smollm2-135m", "math-shepherd", HFConfig(dtype="float32"))
    assert max_diff(prm.score(problems, steps), prm.score_per_prefix(problems, steps)) < 1e-4


def default_prm_or_skip():
    from prmkit.models.pypi import DEFAULT_PRM_DIR
    import os

    if not os.path.isfile(os.path.join(DEFAULT_PRM_DIR, "prmkit_format.json")):
        pytest.skip("no default PRM in this checkout")
    return DEFAULT_PRM_DIR


def test_default_head_prm_one_pass_equals_per_prefix(shared_data):
    problems, steps = processbench(shared_data, ("gsm8k",))
    prm = load_hf_prm(default_prm_or_skip(), config=HFConfig(dtype="float32"))
    assert prm.format.reading == "classes"
    one = prm.score(problems[:3], steps[:3])
    assert max_diff(one, prm.score_per_prefix(problems[:3], steps[:3])) < 1e-4


@pytest.mark.slow
def test_default_head_prm_on_the_whole_dev_slice(shared_data):
    problems, steps = processbench(shared_data)
    prm = load_hf_prm(default_prm_or_skip(), config=HFConfig(dtype="float32"))
    assert max_diff(prm.score(problems, steps), prm.score_per_prefix(problems, steps)) < 1e-4
