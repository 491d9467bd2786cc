"""The OpenAI-compatible server backend of a generative PRM (vLLM, llama.cpp's servers,
SGLang), over ``POST /v1/completions`` with ``logprobs``.

The prompt is rendered here with the model's own tokenizer (the templates append text after the
generation prompt, so the chat endpoint cannot send them). Each verification is its own request
with its own seed (:func:`prmkit.generate.base.sample_seed`) and ``logprobs`` top
alternatives; a verdict's P(correct) is P(yes) / (P(yes) + P(no)) over the first token of each
verdict word among the alternatives at the token where the word starts (the tokens' texts put
end to end locate it). None where one of the two is not among them: the verdict counts as 1 or
0. A server that returns no logprobs is refused: one line naming it. The server may cache the
prompt across the K requests; nothing is counted as saved here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import sample_seed
from prmkit.generate.openai import OpenAIConfig, OpenAIGenerator, read_completion
from prmkit.verify.backend import GenStats, Sample, Sampling, verdict_row

TOP_LOGPROBS = 20   # GenPRM's genprm_inference.py reads 20 alternatives


# llama.cpp's servers sample with a repeat penalty (llama-cpp-python's default 1.1) that the
# logprobs they return leave out: a verifier's sampled verdict then disagrees with the P(correct)
# read from them (measured: a trained verifier's "correct" at P 0.77 sampled as "incorrect").
# Servers that do not know the field ignore it, as they do include_stop_str_in_output.
NO_PENALTY = {"repeat_penalty": 1.0}


class OpenAIVerifier:
    """A model on an OpenAI-compatible server as a :class:`prmkit.verify.backend.VerifierBackend`."""

    def __init__(self, config: OpenAIConfig, tokenizer: Any):
        self.client = OpenAIGenerator(config)
        self.config = config
        self.tokenizer = tokenizer
        self.stats = GenStats()

    def sample(self, prompt: str, n: int, stop: Sequence[str], max_tokens: int,
               sampling: Sampling, seed: int | None) -> list[Sample]:
        # top_k is not OpenAI's own parameter: sent only where set (vLLM and SGLang read it)
        top_k = {"top_k": sampling.top_k} if sampling.top_k else {}
        bodies = [{"model": self.config.model, "prompt": prompt, "n": 1, "max_tokens": max_tokens,
                   "temperature": sampling.temperature, "top_p": sampling.top_p, **top_k,
                   "seed": sample_seed(seed, prompt, k), "stop": list(stop),
                   "logprobs": TOP_LOGPROBS, **NO_PENALTY, **self.config.extra}
                  for k in range(n)]
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            answers = list(pool.map(self.client.post, bodies))
        out = []
        for answer in answers:
            c = read_completion(answer, list(stop))
            self.stats.prompt_tokens += c.prompt_tokens
            out.append(Sample(c.text, c.finish_reason, c.n_tokens, self._logprobs(answer)))
        return out

    def _logprobs(self, answer: dict[str, Any]) -> tuple[list[str], list[dict[str, float]]]:
        lp = answer["choices"][0].get("logprobs")
        tokens = lp.get("tokens") if isinstance(lp, dict) else None
        tops = lp.get("top_logprobs") if isinstance(lp, dict) else None
        if not isinstance(tokens, list) or not isinstance(tops, list):
            raise PrmkitError(f"{self.client.url}: the server returned no logprobs; a generative "
                              f"PRM reads its verdicts from them (use a server whose completions "
                              f"endpoint returns logprobs: vLLM, llama.cpp)")
        return tokens, [t or {} for t in tops]

    def verdict_probs(self, prompt: str, samples: Sequence[Sample], words: tuple[str, str],
                      ats: Sequence[Sequence[int]]) -> list[list[float | None]]:
        yes, no = self._firsts(words)
        return [verdict_row(*sample.data, at, yes, no) for sample, at in zip(samples, ats)]

    def decision_probs(self, prompt: str, heads: Sequence[str],
                       words: tuple[str, str]) -> list[float | None]:
        """One greedy token after ``prompt + head`` per head, read from its top logprobs."""
        yes, no = self._firsts(words)
        bodies = [{"model": self.config.model, "prompt": prompt + head, "n": 1, "max_tokens": 1,
                   "temperature": 0.0, "logprobs": TOP_LOGPROBS, **NO_PENALTY, **self.config.extra}
                  for head in heads]
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            answers = list(pool.map(self.client.post, bodies))
        out = []
        for answer in answers:
            texts, tops = self._logprobs(answer)
            self.stats.prompt_tokens += int((answer.get("usage") or {}).get("prompt_tokens") or 0)
            out.append(verdict_row(texts[:1], tops[:1], [0], yes, no)[0] if texts else None)
        return out

    def _firsts(self, words: tuple[str, str]) -> tuple[str, str]:
        """The two words' first tokens as the server's alternatives name them."""
        a, b = (self.tokenizer.decode(self.tokenizer(w, add_special_tokens=False)["input_ids"][:1])
                for w in words)
        return a, b
