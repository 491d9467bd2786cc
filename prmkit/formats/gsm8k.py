"""GSM8K: grade-school math word problems with reference solutions.

Source: Cobbe et al., "Training Verifiers to Solve Math Word Problems" (2021),
github.com/openai/grade-school-math (``grade_school_math/data/{train,test}.jsonl``).

JSONL, one problem per line::

    {"question": "Janet's ducks lay 16 eggs per day. ...",
     "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\\n...\\n#### 18"}

``answer`` holds the reasoning, one step per line, with calculator annotations ``<<a*b=c>>``,
then a last line ``#### N`` with the final answer.

Reading: problem = ``question``; steps = the non-empty lines before ``####``, as in the source
(calculator annotations kept unless ``strip_calculator`` is set); reference = the text after
``#### `` as in the source (commas kept, e.g. ``1,600``). The solution is the reference
solution, so answer = reference, is_correct = true and every step is labelled 1. Id: ``id`` if
present, else ``gsm8k-N`` (N = line number - 1, the problem's index in the file). Any other
field goes to ``meta``.

The model solutions the paper released (``example_model_solutions.jsonl``: ``question``,
``ground_truth`` and one object ``{"solution", "is_correct"}`` per solver, ``6b_finetuning``,
``6b_verification``, ``175b_finetuning``, ``175b_verification``) read as candidates, one record
per solver: id ``gsm8k-N-SOLVER``, group ``gsm8k-N``, steps = the solution's non-empty lines,
answer and reference extracted from the solution and ``ground_truth`` (``A: N``), is_correct
as released, no step labels, meta ``{"solver": SOLVER}``.

Writing: ``question`` = problem; ``answer`` = the steps joined by newlines, then
``\\n#### `` and the record's answer (or its reference when it has none). For records read
from GSM8K this reproduces the original line.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from prmkit.errors import RecordError
from prmkit.formats.common import build, extras, get
from prmkit.records import Record, iter_jsonl, write_jsonl

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("GSM8K, JSONL: question, answer (reasoning lines, then '#### N'). Steps = the "
        "non-empty lines before '####' (calculator annotations <<a*b=c>> kept unless "
        "--strip-calculator); reference = answer = N as written; a reference solution, so "
        "is_correct true and every label 1. Id gsm8k-N (N = line - 1) unless an id field exists. "
        "The paper's model solutions (question, ground_truth, one {solution, is_correct} per "
        "solver) read as one candidate per solver: id gsm8k-N-SOLVER, group gsm8k-N.")

_MARK = "####"
_CALCULATOR = re.compile(r"<<[^<>]*>>")
_AUTO_ID = re.compile(r"gsm8k-\d+")


SOLVERS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    for lineno, obj in iter_jsonl(path):
        try:
            if isinstance(obj, dict) and "ground_truth" in obj and "answer" not in obj:
                yield from candidates(obj, path, lineno)
            else:
                yield _record(obj, path, lineno, options.strip_calculator)
        except RecordError as e:
            raise e.at(path, lineno) from None


def candidates(obj: Any, path: str, lineno: int) -> list[Record]:
    """One line of the released model solutions: a candidate record per solver."""
    from prmkit.answers import extract_answer

    question = get(obj, "question", str)
    reference = extract_answer(get(obj, "ground_truth", str))
    solvers = [s for s in SOLVERS if s in obj]
    if not solvers:
        raise RecordError(f"missing: a line of model solutions holds one of "
                          f"{', '.join(SOLVERS)}", field=SOLVERS[0])
    base = get(obj, "id", (str, int), required=False)
    base = str(base) if base is not None else f"gsm8k-{lineno - 1}"
    out = []
    for solver in solvers:
        solution = get(obj[solver], "solution", str, what=f"{solver}.")
        correct = get(obj[solver], "is_correct", bool, what=f"{solver}.")
        steps = [line for line in solution.split("\n") if line.strip()]
        out.append(build(path, lineno, {"steps": f"{solver}.solution"}, id=f"{base}-{solver}",
                         group=base, problem=question, steps=steps,
                         answer=extract_answer(solution), reference=reference,
                         is_correct=correct, meta={"solver": solver}))
    return out


def split_answer(text: str) -> tuple[list[str], str]:
    """(steps, final answer) of a GSM8K ``answer`` field."""
    if _MARK not in text:
        raise RecordError(f"no final answer line '{_MARK} N'", field="answer")
    reasoning, final = text.rsplit(_MARK, 1)
    final = final.strip()
    if not final:
        raise RecordError(f"nothing after '{_MARK}'", field="answer")
    steps = [line for line in reasoning.split("\n") if line.strip()]
    if not steps:
        raise RecordError(f"no reasoning lines before '{_MARK}'", field="answer")
    return steps, final


def _record(obj: Any, path: str, lineno: int, strip_calculator: bool) -> Record:
    question = get(obj, "question", str)
    steps, final = split_answer(get(obj, "answer", str))
    if strip_calculator:
        steps = [_CALCULATOR.sub("", s) for s in steps]
    rec_id = get(obj, "id", (str, int), required=False)
    return build(path, lineno, {"problem": "question", "steps": "answer",
                                "reference": "answer", "answer": "answer"},
                 id=str(rec_id) if rec_id is not None else f"gsm8k-{lineno - 1}",
                 problem=question, steps=steps, labels=[1.0] * len(steps), answer=final,
                 reference=final, is_correct=True,
                 meta=extras(obj, {"question", "answer", "id"}))


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    def rows() -> Iterator[dict[str, Any]]:
        for rec in records:
            final = rec.answer if rec.answer is not None else rec.reference
            if final is None:
                raise RecordError("the record has neither an answer nor a reference for the "
                                  f"'{_MARK}' line", f"{path}: record {rec.id!r}", None, "answer")
            row: dict[str, Any] = {"question": rec.problem,
                                   "answer": "\n".join(rec.steps) + f"\n{_MARK} {final}"}
            if not _AUTO_ID.fullmatch(rec.id):  # an id the reader made up is not written
                row["id"] = rec.id
            yield row
    return write_jsonl(path, rows())
