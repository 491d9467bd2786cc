"""What a generative PRM's backends share: how a verification is sampled (:class:`Sampling`),
one sampled verification (:class:`Sample`), the backend protocols (:class:`VerifierBackend`,
:class:`SamplesMany`), the counts a run reports (:class:`GenStats`), and reading P(correct)
from a backend's top logprobs (:func:`verdict_row`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

CHAIN_SEED = 7919   # chain k of a solution samples with seed + CHAIN_SEED * k (genprm, copies)


@dataclass(frozen=True)
class Sampling:
    """How a backend samples a verification: temperature (0: greedy), then the ``top_k``
    likeliest tokens (0: all), then the ``top_p`` nucleus of those."""

    temperature: float
    top_p: float = 1.0
    top_k: int = 0


@dataclass
class Sample:
    """One sampled verification: its text, why it ended, its tokens, backend data."""

    text: str
    finish_reason: str      # stop, eos or length
    n_tokens: int
    # (token texts, top logprobs) where the backend reads verdict probabilities from them
    # (a server, vLLM); None where it reads them teacher-forced (transformers)
    data: Any = None


class VerifierBackend(Protocol):
    stats: "GenStats"   # the PRM's own, set by it: the backend counts the prompt tokens it reads

    def sample(self, prompt: str, n: int, stop: Sequence[str], max_tokens: int,
               sampling: Sampling, seed: int | None) -> list[Sample]:
        """``n`` verifications of one prompt (stop strings kept in the text)."""
        ...

    def verdict_probs(self, prompt: str, samples: Sequence[Sample], words: tuple[str, str],
                      ats: Sequence[Sequence[int]]) -> list[list[float | None]]:
        """P(words[0]) / (P(words[0]) + P(words[1])) at each char offset ``ats[s]`` of each
        sample's text (where its verdict word starts); None where it cannot be read."""
        ...

    def decision_probs(self, prompt: str, heads: Sequence[str],
                       words: tuple[str, str]) -> list[float | None]:
        """P(words[0]) / (P(words[0]) + P(words[1])) over the first tokens of the two words as
        the next token after ``prompt + head``, for each head; None where it cannot be read."""
        ...


@runtime_checkable
class SamplesMany(Protocol):
    """A backend that samples the verifications of several prompts in one batch."""

    def sample_many(self, prompts: Sequence[str], n: int, stop: Sequence[str], max_tokens: int,
                    sampling: Sampling, seed: int | None) -> list[list[Sample]]:
        """``n`` verifications of each prompt, as :meth:`VerifierBackend.sample` gives them for
        that prompt alone (the same seeds), up to the rounding of a padded batch."""
        ...


@dataclass
class GenStats:
    """What the generative PRM did: samples, how many parsed, tokens and time."""

    samples: int = 0
    parsed: int = 0
    capped: int = 0            # hit max_new_tokens
    unparsable: int = 0        # ended without a verdict
    tokens_generated: int = 0
    prompt_tokens: int = 0     # prompt tokens the backend read
    prompt_tokens_saved: int = 0   # read once for K samples instead of K times
    solutions: int = 0
    seconds: float = 0.0
    truncated_solutions: int = 0   # what scoring.py reports for discriminative PRMs

    def summary(self) -> str:
        rate = 100.0 * self.parsed / self.samples if self.samples else 0.0
        per = self.solutions or 1
        return (f"generative PRM: parse rate {rate:.1f}% ({self.parsed} of {self.samples} "
                f"verifications; {self.capped} hit --max-new-tokens, {self.unparsable} without "
                f"a verdict); {self.tokens_generated / per:.0f} tokens generated and "
                f"{self.seconds / per:.2f} s per solution; {self.prompt_tokens_saved} prompt "
                f"tokens saved by reading each prompt once for its samples"
                + ("" if self.parsed or not self.samples else
                   "\nno verification parsed, so every score is null: this model does not write "
                   "the template's verdicts. Use a verifier trained for it (`prmkit train "
                   "verifier`, or a public one such as ThinkPRM's)"
                   + (", or raise --max-new-tokens" if self.capped else "")))


def verdict_row(texts: Sequence[str], tops: Sequence[Mapping[Any, float]], at: Sequence[int],
                yes: Any, no: Any) -> list[float | None]:
    """P(yes) / (P(yes) + P(no)) of one sample from a backend's top logprobs, at the token
    where each verdict word starts (``at``: character offsets in the sample's text, whose
    tokens are ``texts``); ``yes`` and ``no`` are the keys the backend's alternatives use. Where
    one word is among the alternatives and the other is not, the other's log-probability is
    taken as the least listed, a bound on it (GenPRM's ``get_reward_score``); None where no
    token starts there or neither word is listed."""
    starts: dict[int, int] = {}
    pos = 0
    for i, t in enumerate(texts):
        starts.setdefault(pos, i)
        pos += len(t)
    row: list[float | None] = []
    for a in at:
        i = starts.get(a)
        top = tops[i] if i is not None and i < len(tops) else {}
        if (yes in top or no in top) and yes != no:
            least = min(top.values())
            p, q = math.exp(top.get(yes, least)), math.exp(top.get(no, least))
            row.append(p / (p + q))
        else:
            row.append(None)
    return row
