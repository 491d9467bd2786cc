"""The vLLM backend: its pure parts with fake vLLM outputs (no vLLM needed), and, where vLLM and
CUDA exist, the real engine against the HF backend.

The fake engines compute per-token logits with a tiny HF model, so "vLLM returned the documented
(tokens x labels) logits" is simulated exactly, and the vLLM backend must then agree with hf.py.
"""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.models.backends.hf import HFConfig, HFPRM
from prmkit.models.backends.vllm import (VLLMPRM, as_rows, build_prompts, engine_args,
                                label_token_overrides, pooling_params_factory, read_scores,
                                rows_for_positions, scores_from_logits)
from prmkit.stepformat import PRESETS, Encoded
import tiny

PROBLEMS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends in April.",
            "Let's call the price of a pencil p."]
STEPS = [["2 + 3 = 5.", "The answer is 5."],
         ["She sold half as many in May.", "48 / 2 = 24.", "48 + 24 = 72.", "\\boxed{72}"],
         ["Then 3p + e = 124."]]
F32 = HFConfig(dtype="float32")


class FakeParams:
    def __init__(self, use_activation=None):
        self.use_activation = use_activation


class FakeLLM:
    """Stands in for ``vllm.LLM`` with the pooling runner: ``encode`` returns, per prompt, an
    object whose ``outputs.data`` is the per-token logits of a tiny HF model.

    ``mode``: "all" (one row per token), "step" (only the rows of ``tag`` tokens, as vLLM's
    STEP pooler with a step_tag_id), "pair" (one column: logit[pos] - logit[neg], as the
    from_2_way_softmax conversion of a causal LM).
    """

    def __init__(self, model, mode="all", tag=None, pair=None):
        self.model, self.mode, self.tag, self.pair = model, mode, tag, pair
        self.calls = []

    def encode(self, prompts, pooling_params=None, *, pooling_task=None, use_tqdm=True):
        self.calls.append(SimpleNamespace(prompts=prompts, params=pooling_params, task=pooling_task))
        assert pooling_params.use_activation is False
        out = []
        for p in prompts:
            ids = p["prompt_token_ids"]
            with torch.no_grad():
                logits = self.model(torch.tensor([ids])).logits[0].float()
            if self.mode == "pair":
                pos, neg = self.pair
                logits = (logits[:, pos] - logits[:, neg]).unsqueeze(-1)
            if self.mode == "step":
                logits = logits[torch.tensor(ids) == self.tag]
            out.append(SimpleNamespace(outputs=SimpleNamespace(data=logits)))
        return out


def make(llm, fmt_name, max_length=None):
    bound = PRESETS[fmt_name].bind(tiny.tokenizer())
    return VLLMPRM.from_engine(llm, bound, max_length=max_length or 8192,
                               make_params=lambda: FakeParams(use_activation=False))


