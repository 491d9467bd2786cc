"""The ``generate`` job: N candidate solutions per problem, written as prmkit records.

One record per candidate::

    id          "{problem id}-{k}"  (k = 0 .. n-1, the sample index)
    group       the problem id (best-of-N selects within a group)
    problem     the problem text
    steps       the solution split by the step rule (prmkit.steps.split_steps), each step
                stripped of surrounding whitespace (blank lines between steps go)
    answer      the final answer (prmkit.answers.extract_answer), when there is one
    reference   the problem's known answer, when the input has it
    is_correct  answer equivalent to reference (prmkit.answers.is_equivalent), when a
                reference is known; false when no answer could be extracted
    meta        policy, backend, seed, sample, temperature, top_p, prompt_tokens,
                completion_tokens, finish_reason ("stop", "eos" or "length")

A completion with no text at all (the model ended at once) becomes one empty step ``[""]``,
with ``meta.empty = true`` and ``is_correct = false`` when a reference is known: it stays
visible as a failed sample instead of vanishing, and the count per group stays ``n``.

Resuming: records are appended to ``OUT.partial`` as problems finish
(:class:`prmkit.resume.Partial`). Problems are cut into fixed chunks by their position
in the input (``chunk`` problems per generator call); a rerun skips the chunks whose records
are all written and regenerates any other chunk *whole*, writing only the records it lacks.
Every generator call therefore sees the same prompts as in an uninterrupted run, and with
per-sample seeds (:func:`prmkit.generate.base.sample_seed`) it samples the same tokens: a killed
and resumed job writes the same records as one that was never interrupted. A rerun with other
settings than the partial file's header names (:mod:`prmkit.resume`), or whose problems differ
from its rows', is refused (start again with ``resume=False``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from prmkit.answers import extract_answer, is_equivalent
from prmkit.errors import PrmkitError, RecordError
from prmkit.generate.base import Generator, check_sampling
from prmkit.generate.prompts import Prompter
from prmkit.generate.stepwise import Solution, solve
from prmkit.records import Record, iter_jsonl
from prmkit.resume import Header, Partial, check_resume, config_identity
from prmkit.steps import RULES, split_steps


@dataclass
class Problem:
    id: str
    problem: str
    reference: str | None = None


@dataclass
class GenerateConfig:
    """Settings of the ``generate`` job (sampling, splitting, batching, resuming)."""

    n: int = field(default=8, metadata={"help": "candidates per problem"})
    max_tokens: int = field(default=512, metadata={"help": "the most tokens per candidate"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature; 0 = greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling threshold"})
    seed: int = field(default=0, metadata={
        "help": "sample k of a problem is seeded from (seed, prompt, k): reruns give the same records"})
    step_rule: str | None = field(default=None, metadata={
        "help": "how a candidate is split into steps (lines, blank-lines, step-markers, auto); "
                "default: the rule the prompt teaches", "choices": RULES})
    chunk: int = field(default=1, metadata={
        "help": "problems per generator call; fixed by input position, so resuming is exact",
        "identity": False})
    resume: bool = field(default=True, metadata={"help": "continue from OUT.partial if present",
                                                 "identity": False})

    def __post_init__(self) -> None:
        check_sampling(self.n, self.max_tokens, self.temperature, self.top_p, self.seed)
        if self.seed is None:
            raise PrmkitError("the generate job needs an integer seed (it makes resuming exact)")
        if self.step_rule is not None and self.step_rule not in RULES:
            raise PrmkitError(f"unknown step rule {self.step_rule!r}; known: {', '.join(RULES)}")
        if self.chunk < 1:
            raise PrmkitError(f"chunk must be positive, got {self.chunk}")


# ---------------------------------------------------------------------------------------------
# problems


INPUT_HELP = ("problems: JSONL with 'problem' (or 'question') and optional 'id' and 'reference' "
              "(or 'answer'); prmkit or any format `prmkit convert` reads: one problem per "
              "record, records of one group count once (the group is the problem id)")


def read_problems(path: str, fmt: str = "prmkit", limit: int | None = None) -> list[Problem]:
    """The problems in ``path`` (format ``fmt``), in file order, the first ``limit`` of them."""
    if limit is not None and limit < 1:
        raise PrmkitError(f"limit must be positive, got {limit}")
    problems: list[Problem] = []
    seen: set[str] = set()
    for problem in (_plain_problems(path) if fmt == "problems" else _record_problems(path, fmt)):
        if problem.id in seen:
            continue
        seen.add(problem.id)
        problems.append(problem)
        if limit is not None and len(problems) >= limit:
            break
    if not problems:
        raise PrmkitError(f"{path}: no problems")
    return problems


def _record_problems(path: str, fmt: str):
    from prmkit import formats

    for rec in formats.read(fmt, path):
        yield Problem(rec.group or rec.id, rec.problem, rec.reference)


def _plain_problems(path: str):
    for lineno, obj in iter_jsonl(path):
        if not isinstance(obj, dict):
            raise RecordError("expected a JSON object", path, lineno)
        text = obj.get("problem", obj.get("question"))
        if not isinstance(text, str) or not text.strip():
            raise RecordError("missing or empty (also tried 'question')", path, lineno, "problem")
        pid = obj.get("id", f"problem-{lineno - 1}")
        ref = obj.get("reference", obj.get("answer"))
        if ref is not None and not isinstance(ref, (str, int, float)):
            raise RecordError("expected a string or a number", path, lineno, "reference")
        yield Problem(str(pid), text, None if ref is None else str(ref))


# ---------------------------------------------------------------------------------------------
# records


def candidate_record(problem: Problem, k: int, solution: Solution, rule: str,
                     meta: dict[str, Any]) -> Record:
    """The record of sample ``k`` of ``problem`` (see the module docstring)."""
    text = solution.text.strip()
    steps = [s.strip() for s in split_steps(text, rule)] if text else []
    c = solution.completion
    extra: dict[str, Any] = dict(meta, sample=k, prompt_tokens=c.prompt_tokens,
                                 completion_tokens=c.n_tokens, finish_reason=c.finish_reason)
    if not steps:
        steps, extra["empty"] = [""], True
    answer = extract_answer(text) if text else None
    correct = None if problem.reference is None else is_equivalent(answer, problem.reference)
    return Record(id=f"{problem.id}-{k}", problem=problem.problem, steps=steps, answer=answer,
                  reference=problem.reference, is_correct=correct, group=problem.id, meta=extra)


# ---------------------------------------------------------------------------------------------
# the job


@dataclass
class Summary:
    problems: int = 0
    records: int = 0
    generated_problems: int = 0      # in this run (not resumed)
    completion_tokens: int = 0       # in this run
    seconds: float = 0.0
    accuracy: float | None = None    # mean is_correct over all records
    pass_at_n: float | None = None   # share of problems with at least one correct candidate

    def line(self, n: int) -> str:
        out = f"{self.records} candidates for {self.problems} problems"
        if self.accuracy is not None:
            out += (f"; accuracy {100 * self.accuracy:.1f}%, pass@{n} "
                    f"{100 * (self.pass_at_n or 0):.1f}%")
        if self.generated_problems and self.seconds > 0:
            out += (f"; generated {self.completion_tokens} tokens in {self.seconds:.0f} s "
                    f"({self.completion_tokens / self.seconds:.1f} tokens/s)")
        return out


SAMPLING_KEYS = ("policy", "seed", "temperature", "top_p", "max_tokens")


def run_generate(problems: Sequence[Problem], generator: Generator, prompter: Prompter,
                 output: str, config: GenerateConfig | None = None, policy: str = "",
                 backend: str = "", on_chunk: Callable[[int], None] | None = None,
                 progress: bool = True, header: Header | None = None) -> Summary:
    """Generate ``config.n`` candidates per problem into ``output`` (resumable; see the module
    docstring). ``on_chunk(problems finished in this run)`` is called after every chunk.
    ``header``: the partial file's (:mod:`prmkit.resume`); by default the policy, the backend
    and ``config``."""
    config = config or GenerateConfig()
    rule = config.step_rule or prompter.rule
    meta = {"policy": policy, "backend": backend, "seed": config.seed,
            "temperature": config.temperature, "top_p": config.top_p,
            "max_tokens": config.max_tokens}
    ids = [f"{p.id}-{k}" for p in problems for k in range(config.n)]
    header = header or Header("generate", {"policy": policy, "backend": backend,
                                           **config_identity(config)})
    writer = Partial(output, header, resume=config.resume)
    done = writer.done_rows()
    asked = {f"{p.id}-{k}": (p.problem, p.reference) for p in problems for k in range(config.n)}
    check_resume(output, done, lambda row: asked.get(row.get("id")) == (
        row.get("problem"), row.get("reference")), {k: meta[k] for k in SAMPLING_KEYS})
    chunks = [list(problems[s:s + config.chunk]) for s in range(0, len(problems), config.chunk)]
    summary = Summary(problems=len(problems))
    finished = sum(all(f"{p.id}-{k}" in done for k in range(config.n)) for p in problems)
    if finished:
        print(f"resuming: {finished} of {len(problems)} problems already done", file=sys.stderr)
    from prmkit.progress import progress as bar_of

    start = time.perf_counter()
    with bar_of(total=len(problems), initial=finished, desc="generate", unit="problem",
                disable=None if progress else True) as bar:
        for chunk in chunks:
            todo = [p for p in chunk if any(f"{p.id}-{k}" not in done for k in range(config.n))]
            if not todo:
                continue
            solutions = solve(generator, prompter, [p.problem for p in chunk], n=config.n,
                              max_tokens=config.max_tokens, temperature=config.temperature,
                              top_p=config.top_p, seed=config.seed)
            for problem, row in zip(chunk, solutions):
                if problem not in todo:
                    continue
                for k, solution in enumerate(row):
                    rec = candidate_record(problem, k, solution, rule, meta)
                    if rec.id not in done:
                        writer.write(rec)
                    summary.completion_tokens += solution.completion.n_tokens
                summary.generated_problems += 1
                bar.update(1)
            if on_chunk is not None:
                on_chunk(summary.generated_problems)
    summary.seconds = time.perf_counter() - start
    rows = writer.done_rows()
    writer.close(order=ids)
    _score(summary, [rows[i] for i in ids], config.n)
    return summary


def _score(summary: Summary, rows: list[dict[str, Any]], n: int) -> None:
    summary.records = len(rows)
    flags = [r.get("is_correct") for r in rows]
    if rows and all(f is not None for f in flags):
        summary.accuracy = sum(bool(f) for f in flags) / len(flags)
        groups: dict[str, bool] = {}
        for r in rows:
            groups[r["group"]] = groups.get(r["group"], False) or bool(r["is_correct"])
        summary.pass_at_n = sum(groups.values()) / len(groups)
