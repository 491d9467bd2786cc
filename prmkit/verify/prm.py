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
verifications of up to :data:`BATCH` solutions with as many steps in one call. With
``copy_steps`` a whole verification is written a step line at a time, the copy of each step
prmkit's (:mod:`prmkit.verify.copies`).

A backend (:class:`prmkit.verify.backend.VerifierBackend`) samples and reads verdict
probabilities; the problem and solution prompt is encoded once for its K samples where the
backend allows it (``prompt_tokens_saved``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from prmkit.models.base import collect
from prmkit.progress import note
from prmkit.verify import templates as T
from prmkit.verify.backend import CHAIN_SEED, GenStats, Sample, SamplesMany, Sampling, \
    VerifierBackend
from prmkit.verify.copies import copied_verifications
from prmkit.verify.verdicts import Verdict, combine, parse_genprm, parse_whole, step_values

DECISION = (" Yes", " No")   # ThinkPRM's decision words, the next token after its question
BATCH = 8   # solutions whose whole verifications a batching backend samples together
SAMPLING_DEFAULTS = {"samples": 1, "max_new_tokens": 1024, "temperature": 0.7, "top_p": 1.0,
                     "top_k": 0, "copy_steps": False}


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
    copy_steps: bool | None = field(default=None, metadata={
        "help": "whole verifications (thinkprm, plain): prmkit writes each 'Step i: <step i>' "
                "and the verifier the rest of the line, its review and verdict, step by step "
                "up to the first step it calls incorrect (prmkit/verify/copies.py): for a "
                "verifier whose chains copy each step (train verifier --chains lab saves it "
                "on); default: the verifier folder's saved setting, else off"})
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
        else from :data:`SAMPLING_DEFAULTS` (``copy_steps`` too)."""
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
        if self.config.copy_steps and template.per_step:
            from prmkit.errors import PrmkitError

            raise PrmkitError(f"--copy-steps writes the step lines of a whole verification "
                              f"(thinkprm, plain); {template.name} verifies one step per turn")
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
        self._made(sum(s.n_tokens for s in samples), len(samples))
        return samples

    def _made(self, tokens: int, verifications: int = 0) -> None:
        """Count the tokens just sampled (of ``verifications`` finished ones, not yet read),
        and say so in the progress line (progress inside a solution)."""
        self.stats.tokens_generated += tokens
        note(verifications=self.stats.samples + verifications, parsed=self.stats.parsed,
             tokens=self.stats.tokens_generated)

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
        prompts = [self._whole_prompt(p, s) for p, s in zip(problems, steps)]
        batch = self._sample_whole(prompts, steps)
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
                                       self.config.verifier_seed + CHAIN_SEED * c)[0]
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
                           self.config.verifier_seed + CHAIN_SEED * chain + 1)[0]
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
        return prompt, self._sample_whole([prompt], [steps])[0]

    def _sample_whole(self, prompts: Sequence[str], steps: Sequence[Sequence[str]],
                      ) -> list[list[Sample]]:
        """The ``samples`` whole verifications of each prompt (of solutions with as many steps
        where there are several: one batch); the step copies written for the verifier with
        ``copy_steps`` (:mod:`prmkit.verify.copies`)."""
        c = self.config
        if c.copy_steps:
            rows = copied_verifications(self.backend, prompts,
                                        [T.shown(s, self.calculator) for s in steps], c.samples,
                                        c.max_new_tokens, c.sampling, c.verifier_seed, self._made)
            self._made(0, sum(len(row) for row in rows))
            return rows
        stops = T.whole_stops(len(steps[0]))
        if len(prompts) == 1:
            return [self._sample(prompts[0], c.samples, stops, c.max_new_tokens, c.verifier_seed)]
        assert isinstance(self.backend, SamplesMany)
        rows = self.backend.sample_many(prompts, c.samples, stops, c.max_new_tokens, c.sampling,
                                        c.verifier_seed)
        self._made(sum(s.n_tokens for row in rows for s in row), sum(len(row) for row in rows))
        return rows

    def _whole_prompt(self, problem: str, steps: Sequence[str]) -> str:
        return T.whole_prompt(self.template, self.chat, problem, T.shown(steps, self.calculator))
