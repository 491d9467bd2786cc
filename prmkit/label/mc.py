"""Monte Carlo step labels (Math-Shepherd) and the first error by binary search (OmegaPRM).

Math-Shepherd (Wang et al., 2024) labels a step by finishing the solution from it: the step is
as good as the share of K rollouts from its prefix that reach the known answer. OmegaPRM (Luo et
al., 2024, "Improve Mathematical Reasoning in Language Models by Automated Process
Supervision") finds only the first wrong step, by bisection. Zhang et al. (2025, "The Lessons of
Developing Process Reward Models in Mathematical Reasoning") show such labels are noisy; the
judge and consensus filter (:mod:`prmkit.label.judge`, :mod:`prmkit.label.consensus`) are their
answer.

For a record with steps s_0 .. s_{n-1} and a ``reference`` answer:

probe i
    K rollouts continuing the prefix s_0 .. s_i to the end of the solution. A rollout is right
    when the final answer of prefix plus continuation is equivalent to ``reference`` (the rule
    ``prmkit generate`` grades by). Rollouts are seeded from (seed, prompt, k), so a rerun draws
    the same ones.
the last step
    When the last step states the final answer, its probe is the solution's own outcome (one
    free "rollout"); otherwise, or with ``last_step="rollout"``, it is rolled out like any other.
value
    ``hard``: 1 if any rollout is right, else 0. ``soft``: the fraction of right rollouts.
wrong
    A probed step whose value is at most ``threshold`` (default 0: no rollout right).

Strategies; ``first_error`` is the first step judged wrong, -1 when none is:

``per-step`` (Math-Shepherd)
    Every step probed in one round; ``labels`` are the values.
``linear-stop``
    Steps probed in order up to the first wrong one; ``labels``: 1 before the first error, 0 at
    it, null after.
``binary`` (OmegaPRM)
    The last step first: if it is not wrong, every step is right. Else bisection between the
    last step known right and the first known wrong, about log2(n) probes; labels as for
    linear-stop. A noisy probe can make it differ from per-step.

``meta["mc"]`` stores the settings and, per step, ``correct`` (right rollouts) and ``samples``
(rollouts behind it; null where not probed), plus ``probes`` (in order), ``rollouts_spent`` (the
free own answer not counted) and ``tokens``: labels for another mode or threshold can be
recomputed from the record alone, without new rollouts.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from prmkit.answers import extract_answer, is_equivalent
from prmkit.errors import PrmkitError, RecordError
from prmkit.generate.base import Generator, check_sampling
from prmkit.generate.prompts import Prompter, has_final_answer
from prmkit.records import Record, labels_from_first_error
from prmkit.steps import join_steps

MODES = ("hard", "soft")
STRATEGIES = ("per-step", "linear-stop", "binary")
LAST_STEP = ("auto", "rollout")

log = logging.getLogger("prmkit")


@dataclass
class MCConfig:
    """Settings of Monte Carlo labeling (see the module docstring for the definitions)."""

    rollouts: int = field(default=8, metadata={
        "help": "completions sampled from each probed prefix (K)"})
    mode: str = field(default="hard", metadata={
        "help": "hard: a step's value is 1 if any rollout reaches the reference answer, else 0; "
                "soft: the fraction of rollouts that do"})
    strategy: str = field(default="per-step", metadata={
        "help": "per-step: probe every step (labels = values); linear-stop: probe in order up to "
                "the first wrong step; binary: find the first wrong step by bisection (OmegaPRM). "
                "The last two label 1 before the first error, 0 at it, null after."})
    threshold: float = field(default=0.0, metadata={
        "help": "a probed step is wrong when its value is at most this (in [0, 1)); 0 = no "
                "rollout reached the answer"})
    last_step: str = field(default="auto", metadata={
        "help": "auto: when the last step states the final answer, the solution's own answer is "
                "its probe (no rollouts); rollout: roll out the last step too"})
    max_tokens: int = field(default=512, metadata={"help": "the most tokens per rollout"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature of rollouts"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling threshold of rollouts"})
    seed: int = field(default=0, metadata={
        "help": "rollout k of a prefix is seeded from (seed, prompt, k): reruns give the same labels"})
    chunk: int = field(default=8, metadata={
        "help": "records in flight: the probes of one round over all of them go to the "
                "generator in one call"})

    def __post_init__(self) -> None:
        check_sampling(self.rollouts, self.max_tokens, self.temperature, self.top_p, self.seed)
        if self.seed is None:
            raise PrmkitError("Monte Carlo labeling needs an integer seed (it makes reruns exact)")
        for name, value, known in (("mode", self.mode, MODES), ("strategy", self.strategy, STRATEGIES),
                                   ("last_step", self.last_step, LAST_STEP)):
            if value not in known:
                raise PrmkitError(f"{name} {value!r} is not one of {', '.join(known)}")
        if not 0.0 <= self.threshold < 1.0:
            raise PrmkitError(f"threshold must be in [0, 1), got {self.threshold}")
        if self.chunk < 1:
            raise PrmkitError(f"chunk must be positive, got {self.chunk}")

    def settings(self, policy: str = "") -> dict[str, Any]:
        """What ``meta["mc"]`` records of these settings (a resumed run must match them)."""
        return {"policy": policy, "strategy": self.strategy, "mode": self.mode,
                "rollouts": self.rollouts, "threshold": self.threshold,
                "last_step": self.last_step, "seed": self.seed, "temperature": self.temperature,
                "top_p": self.top_p, "max_tokens": self.max_tokens}


# ---------------------------------------------------------------------------------------------
# the strategies: pure functions of what is known so far


def step_value(correct: int, samples: int, mode: str) -> float:
    """The value of a probed step: hard 1.0 if any rollout was right, soft the fraction."""
    if mode == "hard":
        return 1.0 if correct > 0 else 0.0
    return correct / samples


def next_probes(strategy: str, n: int, wrong: dict[int, bool]) -> list[int]:
    """The steps to probe next, given the verdicts so far (``wrong[i]`` for probed steps);
    ``[]`` when the strategy is done."""
    if strategy == "per-step":
        return [i for i in range(n) if i not in wrong]
    if strategy == "linear-stop":
        if any(wrong.values()):
            return []
        return [i for i in range(n) if i not in wrong][:1]
    if strategy != "binary":
        raise PrmkitError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    if n - 1 not in wrong:
        return [n - 1]
    if not wrong[n - 1]:
        return []                                    # the solution reaches the answer
    hi = min(i for i, w in wrong.items() if w)        # first step known wrong
    lo = max((i for i, w in wrong.items() if not w and i < hi), default=-1)
    return [] if hi - lo <= 1 else [(lo + hi) // 2]


def first_error(wrong: dict[int, bool]) -> int:
    """The first step judged wrong, -1 if none."""
    return min((i for i, w in wrong.items() if w), default=-1)


def _verdicts(correct: Sequence[int | None], samples: Sequence[int | None], mode: str,
              threshold: float) -> dict[int, bool]:
    return {i: step_value(c, s, mode) <= threshold
            for i, (c, s) in enumerate(zip(correct, samples)) if c is not None and s}


def _labels(strategy: str, mode: str, correct: Sequence[int | None], samples: Sequence[int | None],
            fe: int) -> list[float | None]:
    if strategy == "per-step":
        return [None if c is None or not s else step_value(c, s, mode)
                for c, s in zip(correct, samples)]
    return labels_from_first_error(len(correct), fe)


# ---------------------------------------------------------------------------------------------
# one record


@dataclass
class _Job:
    """A record being labelled: its counts so far."""

    record: Record
    own_answer: bool                  # the last step's probe is the solution's own outcome
    correct: list[int | None]
    samples: list[int | None]
    probes: list[int] = field(default_factory=list)
    rollouts_spent: int = 0
    tokens: int = 0

    @classmethod
    def start(cls, record: Record, config: MCConfig) -> "_Job":
        if record.reference is None or not record.reference.strip():
            raise RecordError(f"record {record.id!r} has no reference answer; Monte Carlo "
                              f"labels need one", field="reference")
        own = config.last_step == "auto" and has_final_answer(record.steps[-1])
        n = len(record.steps)
        return cls(record, own, [None] * n, [None] * n)

    def advance(self, config: MCConfig, prompter: Prompter) -> list[int]:
        """The steps to roll out next (the free last step is settled here); [] when done."""
        n = len(self.record.steps)
        while True:
            wanted = next_probes(config.strategy, n, self.verdicts(config))
            if not (self.own_answer and n - 1 in wanted):
                return wanted
            answer = self.record.answer
            if answer is None:
                answer = extract_answer(join_steps(self.record.steps, prompter.rule))
            self.settle(n - 1, int(is_equivalent(answer, self.record.reference)), 1)

    def settle(self, i: int, correct: int, samples: int) -> None:
        self.correct[i], self.samples[i] = correct, samples
        self.probes.append(i)

    def verdicts(self, config: MCConfig) -> dict[int, bool]:
        return _verdicts(self.correct, self.samples, config.mode, config.threshold)

    def finish(self, config: MCConfig, policy: str) -> Record:
        fe = first_error(self.verdicts(config))
        # a new record: the caller's input record is left as it was
        return dataclasses.replace(
            self.record, first_error=fe,
            labels=_labels(config.strategy, config.mode, self.correct, self.samples, fe),
            meta=dict(self.record.meta, mc=dict(
                config.settings(policy), correct=self.correct, samples=self.samples,
                probes=self.probes, rollouts_spent=self.rollouts_spent, tokens=self.tokens)))


# ---------------------------------------------------------------------------------------------
# the labeling loop


def label_mc(records: Iterable[Record], generator: Generator, prompter: Prompter,
             config: MCConfig | None = None, policy: str = "") -> Iterator[Record]:
    """Label ``records`` by Monte Carlo rollouts; yield each one as soon as it is finished.

    Up to ``config.chunk`` records are in flight; each round gathers the probes every one of
    them needs and rolls them all out in one generator call. Records are yielded in the order
    they finish (input order within a round). ``policy`` is recorded in ``meta["mc"]``.
    """
    from prmkit.progress import note

    config = config or MCConfig()
    pending = iter(records)
    active: list[_Job] = []
    exhausted = False
    rollouts = 0
    silent: list[str] = []   # records none of whose rollouts reached the reference
    while True:
        while not exhausted and len(active) < config.chunk:
            rec = next(pending, None)
            if rec is None:
                exhausted = True
            else:
                active.append(_Job.start(rec, config))
        if not active:
            summarise_no_signal(silent)
            return
        wanted: list[tuple[_Job, int]] = []
        still: list[_Job] = []
        for job in active:
            steps = job.advance(config, prompter)
            if steps:
                wanted += [(job, i) for i in steps]
                still.append(job)
            else:
                warn_if_no_signal(job, silent)
                yield job.finish(config, policy)
        active = still
        if wanted:
            _roll_out(generator, prompter, config, wanted)
            rollouts += config.rollouts * len(wanted)
            note(rollouts=rollouts, in_flight=len(active))


WARN_RECORDS = 3   # records warned about one by one; the rest are counted at the end


def warn_if_no_signal(job: _Job, silent: list[str]) -> None:
    """Warn when no rollout of a record reached its reference answer: every probed step is then
    labelled wrong whatever it says, and the labels carry no signal (a wrong reference, or a
    policy too weak for the problem). The first ``WARN_RECORDS`` such records are named one by
    one; :func:`summarise_no_signal` counts them all at the end."""
    if job.rollouts_spent and not any(c for c in job.correct if c is not None):
        silent.append(job.record.id)
        if len(silent) <= WARN_RECORDS:
            log.warning("record %r: none of its %d rollouts reached the reference answer %r; its "
                        "step labels are all 0 and carry no signal (check the reference, or use "
                        "a stronger policy)", job.record.id, job.rollouts_spent,
                        job.record.reference)


def summarise_no_signal(silent: list[str]) -> None:
    """One line for the records past the first ``WARN_RECORDS`` that had no signal."""
    if len(silent) > WARN_RECORDS:
        log.warning("%d records in all had no rollout reach their reference answer (the first "
                    "%d named above; the last: %r); their step labels are all 0", len(silent),
                    WARN_RECORDS, silent[-1])


def check_some_signal(rows: list[dict[str, Any]], source: str) -> None:
    """Refuse (after the output is written) a run in which no record got a usable label: no
    rollout of any record reached its reference answer, so every label is 0. The likely cause
    is the reference column, not the policy."""
    silent = [r for r in rows if not any(c for c in r["meta"]["mc"]["correct"] if c)]
    if rows and len(silent) == len(rows):
        example = rows[0].get("reference")
        raise PrmkitError(f"all {len(rows)} of {len(rows)} records: no rollout reached the "
                          f"reference answer, so every label is 0 and none is usable. Likely "
                          f"cause: the reference column of {source} (the first is "
                          f"{str(example)[:60]!r}; it should be the final answer alone, as the "
                          f"policy's answers are graded against it)")


def _roll_out(generator: Generator, prompter: Prompter, config: MCConfig,
              wanted: list[tuple[_Job, int]]) -> None:
    """Roll out every wanted probe in one generator call and settle its count."""
    prompts = [prompter.prompt(job.record.problem, job.record.steps[:i + 1]) for job, i in wanted]
    outs = generator.generate(prompts, n=config.rollouts, stop=prompter.end_strings,
                              max_tokens=config.max_tokens, temperature=config.temperature,
                              top_p=config.top_p, seed=config.seed)
    for (job, i), row in zip(wanted, outs):
        prefix = join_steps(job.record.steps[:i + 1], prompter.rule) + prompter.separator
        right = 0
        for c in row:
            text = c.text[:-len(c.stop)] if c.stop else c.text   # without the end string
            right += is_equivalent(extract_answer(prefix + text), job.record.reference)
        job.settle(i, right, len(row))
        job.rollouts_spent += len(row)
        job.tokens += sum(c.n_tokens for c in row)


# ---------------------------------------------------------------------------------------------
# new labels from stored counts


def relabel(record: Record, mode: str | None = None, threshold: float | None = None) -> Record:
    """``record`` labelled again from the counts in ``meta["mc"]`` under another mode and/or
    threshold, exactly as a rerun with the same seed would label it, without new rollouts.

    The stored strategy is replayed against the stored counts (rollouts are seeded, so a rerun
    would draw the same ones). Per-step labels always replay. A search (linear-stop, binary)
    may need a step the first run did not probe; that is a :class:`PrmkitError`.
    """
    mc = record.meta.get("mc")
    if not isinstance(mc, dict):
        raise RecordError(f"record {record.id!r} has no Monte Carlo counts", field="meta")
    mode = mc["mode"] if mode is None else mode
    threshold = mc["threshold"] if threshold is None else threshold
    MCConfig(mode=mode, threshold=threshold, strategy=mc["strategy"])  # validates
    correct, samples = mc["correct"], mc["samples"]
    n = len(record.steps)
    if len(correct) != n or len(samples) != n:
        raise RecordError(f"record {record.id!r}: meta.mc counts do not match its {n} steps",
                          field="meta")
    known = _verdicts(correct, samples, mode, threshold)
    seen: dict[int, bool] = {}
    while True:                                  # replay the search on the stored counts
        steps = next_probes(mc["strategy"], n, seen)
        if not steps:
            break
        missing = [i for i in steps if i not in known]
        if missing:
            raise PrmkitError(f"record {record.id!r}: with mode={mode}, threshold={threshold} the "
                              f"{mc['strategy']} search needs step {missing[0]}, which was not "
                              f"probed; label it again with new rollouts")
        seen.update({i: known[i] for i in steps})
    fe = first_error(seen)
    kept = [c if i in seen else None for i, c in enumerate(correct)]
    counts = [s if i in seen else None for i, s in enumerate(samples)]
    out = Record.from_dict(record.to_dict())
    out.first_error = fe
    out.labels = _labels(mc["strategy"], mode, kept, counts, fe)
    out.meta["mc"] = dict(mc, mode=mode, threshold=threshold)
    return out
