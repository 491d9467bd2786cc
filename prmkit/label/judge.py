"""An LLM judge names the first wrong step, in the style of ProcessBench's critic.

ProcessBench (Zheng et al., 2024, "ProcessBench: Identifying Process Errors in Mathematical
Reasoning") asks a critic model to review a solution paragraph by paragraph and answer the index
of the earliest wrong paragraph, or -1, in ``\\boxed{}``. Zhang et al. (2025, "The Lessons of
Developing Process Reward Models in Mathematical Reasoning") found that such a judge, alone or
in consensus with Monte Carlo labels (:mod:`prmkit.label.consensus`), gives better step labels
than Monte Carlo estimation alone.

The prompt is ProcessBench's critique template: the problem, then the steps as paragraphs
``<paragraph_i> ... </paragraph_i>`` numbered from 0, then the task. A chat model gets it as the
one user message of its chat template; a model without one gets the text as it is. Any policy
that ``--backend`` runs can judge: a local model, or a big model on a vLLM or SGLang server
through the ``openai`` backend.

The verdict of one output is the integer in its last ``\\boxed{...}``; it must be -1 or a step
index. An output without one, or with another value, is *unparseable*: it is counted (per
record in ``meta["judge"]["unparseable"]``, with the end of the text kept for inspection, and in
the job's summary), never silently dropped. With ``samples > 1`` (sampled at ``temperature >
0``) the verdict is the majority of the parseable outputs; a tie goes to the earliest error
(-1 counts as after every step), so a judge that saw an error in half its outputs reports it. A
record with no parseable output gets ``first_error`` and ``labels`` null.

Labels follow ProcessBench: 1 before the first error, 0 at it, null after (-1: all 1).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Generator, check_sampling
from prmkit.generate.prompts import Prompter, render_chat
from prmkit.records import Record, labels_from_first_error

# ProcessBench's code/templates/critique_template.txt.
CRITIQUE_TEMPLATE = (
    "The following is a math problem and a solution (split into paragraphs, enclosed with tags "
    "and indexed from 0):\n\n[Math Problem]\n\n{problem}\n\n[Solution]\n\n{tagged_response}\n\n"
    "Your task is to review and critique the solution paragraph by paragraph. Once you identify "
    "an error in a paragraph, return the index of the paragraph where the earliest error occurs. "
    "Otherwise, return the index of -1 (which typically denotes \"not found\").\n\n"
    "Please put your final answer (i.e., the index) in \\boxed{{}}.")

_BOXED = re.compile(r"\\boxed\s*\{\s*([^{}]*?)\s*\}")
KEEP_CHARS = 300   # the end of an unparseable output kept in meta for inspection


@dataclass
class JudgeConfig:
    """How the judge is sampled."""

    samples: int = field(default=1, metadata={
        "help": "judge outputs per record; more than 1 takes the majority verdict (use a "
                "temperature above 0)"})
    max_tokens: int = field(default=1024, metadata={"help": "the most tokens per judge output"})
    temperature: float = field(default=0.0, metadata={
        "help": "sampling temperature of the judge; 0 = greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling threshold"})
    seed: int = field(default=0, metadata={
        "help": "output k of a record is seeded from (seed, prompt, k): reruns give the same verdicts"})
    chunk: int = field(default=8, metadata={"help": "records per generator call"})

    def __post_init__(self) -> None:
        check_sampling(self.samples, self.max_tokens, self.temperature, self.top_p, self.seed)
        if self.samples > 1 and self.temperature == 0:
            raise PrmkitError("several judge samples need a temperature above 0 (greedy "
                              "decoding gives the same output every time)")
        if self.chunk < 1:
            raise PrmkitError(f"chunk must be positive, got {self.chunk}")

    def settings(self, judge: str = "") -> dict[str, Any]:
        return {"model": judge, "samples": self.samples, "max_tokens": self.max_tokens,
                "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


def critique_text(problem: str, steps: Sequence[str]) -> str:
    """ProcessBench's critique request for a solution."""
    tagged = "\n\n".join(f"<paragraph_{i}>\n{step}\n</paragraph_{i}>" for i, step in enumerate(steps))
    return CRITIQUE_TEMPLATE.format(problem=problem.strip(), tagged_response=tagged)


def judge_prompt(prompter: Prompter, problem: str, steps: Sequence[str]) -> str:
    """The critique request as the judge model reads it (its chat template, if it has one)."""
    text = critique_text(problem, steps)
    if prompter.style.chat and prompter.chat_template:
        return render_chat(prompter.chat_template, [{"role": "user", "content": text}],
                           **prompter.special)
    return text + "\n\n"


def parse_verdict(text: str, n_steps: int) -> int | None:
    """The step index in the output's last ``\\boxed{}``; None unless it is -1 .. n_steps-1."""
    found = _BOXED.findall(text)
    if not found:
        return None
    value = found[-1].strip().strip("$").strip()
    if not re.fullmatch(r"-?\d+", value):
        return None
    index = int(value)
    return index if -1 <= index < n_steps else None


def majority(votes: Sequence[int | None], n_steps: int) -> int | None:
    """The most common parseable verdict; ties go to the earliest error (-1 counts as last)."""
    counts = Counter(v for v in votes if v is not None)
    if not counts:
        return None
    return min(counts, key=lambda v: (-counts[v], n_steps if v == -1 else v))


def label_judge(records: Iterable[Record], generator: Generator, prompter: Prompter,
                config: JudgeConfig | None = None, judge: str = "") -> Iterator[Record]:
    """Label ``records`` with the judge's first error, ``config.chunk`` records per generator
    call; yield them in input order. ``judge`` (the model's name) goes to ``meta["judge"]``."""
    config = config or JudgeConfig()
    stop = [s for s in prompter.end_strings if s.strip()]   # a blank line does not end a review
    todo = iter(records)
    while True:
        batch = [rec for _, rec in zip(range(config.chunk), todo)]
        if not batch:
            return
        prompts = [judge_prompt(prompter, r.problem, r.steps) for r in batch]
        outs = generator.generate(prompts, n=config.samples, stop=stop,
                                  max_tokens=config.max_tokens, temperature=config.temperature,
                                  top_p=config.top_p, seed=config.seed)
        for rec, row in zip(batch, outs):
            n = len(rec.steps)
            votes = [parse_verdict(c.text, n) for c in row]
            verdict = majority(votes, n)
            rec.first_error = verdict
            rec.labels = None if verdict is None else labels_from_first_error(n, verdict)
            rec.meta = dict(rec.meta, judge=dict(
                config.settings(judge), votes=votes, unparseable=votes.count(None),
                unparsed_tails=[c.text[-KEEP_CHARS:] for c, v in zip(row, votes) if v is None],
                tokens=sum(c.n_tokens for c in row)))
            yield rec
