"""``GenerativePRM``: K sampled verifications per solution, read as step scores.

``score(problems, steps)`` is the :class:`prmkit.models.base.PRM` protocol. For each solution
the template's prompt (:mod:`prmkit.verify.templates`) is sampled ``samples`` times; each
verification's verdicts (:mod:`prmkit.verify.verdicts`) give step values: P(correct) =
P(yes) / (P(yes) + P(no)) at the verdict token where the backend gives log-probabilities
(ThinkPRM's and GenPRM's score), else 1 or 0; a step's score is the mean over the verifications
that score it. A verification that hits ``max_new_tokens``, or holds no verdict, scores nothing
and is counted (:class:`GenStats`). Sample k of a prompt is seeded from (seed, prompt, k), so a
resumed run gives what an unbroken one gives. K samples' mean is GenPRM's Maj@K
(``genprm_inference.py``: ``inference`` averages the K rewards). A whole verification also
gives ThinkPRM's solution-level P(yes) after ``Is the solution correct?``
(:meth:`GenerativePRM.outcome_of`).
A backend that samples several prompts at once (:class:`SamplesMany`) gets the whole
verifications of up to :data:`BATCH` solutions with as many steps in one call.

A backend (:class:`VerifierBackend`) samples and reads verdict probabilities; the problem and
solution prompt is encoded once for its K samples where the backend allows it
(``prompt_tokens_saved``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from prmkit.models.base import collect
from prmkit.progress import note
from prmkit.verify import templates as T
from prmkit.verify.verdicts import Verdict, combine, parse_genprm, parse_whole, step_values


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
    data: Any = None        # what the backend needs to read verdict probabilities (logprobs)


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


DECISION = (" Yes", " No")   # ThinkPRM's decision words, the next token after its question
BATCH = 8   # solutions whose whole verifications a batching backend samples together
SAMPLING_DEFAULTS = {"samples": 1, "max_new_tokens": 1024, "temperature": 0.7, "top_p": 1.0,
                     "top_k": 0}


@dataclass
class GenConfig:
    """How a generative PRM samples its verifications."""

    samples: int | None = field(default=None, metadata={
        "help": "verifications sampled per solution (K); default: the verifier folder's saved "
                "setting, else 1"})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": "the most tokens one verification may have; one that hits it scores nothing "
                "and is counted; default: the verifier folder's saved setting, else 1024"})
    temperature: float | None = field(default=None, metadata={
        "help": "sampling temperature of the verifications; 0 = greedy; default: the "
                "verifier folder's saved setting, else the template's recipe's (thinkprm and "
                "plain 0.7, genprm 0.6)"})
    top_p: float | None = field(default=None, metadata={
        "help": "nucleus sampling of the verifications: keep the fewest tokens whose "
                "probability reaches top_p (after --top-k); default: the verifier folder's "
                "saved setting, else the template's recipe's (genprm 0.95, else 1: off)"})
    top_k: int | None = field(default=None, metadata={
        "help": "sample among the k likeliest tokens only (0: all); default: the verifier "
                "folder's saved setting, else the template's recipe's (genprm 20, else 0); "
                "--server: sent as top_k, which vLLM's and SGLang's servers read"})
    verifier_seed: int = field(default=0, metadata={
        "help": "verification k of a prompt is seeded from (this seed, prompt, k)"})
    engine: str = field(default="transformers", metadata={
        "choices": ["transformers", "vllm"],
        "help": "where the verifications are sampled: transformers in this process (CPU or "
                "GPU), or vLLM's offline engine on a GPU (pip install 'prmkit[vllm]'; tested "
                "only against a stand-in engine: docs/scaling.md)"})
    server: str | None = field(default=None, metadata={
        "metavar": "URL", "identity": False,   # where it runs: the same model elsewhere resumes
        "help": "sample on an OpenAI-compatible server (its /v1 root, e.g. "
                "http://127.0.0.1:8000/v1) that returns logprobs, instead of with transformers "
                "here; --model then names the tokenizer the prompts are rendered with"})
    server_model: str | None = field(default=None, metadata={
        "help": "--server: the model name the server knows (default: --model)"})

    def __post_init__(self) -> None:
        from prmkit.errors import PrmkitError

        if (self.samples is not None and self.samples < 1) or (
                self.max_new_tokens is not None and self.max_new_tokens < 1) or (
                self.temperature is not None and self.temperature < 0):
            raise PrmkitError(f"--samples and --max-new-tokens must be positive and "
                              f"--temperature not negative, got {self.samples}, "
                              f"{self.max_new_tokens}, {self.temperature}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise PrmkitError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and self.top_k < 0:
            raise PrmkitError(f"--top-k must be 0 (off) or positive, got {self.top_k}")

    @property
    def sampling(self) -> Sampling:
        """The resolved sampling settings (:meth:`resolved` first)."""
        assert self.temperature is not None and self.top_p is not None and self.top_k is not None
        return Sampling(self.temperature, self.top_p, self.top_k)

    def resolved(self, saved: Mapping[str, Any] | None = None,
                 template: T.Template | None = None) -> "GenConfig":
        """This config with each unset sampling setting taken from ``saved`` (a trained
        verifier folder's), else from the template's recipe (its temperature, top-p and top-k),
        else from :data:`SAMPLING_DEFAULTS`."""
        import dataclasses

        defaults = dict(SAMPLING_DEFAULTS)
        if template is not None:
            defaults.update(temperature=template.temperature, top_p=template.top_p,
                            top_k=template.top_k)
        return dataclasses.replace(self, **{
            k: (saved or {}).get(k, v) if getattr(self, k) is None else getattr(self, k)
            for k, v in defaults.items()})


class GenerativePRM:
    """A generative PRM over a backend, a template and its chat template."""

    def __init__(self, backend: VerifierBackend, template: T.Template, chat: T.Chat | None,
                 eos: str = "", config: GenConfig | None = None, calculator: bool = False):
        self.backend = backend
        self.calculator = calculator   # the steps are read with the calculator's notes
        self.template = template
        self.chat = chat
        self.eos = eos
        self.config = (config or GenConfig()).resolved(None, template)   # unset: the defaults
        self.stats = GenStats()
        backend.stats = self.stats   # the backend counts the prompt tokens it reads
        self.words = tuple(template.verdicts.split(","))
        self.format = template   # what scoring.describe() names
        self.written: dict[tuple[str, tuple[str, ...]], list[str]] = {}   # see verifications_of
        self.outcomes: dict[tuple[str, tuple[str, ...]], float | None] = {}   # see outcome_of
        self.model = getattr(backend, "model", None)   # and its dtype, where it runs here

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        return collect(len(problems), self.score_iter(problems, steps))

    def score_iter(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> Iterator[
            tuple[int, list[float | None]]]:
        """``(index, step_scores)`` of each solution as it finishes: in order, or with a
        batching backend a batch at a time, the solutions with fewest steps first. The texts of
        this call's verifications are kept until the next call (:meth:`verifications_of`)."""
        self.written.clear()   # a long-lived PRM (serve, search) keeps one call's texts at most
        self.outcomes.clear()
        if not self.template.per_step and isinstance(self.backend, SamplesMany):
            yield from self._score_batched(problems, steps)
            return
        for i, (problem, solution) in enumerate(zip(problems, steps)):
            start = time.time()
            if not solution:
                scores: list[float | None] = []
            elif self.template.per_step:
                scores = self._score_per_step(problem, list(solution))
            else:
                scores = self._score_whole(problem, list(solution))
            self.stats.solutions += 1
            self.stats.seconds += time.time() - start
            yield i, scores

    def _score_batched(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
                       ) -> Iterator[tuple[int, list[float | None]]]:
        """Whole verifications sampled :data:`BATCH` solutions at a time, solutions with as
        many steps together (they stop at the same ``Step N+1:``); yielded as each batch ends."""
        by_length: dict[int, list[int]] = {}
        for i, solution in enumerate(steps):
            by_length.setdefault(len(solution), []).append(i)
        for n_steps, todo in sorted(by_length.items()):
            for at in range(0, len(todo), BATCH):
                part = todo[at:at + BATCH]
                start = time.time()
                if n_steps == 0:
                    done: list[list[float | None]] = [[] for _ in part]
                else:
                    done = self._score_whole_many([problems[i] for i in part],
                                                  [list(steps[i]) for i in part])
                self.stats.solutions += len(part)
                self.stats.seconds += time.time() - start
                yield from zip(part, done)

    @staticmethod
    def _key(problem: str, steps: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        return problem, tuple(steps)

    def verifications_of(self, problem: str, steps: Sequence[str]) -> list[str]:
        """The texts this PRM wrote when it scored this solution in its last call (one per
        verification; a GenPRM chain's step turns joined); empty when it has none. Two records
        with the same problem and steps get the same texts (their prompts, and so their seeded
        samples, are the same)."""
        return list(self.written.get(self._key(problem, steps), []))

    def outcome_of(self, problem: str, steps: Sequence[str]) -> float | None:
        """The solution-level score of a whole verification (``thinkprm``, ``plain``) of this
        solution in this PRM's last call: ThinkPRM's P(yes) after ``Is the solution correct?``,
        the mean over its verifications (``prm/thinkprm_api.py``: the verification, then the
        question, then the yes/no decision's probability); None for ``genprm`` or where none
        can be read."""
        return self.outcomes.get(self._key(problem, steps))

    def _sample(self, prompt: str, n: int, stop: Sequence[str], max_tokens: int,
                seed: int) -> list[Sample]:
        samples = self.backend.sample(prompt, n, stop, max_tokens, self.config.sampling, seed)
        self._sampled([samples])
        return samples

    def _sampled(self, rows: Sequence[Sequence[Sample]]) -> None:
        """Count the tokens of verifications just sampled (rows of one prompt each), and say so
        in the progress line before they are read (progress inside a solution)."""
        self.stats.tokens_generated += sum(s.n_tokens for row in rows for s in row)
        note(verifications=self.stats.samples + sum(len(row) for row in rows),
             parsed=self.stats.parsed, tokens=self.stats.tokens_generated)

    def _count(self, sample: Sample, parsed: bool) -> bool:
        """Count one verification; whether it scores."""
        self.stats.samples += 1
        if sample.finish_reason == "length":
            self.stats.capped += 1
            return False
        if not parsed:
            self.stats.unparsable += 1
            return False
        self.stats.parsed += 1
        return True

    def _score_whole(self, problem: str, steps: list[str]) -> list[float | None]:
        """ThinkPRM and plain: K verifications of the whole solution."""
        prompt, samples = self._whole_samples(problem, steps)
        return self._read_whole(problem, steps, prompt, samples)

    def _score_whole_many(self, problems: Sequence[str], steps: Sequence[list[str]],
                          ) -> list[list[float | None]]:
        """:meth:`_score_whole` of solutions with as many steps, sampled in one batch."""
        assert isinstance(self.backend, SamplesMany)
        prompts = [self._whole_prompt(p, s) for p, s in zip(problems, steps)]
        batch = self.backend.sample_many(prompts, self.config.samples,
                                         T.whole_stops(len(steps[0])),
                                         self.config.max_new_tokens, self.config.sampling,
                                         self.config.verifier_seed)
        self._sampled(batch)
        return [self._read_whole(p, s, prompt, samples)
                for p, s, prompt, samples in zip(problems, steps, prompts, batch)]

    def _read_whole(self, problem: str, steps: list[str], prompt: str,
                    samples: Sequence[Sample]) -> list[float | None]:
        """The step scores of one solution's whole verifications ``samples`` of ``prompt``."""
        self.written[self._key(problem, steps)] = [s.text for s in samples]
        self.outcomes[self._key(problem, steps)] = self._outcome(prompt, samples, len(steps))
        kept: list[tuple[Sample, list[Verdict | None]]] = []
        for s in samples:
            verdicts = parse_whole(s.text, len(steps))
            if self._count(s, verdicts is not None):
                kept.append((s, verdicts))   # type: ignore[arg-type]
        if not kept:
            return [None] * len(steps)
        ats = [[v.at for v in vs if v is not None] for _, vs in kept]
        probs = self.backend.verdict_probs(prompt, [s for s, _ in kept], self.words, ats)
        values = []
        for (_, verdicts), p in zip(kept, probs):
            it = iter(p)
            values.append(step_values(verdicts, [None if v is None else next(it) for v in verdicts]))
        return combine(values, len(steps))

    def _outcome(self, prompt: str, samples: Sequence[Sample], n_steps: int) -> float | None:
        """ThinkPRM's solution-level P(yes) (:meth:`outcome_of`) over the verifications that
        did not hit the token cap: each, without the stop string it ended at, then the
        question ``Is the solution correct?`` on a line of its own; the next token is read."""
        heads = []
        for s in samples:
            if s.finish_reason == "length":
                continue
            body = s.text
            for stop in T.whole_stops(n_steps):
                if body.endswith(stop):
                    body = body[:-len(stop)]
                    break
            heads.append(body.rstrip() + "\n" + T.THINKPRM_END)
        got = [p for p in (self.backend.decision_probs(prompt, heads, DECISION) if heads else [])
               if p is not None]
        return sum(got) / len(got) if got else None

    def _score_per_step(self, problem: str, steps: list[str]) -> list[float | None]:
        """GenPRM: K chains, each verifying step k in its own turn after its own earlier
        verifications."""
        assert self.chat is not None
        k_chains = self.config.samples
        earlier: list[list[str]] = [[] for _ in range(k_chains)]
        values: list[list[float | None]] = [[] for _ in range(k_chains)]
        shown = T.shown(steps, self.calculator)
        for j in range(len(steps)):
            prompts = [T.genprm_prompt(self.chat, self.eos, problem, shown, e) for e in earlier]
            if j == 0:   # one prompt for all chains: sampled together, read once
                firsts = self._sample(prompts[0], k_chains, [T.GENPRM_ANALYZE_STOP],
                                      self.config.max_new_tokens, self.config.verifier_seed)
            else:
                firsts = [self._sample(p, 1, [T.GENPRM_ANALYZE_STOP], self.config.max_new_tokens,
                                       self.config.verifier_seed + 7919 * c)[0]
                          for c, p in enumerate(prompts)]
            for c, (prompt, first) in enumerate(zip(prompts, firsts)):
                value, text = self._genprm_verdict(prompt, first, c)
                values[c].append(value)
                earlier[c].append(T.GENPRM_ANALYZE.format(k=j + 1) + text)
        self.written[self._key(problem, steps)] = ["".join(chain) for chain in earlier]
        return combine(values, len(steps))

    def _genprm_verdict(self, prompt: str, first: Sample, chain: int) -> tuple[float | None, str]:
        """One GenPRM step verification's value (after its analysis ``first``), and its text."""
        if first.finish_reason == "length":
            self._count(first, False)
            return None, first.text
        head = prompt + first.text + T.GENPRM_OUTPUT
        out = self._sample(head, 1, [T.GENPRM_OUTPUT_STOP], T.GENPRM_OUTPUT_TOKENS,
                           self.config.verifier_seed + 7919 * chain + 1)[0]
        verdict = parse_genprm(out.text)
        text = first.text + T.GENPRM_OUTPUT + out.text
        if verdict is None:   # the verdict comes first: a cut after it still counts
            self._count(out, False)
            return None, text
        self.stats.samples += 1
        self.stats.parsed += 1
        p = self.backend.verdict_probs(head, [out], self.words, [[verdict.at]])[0][0]
        return (float(verdict.correct) if p is None else p), text

    def verifications(self, problem: str, steps: Sequence[str]) -> list[str]:
        """The texts of this PRM's ``samples`` verifications of one whole solution (a template
        that verifies all steps at once), as a teacher writes chains to train on."""
        if self.template.per_step:
            from prmkit.errors import PrmkitError

            raise PrmkitError(f"template {self.template.name!r} verifies one step per turn; a "
                              f"teacher writes whole chains (thinkprm or plain)")
        return [s.text for s in self._whole_samples(problem, list(steps))[1]
                if s.finish_reason != "length"]

    def _whole_samples(self, problem: str, steps: list[str]) -> tuple[str, list[Sample]]:
        """The prompt of a whole verification of ``steps`` and its ``samples`` verifications."""
        prompt = self._whole_prompt(problem, steps)
        return prompt, self._sample(prompt, self.config.samples, T.whole_stops(len(steps)),
                                    self.config.max_new_tokens, self.config.verifier_seed)

    def _whole_prompt(self, problem: str, steps: Sequence[str]) -> str:
        return T.whole_prompt(self.template, self.chat, problem, T.shown(steps, self.calculator))


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
