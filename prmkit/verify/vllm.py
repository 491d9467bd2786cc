"""The vLLM backend of a generative PRM: vLLM's offline engine in this process, on a GPU.

Each verification is its own request (``SamplingParams(n=1, seed=sample_seed(...),
logprobs=5, stop, include_stop_str_in_output=True)``, the prompt as ``prompt_token_ids``);
with prefix caching (on by default in :class:`prmkit.generate.vllm.VLLMConfig`) vLLM computes
the K requests' shared prompt once. A verdict's P(correct) is read from the sampled token's
``logprobs`` at the token where the verdict word starts (located by the sampled tokens'
``decoded_token`` texts put end to end): P(yes) / (P(yes) + P(no)) over the two words' first
token ids, None where one is not among the top alternatives (the verdict counts).

Not run in CI (no GPU); the tests use a stand-in ``LLM`` that follows vLLM's offline API.
"""

from __future__ import annotations

from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import sample_seed
from prmkit.generate.hf import encode_prompt
from prmkit.verify.backend import GenStats, Sample, Sampling, verdict_row

TOP_LOGPROBS = 20   # GenPRM's genprm_inference.py reads 20 alternatives


class VLLMVerifier:
    """A ``vllm.LLM`` as a :class:`prmkit.verify.backend.VerifierBackend`."""

    def __init__(self, llm: Any, sampling_params_cls: Any):
        self.llm = llm
        self.SamplingParams = sampling_params_cls
        self.tokenizer = llm.get_tokenizer()
        self.stats = GenStats()

    def sample(self, prompt: str, n: int, stop: Sequence[str], max_tokens: int,
               sampling: Sampling, seed: int | None) -> list[Sample]:
        ids = encode_prompt(self.tokenizer, prompt)
        params = [self.SamplingParams(n=1, temperature=sampling.temperature,
                                      top_p=sampling.top_p, top_k=sampling.top_k or -1,
                                      max_tokens=max_tokens, stop=list(stop) or None,
                                      include_stop_str_in_output=True, logprobs=TOP_LOGPROBS,
                                      seed=sample_seed(seed, prompt, k)) for k in range(n)]
        outs = self.llm.generate([{"prompt_token_ids": ids}] * n, params, use_tqdm=False)
        self.stats.prompt_tokens += len(ids)
        self.stats.prompt_tokens_saved += len(ids) * (n - 1)   # prefix caching
        samples = []
        for o in outs:
            out = o.outputs[0]
            reason = getattr(out, "stop_reason", None)
            finish = "length" if out.finish_reason == "length" else \
                "stop" if isinstance(reason, str) else "eos"
            if out.logprobs is None:
                raise PrmkitError("vLLM returned no logprobs for a verification")
            texts = [lp[t].decoded_token or "" for t, lp in zip(out.token_ids, out.logprobs)]
            tops = [{i: v.logprob for i, v in lp.items()} for lp in out.logprobs]
            samples.append(Sample(out.text, finish, len(out.token_ids), (texts, tops)))
        return samples

    def verdict_probs(self, prompt: str, samples: Sequence[Sample], words: tuple[str, str],
                      ats: Sequence[Sequence[int]]) -> list[list[float | None]]:
        yes, no = (self.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in words)
        return [verdict_row(*sample.data, at, yes, no) for sample, at in zip(samples, ats)]

    def decision_probs(self, prompt: str, heads: Sequence[str],
                       words: tuple[str, str]) -> list[float | None]:
        """One greedy token after ``prompt + head`` per head, read from its top logprobs."""
        yes, no = (self.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in words)
        ids = encode_prompt(self.tokenizer, prompt)
        rows = [ids + self.tokenizer(h, add_special_tokens=False)["input_ids"] for h in heads]
        params = self.SamplingParams(n=1, temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS)
        outs = self.llm.generate([{"prompt_token_ids": r} for r in rows], params, use_tqdm=False)
        got = []
        for o in outs:
            lps = o.outputs[0].logprobs
            top = {i: v.logprob for i, v in lps[0].items()} if lps else {}
            got.append(verdict_row([""], [top], [0], yes, no)[0] if top else None)
        return got


def load_vllm_verifier(model: str, dtype: str = "auto") -> VLLMVerifier:
    """A default model name, folder or hub id in vLLM's engine."""
    from prmkit.generate.vllm import INSTALL_HINT, VLLMConfig
    from prmkit.models.pypi import DEFAULT_MODELS, resolve

    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        raise PrmkitError(INSTALL_HINT) from None
    config = VLLMConfig(dtype=dtype)
    path = resolve(model) if model in DEFAULT_MODELS else model
    llm = LLM(model=path, dtype=config.dtype, gpu_memory_utilization=config.gpu_memory_utilization,
              enable_prefix_caching=config.enable_prefix_caching)
    return VLLMVerifier(llm, SamplingParams)
