"""Loading a policy: a generator and its prompter from a policy name and a backend.

:func:`load_policy` is what ``prmkit generate``, ``prmkit search``, ``prmkit label``,
benchmarks and later jobs call.
"""

from __future__ import annotations

from prmkit.errors import PrmkitError
from prmkit.generate.base import Generator
from prmkit.generate.prompts import END_TOKENS, MODEL_STYLES, Prompter, make_prompter

BACKENDS = ("hf", "llamacpp", "vllm", "openai")


def load_policy(policy: str, backend: str = "hf", *, dtype: str = "auto", device: str = "cpu",
                batch_size: int = 8, threads: int | None = None, base_url: str | None = None,
                model_name: str | None = None, api_key: str | None = None,
                concurrency: int = 8, tokenizer: str | None = None,
                prompt_style: str | None = None, step_rule: str | None = None,
                n_ctx: int = 4096, stop_strings: str = "auto") -> tuple[Generator, Prompter]:
    """A generator for ``policy`` on ``backend``, and the prompter for that policy.

    ``policy``: a default model name (``smollm2-135m``, ``gemma3-270m``), a model folder or hub
    id (hf, vllm), a ``.gguf`` file (llamacpp), or the model name on the server (openai).
    ``stop_strings`` (openai) says how the server returns a matched stop string
    (:data:`prmkit.generate.openai.STOP_MODES`).
    """
    if backend not in BACKENDS:
        raise PrmkitError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if policy == "lab" or policy.startswith("lab:"):   # the lab world's synthetic policy
        from prmkit.world import load_lab_policy

        return load_lab_policy(policy)
    rule = None if step_rule in (None, "auto") else step_rule
    if backend == "hf":
        from prmkit.generate.hf import HFGenConfig, load_hf_generator
        from prmkit.generate.prompts import tokenizer_specials

        if threads:
            import torch

            torch.set_num_threads(threads)
        gen = load_hf_generator(policy, HFGenConfig(dtype=dtype, device=device,
                                                    batch_size=batch_size), END_TOKENS)
        return gen, make_prompter(policy, gen.tokenizer.chat_template,
                                  tokenizer_specials(gen.tokenizer), prompt_style, rule)
    if backend == "llamacpp":
        from prmkit.generate.llamacpp import LlamaCppConfig, load_llamacpp_generator

        lgen = load_llamacpp_generator(policy, LlamaCppConfig(n_ctx=n_ctx, n_threads=threads),
                                       END_TOKENS)
        return lgen, make_prompter(policy, lgen.chat_template, lgen.special, prompt_style, rule)
    if backend == "vllm":
        from prmkit.generate.prompts import tokenizer_specials
        from prmkit.generate.vllm import VLLMConfig, load_vllm_generator

        vgen = load_vllm_generator(policy, VLLMConfig(dtype=dtype), END_TOKENS)
        return vgen, make_prompter(policy, vgen.tokenizer.chat_template,
                                   tokenizer_specials(vgen.tokenizer), prompt_style, rule)
    from prmkit.generate.openai import OpenAIConfig, OpenAIGenerator

    ogen = OpenAIGenerator(OpenAIConfig(base_url=base_url or OpenAIConfig.base_url,
                                        model=model_name or policy, api_key=api_key,
                                        concurrency=concurrency, stop_strings=stop_strings))
    template, special = None, {}
    style = prompt_style or MODEL_STYLES.get(policy)
    if style != "few-shot" and (tokenizer or style == "chat"):
        template, special = _chat_template(tokenizer or policy)
    if style is None and template is None:
        raise PrmkitError(f"policy {policy!r}: say how to prompt it, --prompt-style few-shot, or "
                          f"--tokenizer FOLDER for its chat template")
    return ogen, make_prompter(policy, template, special, style, rule)


def _chat_template(name: str) -> tuple[str | None, dict[str, str]]:
    """The chat template and special tokens of a tokenizer folder or default model."""
    import os

    from prmkit.generate.prompts import tokenizer_specials
    from prmkit.models.pypi import DEFAULT_MODELS, resolve

    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise PrmkitError("reading a chat template needs transformers: pip install 'prmkit[hf]'") from None
    path = resolve(name) if name in DEFAULT_MODELS else name
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        where = "folder" if os.path.isdir(path) else "name"
        raise PrmkitError(f"tokenizer {name!r} ({where}): cannot load ({str(e).splitlines()[0]})") from None
    return tok.chat_template, tokenizer_specials(tok)


def default_chunk(backend: str, n: int, batch_size: int, concurrency: int) -> int:
    """Problems per generator call: enough to fill a batch, and no more."""
    rows = {"hf": batch_size, "llamacpp": 1, "vllm": 1024, "openai": concurrency}[backend]
    return max(1, rows // n)
