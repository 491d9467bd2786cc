"""Sample completions from a GGUF model with llama.cpp, through llama-cpp-python.

Targets llama-cpp-python's ``Llama`` object (0.3.x): ``Llama(model_path, n_ctx, n_threads,
seed, verbose)``, ``tokenize(bytes, add_bos, special)``, ``detokenize(tokens, prev_tokens)``,
``set_seed`` and the token stream ``Llama.generate(tokens, top_k, top_p, min_p, temp,
repeat_penalty, reset)``. Not ``create_completion``: it strips the stop string and reports an
end token and a stop string alike as "stop", while prmkit keeps the stop string and tells them
apart (see :mod:`prmkit.generate.base`). Stop strings are matched on the decoded text, token by
token.

An optional extra: ``pip install prmkit[llamacpp]``, or ``make llamacpp``. On these machines
build it from source with portable CPU flags; the native build (AMX) segfaults:

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \\
                -DGGML_AVX512=OFF" pip install --no-cache-dir "llama-cpp-python>=0.3"

Sampling: one sequence at a time (llama-cpp-python decodes a single sequence); the sampler is
reset for every sample and seeded by :func:`prmkit.generate.base.sample_seed`. Top-k, min-p,
typical-p and the repeat penalty are switched off (llama.cpp's defaults are 40, 0.05, 1.0, 1.0),
so the distribution is softmax(logits / temperature) cut to the top-p nucleus. One difference
from the other backends: llama.cpp applies top-p *before* the temperature. The KV cache of the
longest shared prompt prefix is reused between calls (the n samples of a prompt, or the steps
of one solution), which makes prefill nearly free after the first sample.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Completion, check_sampling, check_stop, find_stop, sample_seed

INSTALL_HINT = ('the llamacpp backend needs llama-cpp-python: run `make llamacpp` (portable CPU '
                'build; the native build crashes on these machines)')


@dataclass
class LlamaCppConfig:
    """How a GGUF policy is loaded."""

    n_ctx: int = field(default=4096, metadata={"help": "context length (prompt + completion)"})
    n_threads: int | None = field(default=None, metadata={
        "help": "CPU threads; default: llama-cpp-python's (half the cores)"})
    n_gpu_layers: int = field(default=0, metadata={"help": "layers offloaded to a GPU build"})

    def __post_init__(self) -> None:
        if self.n_ctx < 16:
            raise PrmkitError(f"n_ctx must be at least 16, got {self.n_ctx}")


class LlamaCppGenerator:
    """A ``llama_cpp.Llama`` as a :class:`prmkit.generate.base.Generator`."""

    def __init__(self, llm: Any, stop_tokens: Sequence[str] = ()):
        import llama_cpp

        self.llm = llm
        self._vocab = llm._model.vocab
        self._is_eog = llama_cpp.llama_vocab_is_eog
        self.end_ids: set[int] = {int(llm.token_eos())}
        for token in stop_tokens:
            ids = llm.tokenize(token.encode("utf-8"), add_bos=False, special=True)
            if len(ids) == 1:
                self.end_ids.add(ids[0])
        self.bos = llm.token_bos()
        self.tokens_generated = 0

    @property
    def chat_template(self) -> str | None:
        return self.llm.metadata.get("tokenizer.chat_template")

    @property
    def special(self) -> dict[str, str]:
        """BOS and EOS as text, for rendering the chat template."""
        def text(tok: int) -> str:
            return self.llm.detokenize([tok], special=True).decode("utf-8", "replace") if tok >= 0 else ""
        return {"bos_token": text(self.bos), "eos_token": text(self.llm.token_eos())}

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt: special tokens parsed, BOS added once if the model wants it."""
        ids = self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        if len(ids) >= 2 and ids[0] == ids[1] == self.bos:
            ids = ids[1:]  # the text already started with the BOS token
        return ids

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature, top_p, seed)
        stop = check_stop(stop)
        out = []
        for i, prompt in enumerate(prompts):
            ids = self.encode(prompt)
            room = self.llm.n_ctx() - len(ids)
            if room < 1:
                raise PrmkitError(f"prompt {i} has {len(ids)} tokens; the context holds "
                                  f"{self.llm.n_ctx()} (raise n_ctx)")
            out.append([self._one(ids, stop, min(max_tokens, room), temperature, top_p,
                                  sample_seed(seed, prompt, k)) for k in range(n)])
        return out

    def _one(self, ids: list[int], stop: list[str], max_tokens: int, temperature: float,
             top_p: float, seed: int) -> Completion:
        self.llm.set_seed(seed)
        tokens: list[int] = []
        text = ""
        longest = max((len(s) for s in stop), default=0)
        ctx = ids[-1:]  # decoded before the completion, so a leading space is kept
        for tok in self.llm.generate(ids, top_k=0, top_p=top_p, min_p=0.0, typical_p=1.0,
                                     temp=temperature, repeat_penalty=1.0, reset=True):
            tokens.append(int(tok))
            self.tokens_generated += 1
            if tok in self.end_ids or self._is_eog(self._vocab, tok):
                return Completion(self._text(ctx, tokens[:-1]), len(tokens), "eos",
                                  prompt_tokens=len(ids))
            if stop:
                before = len(text)
                text = self._text(ctx, tokens, final=False)
                found = find_stop(text, stop, max(0, before - longest - 4))
                if found is not None:
                    return Completion(text[:found[0]], len(tokens), "stop", found[1],
                                      prompt_tokens=len(ids))
            if len(tokens) >= max_tokens:
                break
        return Completion(self._text(ctx, tokens), len(tokens), "length", prompt_tokens=len(ids))

    def _text(self, ctx: list[int], tokens: list[int], final: bool = True) -> str:
        raw = self.llm.detokenize(tokens, prev_tokens=ctx)
        # While generating, a character may be split over tokens: leave its bytes out for now.
        return raw.decode("utf-8", "replace" if final else "ignore")


def load_llamacpp_generator(policy: str, config: LlamaCppConfig | None = None,
                            stop_tokens: Sequence[str] = ()) -> LlamaCppGenerator:
    """A default model name (its GGUF from PyPI) or a path to a ``.gguf`` file."""
    from prmkit.models.pypi import DEFAULT_MODELS, gguf_path

    config = config or LlamaCppConfig()
    if policy in DEFAULT_MODELS:
        path = gguf_path(policy)
    elif os.path.isfile(policy):
        path = policy
    else:
        raise PrmkitError(f"policy {policy!r}: the llamacpp backend takes a .gguf file or a "
                          f"default model name ({', '.join(DEFAULT_MODELS)})")
    try:
        from llama_cpp import Llama
    except ImportError:
        raise PrmkitError(INSTALL_HINT) from None
    try:
        llm = Llama(model_path=path, n_ctx=config.n_ctx, n_threads=config.n_threads,
                    n_gpu_layers=config.n_gpu_layers, verbose=False)
    except (ValueError, RuntimeError) as e:
        raise PrmkitError(f"policy {policy!r}: llama.cpp cannot load {path} ({e})") from None
    return LlamaCppGenerator(llm, stop_tokens)
