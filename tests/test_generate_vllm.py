"""The vLLM backend. Without vLLM (no GPU here) a stand-in ``LLM`` checks that the calls follow
vLLM's offline API and that outputs map to completions; the real engine test is skipped."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from prmkit.generate.base import sample_seed
from prmkit.generate.vllm import VLLMGenerator


@dataclass
class SamplingParams:  # the fields prmkit sets, with vLLM's names
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    stop: list | None = None
    stop_token_ids: list | None = None
    include_stop_str_in_output: bool = False
    seed: int | None = None


class StandInLLM:
    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert isinstance(sampling_params, list) and len(sampling_params) == len(prompts)
        self.calls.append((prompts, sampling_params))
        outs = []
        for p, sp in zip(prompts, sampling_params):
            assert set(p) == {"prompt_token_ids"} and sp.n == 1 and sp.include_stop_str_in_output
            kind = sp.seed % 3
            if kind == 0:    # a stop string, kept in the text
                out = SimpleNamespace(text="x" + sp.stop[0], token_ids=[5, 6], finish_reason="stop",
                                      stop_reason=sp.stop[0])
            elif kind == 1:  # the end-of-sequence token
                out = SimpleNamespace(text="y", token_ids=[5, 0], finish_reason="stop", stop_reason=None)
            else:
                out = SimpleNamespace(text="z" * sp.max_tokens, token_ids=[5] * sp.max_tokens,
                                      finish_reason="length", stop_reason=None)
            outs.append(SimpleNamespace(outputs=[out]))
        return outs


def test_calls_follow_the_offline_api_and_map_outputs():
    tiny = pytest.importorskip("tiny")
    llm = StandInLLM(tiny.tokenizer())
    gen = VLLMGenerator(llm, SamplingParams, stop_tokens=["<|im_end|>", "<not-a-token>"])
    prompts = ["What is 2 + 3?", "Natalia sold"]
    out = gen.generate(prompts, n=3, stop=["\n"], max_tokens=4, temperature=0.6, top_p=0.9, seed=2)
    [(requests, params)] = llm.calls
    assert len(requests) == 6
    assert requests[0]["prompt_token_ids"] == gen.encode(prompts[0])
    assert [p.seed for p in params] == [sample_seed(2, p, k) for p in prompts for k in range(3)]
    assert params[0].stop == ["\n"] and params[0].stop_token_ids == [tiny.tokenizer().convert_tokens_to_ids("<|im_end|>")]
    assert (params[0].temperature, params[0].top_p, params[0].max_tokens) == (0.6, 0.9, 4)
    for row, prompt in zip(out, prompts):
        for k, c in enumerate(row):
            kind = sample_seed(2, prompt, k) % 3
            expected = [("x\n", "stop", 2), ("y", "eos", 2), ("zzzz", "length", 4)][kind]
            assert (c.text, c.finish_reason, c.n_tokens) == expected
            assert c.prompt_tokens == len(gen.encode(prompt))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_real_vllm_engine():  # pragma: no cover - needs a GPU
    from prmkit.generate.vllm import VLLMConfig, load_vllm_generator

    gen = load_vllm_generator("smollm2-135m", VLLMConfig(gpu_memory_utilization=0.3))
    a = gen.generate(["What is 2 + 3?"], n=4, stop=["\n"], max_tokens=32, seed=0)
    b = gen.generate(["What is 2 + 3?"], n=2, stop=["\n"], max_tokens=32, seed=0)
    assert [c.text for c in a[0][:2]] == [c.text for c in b[0]]
    assert all(c.finish_reason != "stop" or c.text.endswith("\n") for c in a[0])
