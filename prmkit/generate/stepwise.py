"""Whole solutions and step-wise continuation, on top of any :class:`Generator`.

:func:`solve` samples complete solutions for problems. :func:`next_steps` continues partial
solutions by exactly one step each: best-of-N, beam search, DVTS, MCTS and Monte Carlo step
labeling (Math-Shepherd: Wang et al., 2024; OmegaPRM: Luo et al., 2024) are all built from it.

The contract of :func:`next_steps`: for a problem and the steps written so far, every sample
is either **one next step** (``done=False``; its text ends with the separator, which is kept)
or **the end of the solution** (``done=True``): the model ended its text (end token or the
prompt style's end string, such as the blank line after a few-shot answer), ran out of tokens,
or wrote a step that states the final answer (``The answer is ...``, ``\\boxed{...}``). A last
step comes with ``done=True`` and its text; a solution that ends with no further step comes
back as ``Step(text="", done=True)``.

A blank line is not a step: when the model starts with an empty line (chat models like to put
blank lines between paragraphs), the sample goes on from there, up to ``max_blank`` times,
and the blank lines stay at the start of ``text`` (so prompt + text is exactly what the model
wrote). Under a prompt style whose end string that blank line completes (few-shot), it ends
the solution instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from prmkit.generate.base import Completion, Generator, sample_seed
from prmkit.generate.prompts import Prompter, has_final_answer


@dataclass
class Solution:
    """One sampled complete solution: ``text`` as the model wrote it, without the end string."""

    text: str
    completion: Completion


@dataclass
class Step:
    """One sampled continuation of a partial solution (see the module docstring)."""

    text: str             # as written after the prompt; ends with the separator when not done
    done: bool            # the solution ends with this step (or, with text "", before it)
    finish_reason: str    # of the last completion: "stop", "eos" or "length"
    n_tokens: int         # tokens generated, over every attempt
    prompt_tokens: int
    separator: str = "\n"

    @property
    def step(self) -> str:
        """The step itself: without the separator and surrounding whitespace."""
        text = self.text[:-len(self.separator)] if self.text.endswith(self.separator) else self.text
        return text.strip()


def solve(generator: Generator, prompter: Prompter, problems: Sequence[str], n: int = 1,
          max_tokens: int = 512, temperature: float = 0.7, top_p: float = 1.0,
          seed: int | None = 0) -> list[list[Solution]]:
    """``n`` complete solutions for each problem (``result[i][k]``)."""
    prompts = [prompter.prompt(p) for p in problems]
    outs = generator.generate(prompts, n=n, stop=prompter.end_strings, max_tokens=max_tokens,
                              temperature=temperature, top_p=top_p, seed=seed)
    return [[Solution(c.text[:-len(c.stop)] if c.stop else c.text, c) for c in row] for row in outs]


def next_step(generator: Generator, prompter: Prompter, problem: str, steps: Sequence[str],
              n: int = 1, max_tokens: int = 256, temperature: float = 0.7, top_p: float = 1.0,
              seed: int | None = 0, max_blank: int = 2) -> list[Step]:
    """``n`` samples of the step that follows ``steps`` (see :func:`next_steps`)."""
    return next_steps(generator, prompter, [(problem, steps)], n, max_tokens, temperature,
                      top_p, seed, max_blank)[0]


def next_steps(generator: Generator, prompter: Prompter,
               partials: Sequence[tuple[str, Sequence[str]]], n: int = 1, max_tokens: int = 256,
               temperature: float = 0.7, top_p: float = 1.0, seed: int | None = 0,
               max_blank: int = 2) -> list[list[Step]]:
    """For each ``(problem, steps so far)``, ``n`` samples of the next step (``result[i][k]``).

    All partial solutions go to the generator in one call, so a backend batches them. Sample
    ``k`` of a partial solution is seeded from ``(seed, prompt, k)`` like any completion.
    """
    sep = prompter.separator
    ends = [e for e in prompter.end_strings if e != sep]
    stop = [sep] + ends
    prompts = [prompter.prompt(problem, steps) for problem, steps in partials]
    outs = generator.generate(prompts, n=n, stop=stop, max_tokens=max_tokens,
                              temperature=temperature, top_p=top_p, seed=seed)
    results: list[list[Step | None]] = [[None] * n for _ in prompts]
    # (i, k, prompt so far, text so far, tokens so far, blank lines so far, completion)
    work = [(i, k, prompts[i], "", 0, 0, c) for i, row in enumerate(outs) for k, c in enumerate(row)]
    while work:
        again = []
        for i, k, prompt, before, tokens, blanks, c in work:
            text, tokens = before + c.text, tokens + c.n_tokens

            def step(body: str, done: bool) -> Step:
                return Step(body if body.strip() else "", done, c.finish_reason, tokens,
                            c.prompt_tokens, sep)

            if c.finish_reason != "stop":                      # end token or out of tokens
                results[i][k] = step(text, True)
            elif c.stop != sep:                                # an end string
                results[i][k] = step(text[:-len(c.stop)], True)
            elif text[:-len(sep)].strip():                     # one step
                results[i][k] = step(text, has_final_answer(text))
            elif any((prompt + c.text).endswith(e) for e in ends) or blanks >= max_blank:
                results[i][k] = step("", True)                 # a blank line that ends it
            else:                                              # a blank line: go on from it
                again.append((i, k, prompt + c.text, text, tokens, blanks + 1))
        work = []
        for i, k, prompt, text, tokens, blanks in again:
            [[c]] = generator.generate([prompt], n=1, stop=stop, max_tokens=max(1, max_tokens - tokens),
                                       temperature=temperature, top_p=top_p,
                                       seed=None if seed is None else sample_seed(seed, prompts[i], k))
            work.append((i, k, prompt, text, tokens, blanks, c))
    return results  # type: ignore[return-value]
