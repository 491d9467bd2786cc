"""A scripted generator: deterministic completions for exact tests of search and labeling.

:class:`FakeGenerator` follows every rule of :mod:`prmkit.generate.base` (stop strings kept and
cut at the first match, finish reasons, token counts, ``max_tokens``) but writes what a script
says instead of sampling. A "token" is a word with the whitespace before it (or trailing
whitespace), so counts are easy to work out by hand.

The script is a function ``script(prompt, k) -> text``: what the model would write after
``prompt`` as sample ``k`` if nothing stopped it; the end of that text is an end of text
(finish_reason ``"eos"``). :meth:`FakeGenerator.from_solutions` builds the common script: a few
known solutions per problem, where sample ``k`` continues the ``k``-th solution (cycling) that
agrees with the partial solution in the prompt, so step-wise continuation walks through known
solutions exactly. Seeds are ignored: the script is the randomness.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

from prmkit.generate.base import Completion, check_sampling, check_stop, find_stop
from prmkit.generate.prompts import Prompter
from prmkit.steps import join_steps

_TOKEN = re.compile(r"\s*\S+|\s+")


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as the fake counts them: words with their leading whitespace."""
    return len(_TOKEN.findall(text))


class FakeGenerator:
    """A :class:`prmkit.generate.base.Generator` that writes what ``script`` says."""

    def __init__(self, script: Callable[[str, int], str]):
        self.script = script
        self.calls: list[dict] = []      # every generate() call, for tests to inspect
        self.tokens_generated = 0

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature, top_p, seed)
        stop = check_stop(stop)
        self.calls.append({"prompts": list(prompts), "n": n, "stop": stop,
                           "max_tokens": max_tokens, "seed": seed})
        out = [[self._complete(p, k, stop, max_tokens) for k in range(n)] for p in prompts]
        self.tokens_generated += sum(c.n_tokens for row in out for c in row)
        return out

    def _complete(self, prompt: str, k: int, stop: list[str], max_tokens: int) -> Completion:
        full = self.script(prompt, k)
        pieces = _TOKEN.findall(full)
        text = ""
        for i, piece in enumerate(pieces, start=1):
            before, text = len(text), text + piece
            found = find_stop(text, stop, before)
            if found is not None:
                return Completion(text[:found[0]], i, "stop", found[1], prompt_tokens=count_tokens(prompt))
            if i >= max_tokens:
                return Completion(text, i, "length", prompt_tokens=count_tokens(prompt))
        # The end of the script is an end token: counted, as real backends count it.
        return Completion(text, len(pieces) + 1, "eos", prompt_tokens=count_tokens(prompt))

    @classmethod
    def from_solutions(cls, prompter: Prompter,
                       solutions: Mapping[str, Sequence[Sequence[str]]]) -> "FakeGenerator":
        """A script over known solutions: ``solutions[problem]`` lists solutions as steps.

        For a prompt ``prompter.prompt(problem, steps)``, sample ``k`` continues the ``k``-th
        (cycling) of the problem's solutions whose text starts with the steps so far; if none
        does, it ends at once (empty text). A prompt of an unknown problem is a ``KeyError``.
        """
        heads = {prompter.prompt(problem): problem for problem in solutions}
        texts = {problem: [join_steps(list(s), prompter.rule) for s in sols]
                 for problem, sols in solutions.items()}

        def script(prompt: str, k: int) -> str:
            head = max((h for h in heads if prompt.startswith(h)), key=len, default=None)
            if head is None:
                raise KeyError(f"the fake generator has no script for this prompt: {prompt[:80]!r}")
            written = prompt[len(head):]
            matching = [t for t in texts[heads[head]] if t.startswith(written) and len(t) > len(written)]
            return matching[k % len(matching)][len(written):] if matching else ""

        return cls(script)
