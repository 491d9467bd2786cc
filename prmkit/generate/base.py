"""The generator protocol: the seam between policy models and everything that samples solutions.

    generate(prompts, n, stop, max_tokens, temperature, top_p, seed) -> list[list[Completion]]

``result[i][k]`` is sample ``k`` of prompt ``i`` (prompts already formatted by
:mod:`prmkit.generate.prompts`). Every backend (``hf``, ``llamacpp``, ``vllm``, ``openai``,
``fake``) follows the same rules:

* **stop strings are kept**: a completion is cut right after the first stop string, which it
  ends with, so prompt + completion is exactly what the model wrote;
* **finish_reason** is ``"stop"`` (:attr:`Completion.stop` says which), ``"eos"`` (an end token,
  not part of ``text``) or ``"length"``;
* ``n_tokens`` counts every sampled token, end token and stop-completing token included (as
  vLLM and OpenAI's ``usage``); ``prompt_tokens`` the prompt;
* **seeds**: sample ``k`` of a prompt has its own stream seeded by :func:`sample_seed` from
  ``(seed, prompt text, k)``, so it does not depend on the other prompts, their order or ``n``,
  and a resumed job reproduces an uninterrupted one (bit for bit where the floating-point
  computation is the same: :mod:`prmkit.generate.run`); ``seed=None`` draws fresh randomness;
* ``temperature=0`` is greedy decoding.

Step-wise continuation (:func:`prmkit.generate.prompts.next_steps`) is ``generate`` with the step
separator as a stop string.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from prmkit.errors import PrmkitError

FINISH_REASONS = ("stop", "eos", "length")


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    text: str
    n_tokens: int
    finish_reason: str
    stop: str | None = None     # the stop string that ended the text (finish_reason "stop")
    prompt_tokens: int = 0

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason {self.finish_reason!r} is not one of "
                             f"{', '.join(FINISH_REASONS)}")
        if (self.finish_reason == "stop") != (self.stop is not None):
            raise ValueError("a completion has a stop string exactly when finish_reason is 'stop'")


class Generator(Protocol):
    """A policy model that samples completions (see the module docstring for the rules)."""

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Completion]]:
        ...


@dataclass
class SamplingConfig:
    """How completions are sampled; the arguments of :meth:`Generator.generate` as a config."""

    n: int = field(default=8, metadata={"help": "samples per prompt"})
    max_tokens: int = field(default=512, metadata={
        "help": "the most tokens one completion may have (finish_reason 'length' when hit)"})
    temperature: float = field(default=0.7, metadata={
        "help": "softmax temperature; 0 = greedy decoding"})
    top_p: float = field(default=1.0, metadata={
        "help": "nucleus sampling: keep the fewest tokens whose probability reaches top_p"})
    seed: int | None = field(default=0, metadata={
        "help": "sample k of a prompt is seeded from (seed, prompt, k); none = fresh randomness"})

    def __post_init__(self) -> None:
        check_sampling(self.n, self.max_tokens, self.temperature, self.top_p, self.seed)


def check_sampling(n: int, max_tokens: int, temperature: float, top_p: float,
                   seed: int | None, top_k: int = 0) -> None:
    """Raise :class:`PrmkitError` for sampling arguments no backend accepts (``top_k``: where a
    backend takes it, 0 for off)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PrmkitError(f"n must be a positive integer, got {n!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise PrmkitError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not isinstance(temperature, (int, float)) or not 0.0 <= temperature < 100:
        raise PrmkitError(f"temperature must be a number >= 0, got {temperature!r}")
    if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise PrmkitError(f"top_p must be in (0, 1], got {top_p!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise PrmkitError(f"seed must be an integer or none, got {seed!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise PrmkitError(f"top_k must be 0 (off) or positive, got {top_k!r}")


def check_stop(stop: Sequence[str]) -> list[str]:
    """The stop strings as a list; a bare string or an empty stop string is refused."""
    if isinstance(stop, str):
        raise PrmkitError("stop must be a list of strings, not one string")
    stop = list(stop)
    if any(not isinstance(s, str) or not s for s in stop):
        raise PrmkitError(f"stop strings must be non-empty strings, got {stop!r}")
    return stop


SEED_BITS = 31  # llama.cpp and some servers take 32-bit seeds; 31 bits are safe everywhere


def sample_seed(seed: int | None, prompt: str, k: int) -> int:
    """The seed of sample ``k`` of ``prompt``: a hash of (seed, k, prompt), 31 bits.

    ``seed=None`` returns a fresh random seed.
    """
    if seed is None:
        return int.from_bytes(os.urandom(4), "little") & ((1 << SEED_BITS) - 1)
    digest = hashlib.sha256(f"{seed}\x00{k}\x00{prompt}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << SEED_BITS) - 1)


def find_stop(text: str, stop: Sequence[str], start: int = 0) -> tuple[int, str] | None:
    """Where the first stop string in ``text`` ends, and which one: ``(end, stop)``.

    "First" is the occurrence that *ends* first, as when text arrives token by token; at equal
    ends the longer string wins. Only occurrences that end after ``start`` are looked for
    (pass the length of the text already scanned to scan incrementally).
    """
    best: tuple[int, int, str] | None = None
    for s in stop:
        at = text.find(s, max(0, start - len(s) + 1))
        if at < 0:
            continue
        key = (at + len(s), -len(s), s)
        if best is None or key < best:
            best = key
    return None if best is None else (best[0], best[2])


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """``text`` cut right after its first stop string (kept), and that string (or None)."""
    found = find_stop(text, stop)
    if found is None:
        return text, None
    return text[:found[0]], found[1]
