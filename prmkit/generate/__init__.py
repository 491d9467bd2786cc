"""Policies that write solutions: one protocol, four backends, step-wise continuation.

    base.py      the Generator protocol, Completion, seeds per sample, stop-string rules
    hf.py        transformers (own sampling loop with a KV cache; CPU or GPU)
    llamacpp.py  GGUF through llama-cpp-python (optional extra; portable build)
    vllm.py      vLLM's offline API (optional extra; GPUs)
    openai.py    any OpenAI-compatible completions server over HTTP (standard library)
    fake.py      a scripted generator for exact tests
    prompts.py   prompt styles per model (chat template / few-shot) and the step separator
    stepwise.py  solve (whole solutions) and next_step(s) (exactly one step, or the end)
    run.py       the `prmkit generate` job (records, resume)
    cli.py       the subcommand and the policy options
    load.py      load_policy(name, backend)

Heavy libraries (torch, transformers, llama_cpp, vllm) are imported only by the backend that
needs them.
"""

from prmkit.generate.base import Completion, Generator, sample_seed
from prmkit.generate.prompts import Prompter, make_prompter
from prmkit.generate.stepwise import Solution, Step, next_step, next_steps, solve

__all__ = ["Completion", "Generator", "Prompter", "Solution", "Step", "make_prompter",
           "next_step", "next_steps", "sample_seed", "solve"]
