"""The architecture matrix: every architecture prmkit scores either shares prefixes exactly or is
read plain with its reason, and label-token scores are the model's own logits.

Tiny random models of each architecture (tests/archmodels.py), float32, on grouped candidates
that share a prompt and some steps. The reference is one record per forward pass (no padding,
no packing, the model's own masks); the model's own logits come from its full forward.
"""

from __future__ import annotations

import random

import pytest
import tiny
from archmodels import WINDOW, architectures

from prmkit.models.architectures import TREE_EXACT, local_span, tree_blocker
from prmkit.models.backends.hf import HFConfig, HFPRM
from prmkit.models.sharing.prefix import ShareStats, score_shared, sharing_blocker
from prmkit.stepformat import PRESETS

TOL = 1e-5
ARCHS = {name: build for name, build, _ in architectures()}
PROMPT = "Tom bought {a} apples in April, and then he sold half as many in May. What is {a} + {b}?"


def grouped(seed: int = 0, problems: int = 3, candidates: int = 5, short: bool = False):
    """(problems, steps, groups): candidates sharing a prompt and some first steps."""
    rng = random.Random(seed)
    out = ([], [], [])
    for g in range(problems):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        forms = [f"{a} + {b} = {a + b}.", f"Half of {a} is {a // 2}.", "So 1/2 = 0.5.",
                 "The answer is \\boxed{%d}." % (a + b)]
        shared = [forms[0]] if short else [forms[k % 4] for k in range(rng.randint(1, 2))]
        for c in range(candidates):
            n = 1 if short else rng.randint(1, 5)
            own = [forms[(k + rng.randint(0, 3)) % 4] for k in range(n)]
            out[0].append("What is {a}?".format(a=a) if short else PROMPT.format(a=a, b=b))
            out[1].append(shared + own if c % 3 else own)
            out[2].append(f"g{g}")
    return out


def prm_of(model, fmt: str = "math-shepherd", budget: int = 4096) -> HFPRM:
    return HFPRM(model, tiny.tokenizer(), PRESETS[fmt], HFConfig(dtype="float32",
                                                                token_budget=budget))


def one_per_pass(model, problems, steps, fmt: str = "math-shepherd"):
    """The reference: each record alone in its own forward pass."""
    return prm_of(model, fmt, budget=1).score(problems, steps)


def gap(a, b) -> float:
    return max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s)
               if x is not None and y is not None)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_grouped_scores_equal_one_record_per_pass_or_are_read_plain_with_a_reason(name):
    model = ARCHS[name]()
    problems, steps, groups = grouped()
    prm = prm_of(model)
    stats = ShareStats()
    shared = score_shared(prm, problems, steps, groups, stats)
    assert gap(shared, one_per_pass(model, problems, steps)) <= TOL
    assert all(len(a) == len(s) for a, s in zip(shared, steps))
    if tree_blocker(model) is not None:
        assert stats.groups == 0 and stats.alone == len(problems)
        assert stats.off == sharing_blocker(prm) == tree_blocker(model)
    elif local_span(model.config) is not None and local_span(model.config) < 100:
        assert stats.groups == 0 and f"window of {WINDOW}" in stats.off   # longer than it
    else:
        assert stats.groups == 3 and stats.off == "" and stats.computed < stats.plain


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_label_token_scores_are_the_models_own_logits(name):
    import torch

    model = ARCHS[name]()
    prm = prm_of(model)
    problems, steps, _ = grouped(seed=1, problems=2, candidates=2)
    got = prm.score(problems, steps)
    for p, s, row in zip(problems, steps, got):
        enc = prm.encode(p, s)
        with torch.inference_mode():
            logits = model(torch.tensor([enc.input_ids])).logits[0, enc.read_positions]
        own = torch.softmax(logits[:, prm.reader.pair].float(), dim=-1)[:, 0].tolist()
        assert max(abs(a - b) for a, b in zip(own, row)) <= TOL


@pytest.mark.parametrize("name", ["mistral_window", "qwen2_window", "gemma3"])
def test_a_windowed_model_shares_the_groups_that_fit_its_window(name):
    model = ARCHS[name]()
    problems, steps, groups = grouped(short=True)
    prm = prm_of(model)
    assert max(len(prm.encode(p, s).input_ids) for p, s in zip(problems, steps)) <= WINDOW
    stats = ShareStats()
    shared = score_shared(prm, problems, steps, groups, stats)
    assert stats.groups == 3 and stats.off == ""
    assert gap(shared, one_per_pass(model, problems, steps)) <= TOL


def test_the_allowlist_is_what_the_matrix_proves():
    """Every architecture the allowlist names is in the matrix above (where this transformers
    has it), so none is shared on trust."""
    tested = {ARCHS[n]().config.model_type for n in ARCHS}
    import transformers

    missing = {t for t in TREE_EXACT - tested
               if t in transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES}
    assert missing == set()


def test_classification_heads_share_exactly():
    import torch
    from transformers import MistralConfig, MistralForTokenClassification

    from archmodels import _common

    torch.manual_seed(0)
    model = MistralForTokenClassification(MistralConfig(**_common(), sliding_window=4096,
                                                        num_labels=2)).eval()
    problems, steps, groups = grouped()
    stats = ShareStats()
    shared = score_shared(prm_of(model, "qwen-prm"), problems, steps, groups, stats)
    assert stats.groups == 3
    assert gap(shared, one_per_pass(model, problems, steps, "qwen-prm")) <= TOL


def test_score_says_why_sharing_is_off(tmp_path, capsys):
    from prmkit.cli import main

    model = ARCHS["gptneo_local"]()
    folder = tmp_path / "gptneo"
    model.save_pretrained(folder)
    tiny.tokenizer().save_pretrained(folder)
    problems, steps, groups = grouped(problems=2, candidates=3)
    import json

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "problem": p, "steps": s, "group": g}) + "\n"
                           for i, (p, s, g) in enumerate(zip(problems, steps, groups))))
    rc = main(["score", "--model", str(folder), "--format", "math-shepherd", "--dtype", "float32",
               "--input", str(src), "--output", str(tmp_path / "out.jsonl")])
    assert rc == 0
    assert "prefix sharing off: gpt_neo uses local attention" in capsys.readouterr().err