def assert_close(a, b, tol=1e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            assert (u is None) == (v is None), (x, y)
            if u is not None:
                assert abs(u - v) < tol, (x, y)


# -- pure parts ----------------------------------------------------------------------------------


def test_prompts_are_the_step_format_ids():
    bound = PRESETS["qwen-prm"].bind(tiny.tokenizer())
    encs = [bound.encode(p, s) for p, s in zip(PROBLEMS, STEPS)]
    prompts = build_prompts(encs)
    assert prompts == [{"prompt_token_ids": e.input_ids} for e in encs]
    assert all(type(t) is int for p in prompts for t in p["prompt_token_ids"])


def test_rows_all_tokens_are_the_positions():
    assert rows_for_positions(6, [5, 9, 7, 9, 9, 7], [2, 5]) == [2, 5]


def test_rows_step_pooling_map_to_tag_occurrences():
    ids = [1, 7, 2, 7, 3, 4, 7]            # tag 7 at 1, 3, 6
    assert rows_for_positions(3, ids, [3, 6]) == [1, 2]
    assert rows_for_positions(3, ids, []) == []


def test_rows_that_cannot_be_matched_are_an_error():
    with pytest.raises(PrmkitError, match="neither one row per token"):
        rows_for_positions(2, [1, 7, 2, 7, 7], [1, 3])       # 3 tags, 2 rows
    with pytest.raises(PrmkitError, match="not all read at the same tag"):
        rows_for_positions(2, [1, 7, 2, 8], [1, 3])


def test_reading_rules_hand_worked():
    # softmax([0, ln 3]) = [1/4, 3/4]; sigmoid(ln 3) = 3/4; sigmoid(0) = 1/2
    rows = np.array([[0.0, math.log(3)], [math.log(3), 0.0]])
    assert scores_from_logits(rows, "classes", 1) == pytest.approx([0.75, 0.25])
    assert scores_from_logits(rows, "classes", 0) == pytest.approx([0.25, 0.75])
    one = np.array([[math.log(3)], [0.0]])
    assert scores_from_logits(one, "value") == pytest.approx([0.75, 0.5])
    assert scores_from_logits(one, "label-tokens") == pytest.approx([0.75, 0.5])
    assert scores_from_logits(np.zeros((0, 2)), "classes") == []
    # large logits stay finite
    assert scores_from_logits(np.array([[1000.0, 0.0]]), "classes") == pytest.approx([0.0])


def test_reading_rule_width_mismatch_is_an_error():
    with pytest.raises(PrmkitError, match="class 2"):
        scores_from_logits(np.zeros((1, 2)), "classes", 2)
    with pytest.raises(PrmkitError, match="returned 2 per token"):
        scores_from_logits(np.zeros((1, 2)), "value")


def test_as_rows_accepts_tensors_lists_and_one_logit_outputs():
    t = torch.tensor([[0.5, 1.0], [2.0, -1.0]], dtype=torch.bfloat16)
    assert as_rows(t).tolist() == [[0.5, 1.0], [2.0, -1.0]]
    assert as_rows([1.0, 2.0]).shape == (2, 1)
    with pytest.raises(PrmkitError, match="shape"):
        as_rows(np.zeros((2, 2, 2)))


def test_read_scores_one_solution():
    enc = Encoded(input_ids=[3, 4, 9, 5, 9], read_positions=[2, 4], step_ends=[3, 5], n_steps=2)
    data = [[0, 0], [0, 0], [0.0, math.log(3)], [0, 0], [math.log(3), 0.0]]
    assert read_scores(data, enc, "classes") == pytest.approx([0.75, 0.25])
    tag_rows = [[0.0, math.log(3)], [math.log(3), 0.0]]       # STEP pooling, tag 9
    assert read_scores(tag_rows, enc, "classes") == pytest.approx([0.75, 0.25])


# -- the backend over fake engines ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["trl", "prmkit", "qwen-prm"])
def test_agrees_with_hf_backend_all_token_pooling(fmt):
    model = tiny.token_classifier()
    llm = FakeLLM(model)
    prm = make(llm, fmt)
    want = HFPRM(model, tiny.tokenizer(), PRESETS[fmt], F32).score(PROBLEMS, STEPS)
    assert_close(prm.score(PROBLEMS, STEPS), want)
    (call,) = llm.calls
    assert call.task == "token_classify"
    bound = PRESETS[fmt].bind(tiny.tokenizer())
    assert [p["prompt_token_ids"] for p in call.prompts] == \
        [bound.encode(p, s).input_ids for p, s in zip(PROBLEMS, STEPS)]


def test_agrees_with_hf_backend_step_tag_pooling():
    """Qwen2.5-Math-PRM in vLLM returns only the rows of its step tag (<extra_0>)."""
    tok = tiny.tokenizer()
    model = tiny.token_classifier()
    tag = tok.convert_tokens_to_ids("<extra_0>")
    prm = make(FakeLLM(model, mode="step", tag=tag), "qwen-prm")
    want = HFPRM(model, tok, PRESETS["qwen-prm"], F32).score(PROBLEMS, STEPS)
    assert_close(prm.score(PROBLEMS, STEPS), want)
    # a tag inside the problem text is one more row; the mapping still holds
    problems = ["Mind the <extra_0> tag. " + PROBLEMS[0]]
    want = HFPRM(model, tok, PRESETS["qwen-prm"], F32).score(problems, STEPS[:1])
    assert_close(prm.score(problems, STEPS[:1]), want)


def test_value_head():
    model = tiny.token_classifier(num_labels=1)
    from prmkit.stepformat import StepFormat
    fmt = StepFormat(name="v", prefix="{problem}\n", step="{step} ки", between="\n",
                     reading="value")
    bound = fmt.bind(tiny.tokenizer())
    prm = VLLMPRM.from_engine(FakeLLM(model), bound, 8192, lambda: FakeParams(False))
    want = HFPRM(model, tiny.tokenizer(), fmt, F32).score(PROBLEMS, STEPS)
    assert_close(prm.score(PROBLEMS, STEPS), want)


def test_label_tokens_through_the_converted_one_logit_head():
    tok = tiny.tokenizer()
    model = tiny.causal_lm()
    bound = PRESETS["math-shepherd"].bind(tok)
    llm = FakeLLM(model, mode="pair", pair=(bound.positive_id, bound.negative_id))
    prm = make(llm, "math-shepherd")
    want = HFPRM(model, tok, PRESETS["math-shepherd"], F32).score(PROBLEMS, STEPS)
    assert_close(prm.score(PROBLEMS, STEPS), want)


def test_truncation_gives_none_and_never_shifts():
    model = tiny.token_classifier()
    tok = tiny.tokenizer()
    bound = PRESETS["trl"].bind(tok)
    full = bound.encode(PROBLEMS[1], STEPS[1])
    cut = full.read_positions[1] + 2               # steps 0 and 1 fit, 2 and 3 do not
    llm = FakeLLM(model)
    prm = make(llm, "trl", max_length=cut)
    got = prm.score(PROBLEMS, STEPS)
    want = HFPRM(model, tok, PRESETS["trl"], HFConfig(dtype="float32", max_length=cut)).score(PROBLEMS, STEPS)
    assert_close(got, want)
    assert got[1][2:] == [None, None] and None not in got[1][:2]
    assert prm.stats.truncated_solutions == 1
    assert max(len(p["prompt_token_ids"]) for p in llm.calls[0].prompts) <= cut


def test_unreadable_solutions_are_not_sent():
    model = tiny.token_classifier()
    llm = FakeLLM(model)
    prm = make(llm, "trl", max_length=3)            # no step fits in 3 tokens
    assert prm.score(PROBLEMS, STEPS) == [[None] * len(s) for s in STEPS]
    assert llm.calls == []
    assert make(FakeLLM(model), "trl").score([], []) == []
    assert make(FakeLLM(model), "trl").score(["p"], [[]]) == [[]]


def test_one_pass_equals_per_prefix():
    model = tiny.token_classifier()
    prm = make(FakeLLM(model), "prmkit")
    assert_close(prm.score(PROBLEMS, STEPS), prm.score_per_prefix(PROBLEMS, STEPS), tol=1e-4)


def test_mismatched_inputs_are_an_error():
    prm = make(FakeLLM(tiny.token_classifier()), "trl")
    with pytest.raises(PrmkitError, match="2 problems but 1 step lists"):
        prm.score(["a", "b"], [["x"]])


# -- loading: engine arguments, version checks ---------------------------------------------------


def test_engine_args_for_a_head_model():
    bound = PRESETS["qwen-prm"].bind(tiny.tokenizer())
    kw = engine_args("/m", bound, dtype="bfloat16", tensor_parallel_size=2,
                     gpu_memory_utilization=0.5, max_model_len=4096, enforce_eager=True)
    assert kw == dict(model="/m", runner="pooling", dtype="bfloat16", tensor_parallel_size=2,
                      gpu_memory_utilization=0.5, trust_remote_code=False, max_model_len=4096,
                      enforce_eager=True)


def test_label_token_formats_are_refused_unless_asked():
    tok = tiny.tokenizer()
    bound = PRESETS["math-shepherd"].bind(tok)
    with pytest.raises(PrmkitError, match="label tokens"):
        engine_args("/m", bound)
    kw = engine_args("/m", bound, convert_label_tokens=True, hf_overrides={"x": 1})
    assert kw["convert"] == "classify"
    over = kw["hf_overrides"]
    assert over["x"] == 1 and over["method"] == "from_2_way_softmax" and over["num_labels"] == 1
    # vLLM maps the strings back with convert_tokens_to_ids: [negative, positive]
    assert [tok.convert_tokens_to_ids(t) for t in over["classifier_from_token"]] == \
        [bound.negative_id, bound.positive_id]
    assert label_token_overrides(bound) == {k: over[k] for k in
                                            ("classifier_from_token", "method", "num_labels")}


def test_old_vllm_is_refused():
    class OldParams:
        def __init__(self, softmax=None, activation=None):
            pass

    with pytest.raises(PrmkitError, match="too old"):
        pooling_params_factory(SimpleNamespace(PoolingParams=OldParams, __version__="0.9.2"))
    make_params = pooling_params_factory(SimpleNamespace(PoolingParams=FakeParams))
    assert make_params().use_activation is False
    assert make_params() is not make_params()


def test_missing_vllm_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)     # import vllm -> ImportError
    with pytest.raises(PrmkitError, match=r"pip install 'prmkit\[vllm\]'"):
        VLLMPRM("org/some-prm", "trl")
    with pytest.raises(PrmkitError, match="dtype"):
        VLLMPRM("org/some-prm", "trl", dtype="fp8")


# -- the real engine (GPU machines with vLLM only) -----------------------------------------------


def _need_vllm_gpu():
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("vLLM tests need CUDA")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["trl", "math-shepherd"])
def test_real_vllm_agrees_with_hf(tmp_path, fmt):
    """A tiny model saved to disk, scored by vLLM (float32) and by hf.py: the same scores."""
    _need_vllm_gpu()
    tok = tiny.tokenizer()
    model = tiny.causal_lm() if fmt == "math-shepherd" else tiny.token_classifier()
    model.save_pretrained(tmp_path, safe_serialization=True)
    tok.save_pretrained(tmp_path)
    want = HFPRM(model, tok, PRESETS[fmt], F32).score(PROBLEMS, STEPS)
    prm = VLLMPRM(str(tmp_path), fmt, dtype="float32", gpu_memory_utilization=0.3,
                  max_model_len=2048, enforce_eager=True,
                  convert_label_tokens=(fmt == "math-shepherd"))
    assert_close(prm.score(PROBLEMS, STEPS), want, tol=1e-3)
