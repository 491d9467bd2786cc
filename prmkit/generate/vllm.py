"""Sample completions with vLLM on GPUs (an optional extra: ``pip install prmkit[vllm]``).

Targets vLLM's documented offline API: ``LLM(model, dtype, seed, gpu_memory_utilization,
tensor_parallel_size, enable_prefix_caching)``, ``LLM.get_tokenizer()``, and
``LLM.generate(prompts, sampling_params)`` with one ``SamplingParams(n=1, temperature, top_p,
max_tokens, stop, seed, include_stop_str_in_output=True, stop_token_ids)`` per request, where a
prompt is ``{"prompt_token_ids": [...]}``. Each ``RequestOutput.outputs[0]`` is read for
``text``, ``token_ids``, ``finish_reason`` ("stop" / "length") and ``stop_reason`` (the matched
stop string, a stop token id, or None for the end-of-sequence token).

Every sample is its own request (``n=1``) with the seed :func:`prmkit.generate.base.sample_seed`
gives it, so a sample is the same whatever else is in the call; vLLM batches the requests and,
with prefix caching on, computes a shared prompt once. (vLLM's per-request seed fixes the random
draws; bit-for-bit equal logits across different batches need vLLM's batch-invariant mode.)

Prompts are tokenized here with vLLM's tokenizer by the same rule as the HF backend (special
tokens parsed, BOS added once), so a chat template rendered by prmkit is not given a second BOS.

Not run in this repository's CI (no GPU, no vLLM); the tests use a stand-in ``LLM`` that checks
the calls against this API and are skipped entirely for the real one when vLLM is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Completion, check_sampling, check_stop, sample_seed

INSTALL_HINT = "the vllm backend needs vLLM and a GPU: pip install 'prmkit[vllm]'"


@dataclass
class VLLMConfig:
    """How vLLM loads a policy."""

    dtype: str = field(default="auto", metadata={"help": "auto, bfloat16, float16, float32"})
    gpu_memory_utilization: float = field(default=0.85, metadata={
        "help": "share of GPU memory vLLM may take"})
    tensor_parallel_size: int = field(default=1, metadata={"help": "GPUs per model"})
    max_model_len: int | None = field(default=None, metadata={"help": "context length cap"})
    enable_prefix_caching: bool = field(default=True, metadata={
        "help": "compute a prompt shared by many samples once"})

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise PrmkitError(f"gpu_memory_utilization must be in (0, 1], got "
                              f"{self.gpu_memory_utilization}")
        if self.tensor_parallel_size < 1:
            raise PrmkitError(f"tensor_parallel_size must be positive, got {self.tensor_parallel_size}")


class VLLMGenerator:
    """A ``vllm.LLM`` as a :class:`prmkit.generate.base.Generator`."""

    def __init__(self, llm: Any, sampling_params_cls: Any, stop_tokens: Sequence[str] = ()):
        from prmkit.generate.hf import encode_prompt

        self.llm = llm
        self.SamplingParams = sampling_params_cls
        self.tokenizer = llm.get_tokenizer()
        self._encode = encode_prompt
        vocab = self.tokenizer.get_vocab()
        self.stop_token_ids = sorted({vocab[t] for t in stop_tokens if t in vocab})
        self.tokens_generated = 0

    def encode(self, text: str) -> list[int]:
        return self._encode(self.tokenizer, text)

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature, top_p, seed)
        stop = check_stop(stop)
        encoded = [self.encode(p) for p in prompts]
        requests, params = [], []
        for prompt, ids in zip(prompts, encoded):
            for k in range(n):
                requests.append({"prompt_token_ids": ids})
                params.append(self.SamplingParams(
                    n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                    stop=stop or None, stop_token_ids=self.stop_token_ids or None,
                    include_stop_str_in_output=True, seed=sample_seed(seed, prompt, k)))
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        flat = [self._completion(o.outputs[0], stop, len(ids))
                for o, ids in zip(outputs, (ids for ids in encoded for _ in range(n)))]
        self.tokens_generated += sum(c.n_tokens for c in flat)
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    @staticmethod
    def _completion(out: Any, stop: list[str], prompt_tokens: int) -> Completion:
        n_tokens = len(out.token_ids)
        reason = getattr(out, "stop_reason", None)
        if out.finish_reason == "length":
            return Completion(out.text, n_tokens, "length", prompt_tokens=prompt_tokens)
        if isinstance(reason, str) and reason in stop:
            text = out.text if out.text.endswith(reason) else out.text + reason
            return Completion(text, n_tokens, "stop", reason, prompt_tokens=prompt_tokens)
        return Completion(out.text, n_tokens, "eos", prompt_tokens=prompt_tokens)


def load_vllm_generator(policy: str, config: VLLMConfig | None = None,
                        stop_tokens: Sequence[str] = ()) -> VLLMGenerator:
    """A default model name (its safetensors cache folder), a local folder or a hub id."""
    from prmkit.models.pypi import DEFAULT_MODELS, resolve

    config = config or VLLMConfig()
    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        raise PrmkitError(INSTALL_HINT) from None
    path = resolve(policy) if policy in DEFAULT_MODELS else policy
    kwargs: dict[str, Any] = dict(model=path, dtype=config.dtype,
                                  gpu_memory_utilization=config.gpu_memory_utilization,
                                  tensor_parallel_size=config.tensor_parallel_size,
                                  enable_prefix_caching=config.enable_prefix_caching)
    if config.max_model_len:
        kwargs["max_model_len"] = config.max_model_len
    return VLLMGenerator(LLM(**kwargs), SamplingParams, stop_tokens)
