"""Generative PRMs: verifiers that write their reasoning, then a verdict per step.

A generative PRM reads the problem and the numbered steps in its checkpoint's own prompt
(:mod:`prmkit.verify.templates`: ThinkPRM, GenPRM, a plain one for any instruct model), samples
K verifications, parses the verdict of every step (:mod:`prmkit.verify.verdicts`) and scores each
step as P(correct): from the verdict token's log-probabilities where the backend gives them,
else the share of the samples that call it correct (:mod:`prmkit.verify.prm`). It is a
:class:`prmkit.models.base.PRM`, so select, search, eval and the RL rewards use it unchanged.
Backends: transformers (:mod:`prmkit.verify.hf`), an OpenAI-compatible server with logprobs
(:mod:`prmkit.verify.openai`) and vLLM's offline engine (:mod:`prmkit.verify.vllm`);
:mod:`prmkit.verify.load` opens one for ``--backend generative``.
"""
