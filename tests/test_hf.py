"""The HF scorer against slower, obviously correct references, on tiny models in float32."""

from __future__ import annotations

import os

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.models.backends.hf import HFConfig, HFPRM, load_hf_prm
from prmkit.stepformat import PRESETS
import tiny

PROBLEMS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends in April.",
            "Let's call the price of a pencil p."]
STEPS = [["2 + 3 = 5.", "The answer is 5."],
         ["She sold half as many in May.", "48 / 2 = 24.", "48 + 24 = 72.", "\\boxed{72}"],
         ["Then 3p + e = 124."]]
F32 = HFConfig(dtype="float32")


def naive_scores(model, tok, fmt_name, problem, steps):
    """Reference: the whole model, one unpadded sequence, read each step by hand."""
    bound = PRESETS[fmt_name].bind(tok)
    enc = bound.encode(problem, steps)
    with torch.no_grad():
        logits = model(torch.tensor([enc.input_ids])).logits[0].float()
    out = []
    for p in enc.read_positions:
        row = logits[p]
        if PRESETS[fmt_name].reading == "label-tokens":
            pos, neg = row[bound.positive_id].item(), row[bound.negative_id].item()
            out.append(1.0 / (1.0 + torch.exp(torch.tensor(neg - pos)).item()))
        elif row.numel() == 1:
            out.append(torch.sigmoid(row[0]).item())
        else:
            out.append(torch.softmax(row, -1)[PRESETS[fmt_name].positive_class].item())
    return out


def close(a, b, tol=1e-5):
    return all(abs(x - y) <= tol for u, v in zip(a, b) for x, y in zip(u, v)) and \
        [len(u) for u in a] == [len(v) for v in b]


CASES = [("math-shepherd", tiny.causal_lm), ("rlhflow", tiny.causal_lm),
         ("qwen-prm", lambda: tiny.token_classifier(2)), ("trl", lambda: tiny.token_classifier(2)),
         ("prmkit", lambda: tiny.token_classifier(2))]


@pytest.mark.parametrize("fmt,make", CASES, ids=[c[0] for c in CASES])
def test_one_pass_equals_per_prefix_equals_naive(fmt, make):
    model = make()
    prm = HFPRM(model, tiny.tokenizer(), PRESETS[fmt], F32)
    one = prm.score(PROBLEMS, STEPS)
    pre = prm.score_per_prefix(PROBLEMS, STEPS)
    naive = [naive_scores(model, tiny.tokenizer(), fmt, p, s) for p, s in zip(PROBLEMS, STEPS)]
    assert close(one, pre, 1e-5), (one, pre)
    assert close(one, naive, 1e-5), (one, naive)
    assert all(0.0 <= x <= 1.0 for s in one for x in s)


def test_value_head_reads_a_sigmoid():
    from prmkit.stepformat import StepFormat

    fmt = StepFormat(name="v", prefix="{problem} ", step="{step} ки", between="\n", reading="value")
    model = tiny.token_classifier(1)
    prm = HFPRM(model, tiny.tokenizer(), fmt, F32)
    enc = fmt.bind(tiny.tokenizer()).encode(PROBLEMS[1], STEPS[1])
    with torch.no_grad():
        logits = model(torch.tensor([enc.input_ids])).logits[0, :, 0]
    want = [torch.sigmoid(logits[p]).item() for p in enc.read_positions]
    assert close(prm.score(PROBLEMS[1:2], STEPS[1:2]), [want])


def test_batch_makeup_and_padding_mask_do_not_change_scores():
    model = tiny.causal_lm()
    ref = HFPRM(model, tiny.tokenizer(), PRESETS["math-shepherd"],
                HFConfig(dtype="float32", token_budget=1)).score(PROBLEMS, STEPS)  # one per batch
    for drop in (True, False):
        prm = HFPRM(model, tiny.tokenizer(), PRESETS["math-shepherd"],
                    HFConfig(dtype="float32", token_budget=4096, drop_padding_mask=drop))
        assert close(prm.score(PROBLEMS, STEPS), ref, 1e-5)
        assert prm.stats.forwards == 1


def test_batches_sorted_by_length_within_token_budget():
    prm = HFPRM(tiny.causal_lm(), tiny.tokenizer(), PRESETS["math-shepherd"],
                HFConfig(dtype="float32", token_budget=100))
    lengths = [10, 50, 30, 45, 5, 20]
    batches = prm.batches(lengths)
    assert sorted(i for b in batches for i in b) == list(range(6))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 100


def test_long_solution_gets_null_for_steps_past_the_limit(caplog):
    model = tiny.causal_lm()
    full = HFPRM(model, tiny.tokenizer(), PRESETS["math-shepherd"], F32)
    enc = full.bound.encode(PROBLEMS[1], STEPS[1])
    limit = enc.read_positions[2]  # steps 0 and 1 fit, 2 and 3 do not
    cut = HFPRM(model, tiny.tokenizer(), PRESETS["math-shepherd"],
                HFConfig(dtype="float32", max_length=limit))
    got = cut.score(PROBLEMS[1:2], STEPS[1:2])[0]
    want = full.score(PROBLEMS[1:2], STEPS[1:2])[0]
    assert got[2:] == [None, None]
    assert close([got[:2]], [want[:2]])
    assert cut.stats.truncated_solutions == 1
    assert "not scored" in caplog.text


def save(model, path, fmt=None):
    model.save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    if fmt:
        PRESETS[fmt].save(str(path))


def test_load_from_folder_uses_the_saved_format(tmp_path):
    model = tiny.token_classifier(2)
    save(model, tmp_path, "prmkit")
    prm = load_hf_prm(str(tmp_path), config=F32)
    assert prm.format == PRESETS["prmkit"]
    direct = HFPRM(model, tiny.tokenizer(), PRESETS["prmkit"], F32).score(PROBLEMS, STEPS)
    assert close(prm.score(PROBLEMS, STEPS), direct)


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(PrmkitError, match="no such folder"):
        load_hf_prm(str(tmp_path / "missing"), "math-shepherd")
    save(tiny.causal_lm(), tmp_path / "lm")
    with pytest.raises(PrmkitError, match="--format"):
        load_hf_prm(str(tmp_path / "lm"))
    with pytest.raises(PrmkitError, match="classification head"):
        load_hf_prm(str(tmp_path / "lm"), "qwen-prm", F32)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PrmkitError, match="config.json"):
        load_hf_prm(str(tmp_path / "empty"), "math-shepherd")


def test_only_safetensors_weights_are_loaded(tmp_path):
    model = tiny.causal_lm()
    model.save_pretrained(tmp_path, safe_serialization=False)
    tiny.tokenizer().save_pretrained(tmp_path)
    if not any(f.endswith(".bin") for f in os.listdir(tmp_path)):
        pytest.skip("this transformers version always writes safetensors")
    with pytest.raises(PrmkitError):
        load_hf_prm(str(tmp_path), "math-shepherd", F32)


# /proc/cpuinfo lines as Linux writes them (abridged): an AMD EPYC with AVX2 alone, a Sapphire
# Rapids with AVX512-BF16 and AMX, and an Arm Neoverse V1 with the BF16 extension
AVX2_ONLY = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
SPR = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
NEOVERSE = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize("cpuinfo, native", [(AVX2_ONLY, False), (SPR, True), (NEOVERSE, True),
                                             ("", False),
                                             ("flags\t: avx512f avx512bw\n", False)])
def test_native_bf16_is_read_from_the_cpu_flags(cpuinfo, native):
    from prmkit.models.reading import cpu_has_native_bf16

    assert cpu_has_native_bf16(cpuinfo) is native


def test_auto_dtype_is_bfloat16_only_where_it_is_native(monkeypatch):
    from prmkit.models import reading

    monkeypatch.delenv(reading.AUTO_DTYPE_ENV, raising=False)
    monkeypatch.setattr(reading, "cpu_has_native_bf16", lambda cpuinfo=None: False)
    assert reading.fast_dtype("cpu") == "float32"
    assert reading.torch_dtype("auto", "cpu") is torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert reading.fast_dtype("cuda:1") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)   # before Ampere
    assert reading.fast_dtype("cuda") == "float32"
    assert reading.torch_dtype("bfloat16", "cpu") is torch.bfloat16   # asked for: kept
    monkeypatch.setattr(reading, "cpu_has_native_bf16", lambda cpuinfo=None: True)
    assert reading.torch_dtype("auto", "cpu") is torch.bfloat16


def test_prmkit_auto_dtype_sets_what_auto_means_on_any_machine(monkeypatch):
    from prmkit.errors import PrmkitError
    from prmkit.models import reading

    for native in (True, False):
        monkeypatch.setattr(reading, "cpu_has_native_bf16", lambda cpuinfo=None, n=native: n)
        for forced in ("float32", "bfloat16"):
            monkeypatch.setenv(reading.AUTO_DTYPE_ENV, forced)
            assert reading.fast_dtype("cpu") == forced
            assert reading.torch_dtype("auto", "cpu") is getattr(torch, forced)
            assert reading.torch_dtype("float32", "cpu") is torch.float32   # asked for: kept
    monkeypatch.setenv(reading.AUTO_DTYPE_ENV, "float64")
    with pytest.raises(PrmkitError, match="PRMKIT_AUTO_DTYPE"):
        reading.fast_dtype("cpu")
