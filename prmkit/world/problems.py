"""The lab world: multi-step arithmetic word problems whose every step can be checked exactly.

A problem is a chain of operations on one quantity, told as a short story; its reference
solution has one step per operation and a last step ``The answer is N.``. :func:`gold_labels`
labels any solution text exactly, with the first-error convention of ProcessBench and
Math-Shepherd. :func:`parse_problem` reads the chain back from the story, so gold labels and the
lab policy work on any lab problem text. Problems are :class:`prmkit.records.Record` s with
``reference`` set (docs/lab.md).
"""

from __future__ import annotations

import ast
import operator
import random
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from prmkit.errors import PrmkitError
from prmkit.records import Record, first_error_from_labels

NAMES = (("Mia", "She"), ("Leo", "He"), ("Ava", "She"), ("Sam", "He"), ("Zoe", "She"),
         ("Ben", "He"), ("Ella", "She"), ("Omar", "He"), ("Lena", "She"), ("Ravi", "He"))
UNITS = ("marbles", "apples", "stickers", "coins", "cards", "books", "shells", "pencils")
ADD_VERBS = ("buys", "finds", "gets")
SUB_VERBS = ("gives away", "loses", "sells")
OPS = ("add", "sub", "mul", "div")
SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


@dataclass
class LabConfig:
    """Which lab problems to make; the same config always makes the same problems."""

    n: int = field(default=50, metadata={"help": "number of problems"})
    min_steps: int = field(default=2, metadata={"help": "fewest operations in a problem"})
    max_steps: int = field(default=5, metadata={
        "help": "most operations in a problem (the difficulty knob, with max_value)"})
    max_value: int = field(default=100, metadata={
        "help": "largest starting quantity and largest intermediate value"})
    seed: int = field(default=0, metadata={"help": "random seed of the problem set"})

    def __post_init__(self) -> None:
        if self.n < 0:
            raise PrmkitError(f"lab: n must be >= 0, got {self.n}")
        if not 1 <= self.min_steps <= self.max_steps:
            raise PrmkitError(f"lab: need 1 <= min_steps <= max_steps, got {self.min_steps}, "
                              f"{self.max_steps}")
        if self.max_value < 20:
            raise PrmkitError(f"lab: max_value must be at least 20, got {self.max_value}")


@dataclass
class Op:
    """One operation of a problem: ``kind`` (add, sub, mul, div), its number and its wording."""

    kind: str
    k: int
    verb: str = ""      # add: buys/finds/gets; sub: gives away/loses/sells


@dataclass
class Problem:
    """A lab problem: who, what, the starting quantity and the chain of operations."""

    name: str
    pronoun: str
    unit: str
    start: int
    ops: list[Op]

    @property
    def values(self) -> list[int]:
        """The true quantity after each operation (exact: divisions always come out even)."""
        out, x = [], self.start
        for op in self.ops:
            x = apply(op.kind, x, op.k)
            out.append(x)
        return out

    @property
    def answer(self) -> int:
        return self.values[-1]

    def sentence(self, i: int) -> str:
        """The story's sentence of operation ``i``."""
        op, p, u = self.ops[i], self.pronoun, self.unit
        if op.kind == "add":
            return f"{p} {op.verb} {op.k} more {u}."
        if op.kind == "sub":
            return f"{p} {op.verb} {op.k} {u}."
        if op.kind == "mul":
            return f"The number of {u} is then multiplied by {op.k}."
        return f"{p} splits the {u} into {op.k} equal groups and keeps one group."

    def text(self) -> str:
        parts = [f"{self.name} has {self.start} {self.unit}."]
        parts += [self.sentence(i) for i in range(len(self.ops))]
        parts.append(f"How many {self.unit} does {self.pronoun.lower()} have now?")
        return " ".join(parts)


def apply(kind: str, x: int | Fraction, k: int) -> int | Fraction:
    if kind == "add":
        return x + k
    if kind == "sub":
        return x - k
    if kind == "mul":
        return x * k
    value = Fraction(x) / k
    return int(value) if value.denominator == 1 else value


def step_text(problem: Problem, i: int, before: int | Fraction, result: int | Fraction,
              kind: str | None = None) -> str:
    """The lab's wording of step ``i``: operation ``i`` applied to ``before``, giving ``result``.
    The lab policy writes its mistakes with this wording too (a wrong ``result`` or ``kind``)."""
    op, p, u = problem.ops[i], problem.pronoun, problem.unit
    a, c, sym = number(before), number(result), SYMBOL[kind or op.kind]
    if op.kind == "add":
        return f"{p} {op.verb} {op.k} more, so {p.lower()} has {a} {sym} {op.k} = {c} {u}."
    if op.kind == "sub":
        return f"{p} {op.verb} {op.k}, so {p.lower()} has {a} {sym} {op.k} = {c} {u}."
    if op.kind == "mul":
        return f"The number is multiplied by {op.k}: {a} {sym} {op.k} = {c} {u}."
    return f"One of the {op.k} groups has {a} {sym} {op.k} = {c} {u}."


def answer_text(value: int | Fraction) -> str:
    return f"The answer is {number(value)}."


def number(x: int | Fraction | float) -> str:
    """A number as the lab writes it: integers plainly, other values with up to 2 decimals."""
    if isinstance(x, Fraction) and x.denominator == 1:
        x = int(x)
    if isinstance(x, int):
        return str(x)
    return f"{float(x):.2f}".rstrip("0").rstrip(".")


def reference_steps(problem: Problem) -> list[str]:
    """The correct solution, one step per operation and the answer step."""
    steps, x = [], problem.start
    for i, op in enumerate(problem.ops):
        y = apply(op.kind, x, op.k)
        steps.append(step_text(problem, i, x, y))
        x = y
    return steps + [answer_text(x)]


# ---------------------------------------------------------------- making problems


def make_problem(rng: random.Random, n_ops: int, max_value: int) -> Problem:
    name, pronoun = rng.choice(NAMES)
    unit = rng.choice(UNITS)
    x = rng.randint(5, max(6, max_value // 3))
    start, ops = x, []
    for _ in range(n_ops):
        choices = ["add", "sub"]
        if 2 * x <= max_value:
            choices.append("mul")
        divisors = [k for k in range(2, 7) if x % k == 0 and x // k >= 2]
        if divisors:
            choices.append("div")
        kind = rng.choice(choices)
        if kind == "add":
            k = rng.randint(2, max(2, min(30, max_value - x)))
            op = Op("add", k, rng.choice(ADD_VERBS)) if x + k <= max_value else Op("sub", 2, "loses")
        elif kind == "sub":
            op = (Op("sub", rng.randint(2, min(30, x - 2)), rng.choice(SUB_VERBS)) if x >= 5
                  else Op("add", rng.randint(2, 9), rng.choice(ADD_VERBS)))
        elif kind == "mul":
            op = Op("mul", rng.randint(2, max(2, min(5, max_value // x))))
        else:
            op = Op("div", rng.choice(divisors))
        x = apply(op.kind, x, op.k)
        ops.append(op)
    return Problem(name, pronoun, unit, start, ops)


def make_problems(config: LabConfig | None = None) -> list[Record]:
    """``config.n`` problems as records, like a converted GSM8K file: the reference solution
    as ``steps``, every step labelled 1, ``is_correct`` true. ``meta["lab"]`` holds the number of
    operations and the true values, for reports only."""
    config = config or LabConfig()
    rng = random.Random(f"prmkit-lab-{config.seed}")
    records = []
    for i in range(config.n):
        n_ops = rng.randint(config.min_steps, config.max_steps)
        problem = make_problem(rng, n_ops, config.max_value)
        assert parse_problem(problem.text()) == problem
        steps = reference_steps(problem)
        records.append(Record(id=f"lab-{config.seed}-{i}", problem=problem.text(), steps=steps,
                              labels=[1.0] * len(steps), first_error=-1,
                              answer=str(problem.answer), reference=str(problem.answer),
                              is_correct=True,
                              meta={"lab": {"n_ops": n_ops, "start": problem.start,
                                            "values": problem.values}}))
    return records


# ---------------------------------------------------------------- reading problems back

_SENTENCES = [
    ("start", re.compile(r"^(?P<name>[A-Z][a-z]+) has (?P<k>\d+) (?P<unit>[a-z]+)\.$")),
    ("add", re.compile(r"^(?P<p>She|He) (?P<verb>buys|finds|gets) (?P<k>\d+) more (?P<unit>[a-z]+)\.$")),
    ("sub", re.compile(r"^(?P<p>She|He) (?P<verb>gives away|loses|sells) (?P<k>\d+) (?P<unit>[a-z]+)\.$")),
    ("mul", re.compile(r"^The number of (?P<unit>[a-z]+) is then multiplied by (?P<k>\d+)\.$")),
    ("div", re.compile(r"^(?P<p>She|He) splits the (?P<unit>[a-z]+) into (?P<k>\d+) equal groups "
                       r"and keeps one group\.$")),
    ("question", re.compile(r"^How many (?P<unit>[a-z]+) does (?P<p>she|he) have now\?$")),
]


def parse_problem(text: str) -> Problem | None:
    """The problem told by ``text``, or None when ``text`` is not a lab problem."""
    sentences = re.findall(r"[^.?]+[.?]", text.strip())
    if len(sentences) < 3:
        return None
    parsed = []
    for sentence in sentences:
        sentence = sentence.strip()
        for kind, pattern in _SENTENCES:
            m = pattern.match(sentence)
            if m:
                parsed.append((kind, m.groupdict()))
                break
        else:
            return None
    if parsed[0][0] != "start" or parsed[-1][0] != "question":
        return None
    first = parsed[0][1]
    name, unit, start = first["name"], first["unit"], int(first["k"])
    pronoun = parsed[-1][1]["p"].capitalize()
    ops = []
    for kind, g in parsed[1:-1]:
        if kind in ("start", "question") or g["unit"] != unit:
            return None
        ops.append(Op(kind, int(g["k"]), g.get("verb") or ""))
    if not ops:
        return None
    problem = Problem(name, pronoun, unit, start, ops)
    if any(isinstance(v, Fraction) for v in problem.values):
        return None
    return problem


def load_problem(text: str) -> Problem:
    problem = parse_problem(text)
    if problem is None:
        raise PrmkitError(f"not a lab problem: {text[:80]!r}")
    return problem


# ---------------------------------------------------------------- gold labels

_NUM = r"-?\d+(?:\.\d+)?"
# an arithmetic expression followed by "= result": numbers, + - * / x × ÷, parentheses, spaces
_EQUATION = re.compile(r"(?P<lhs>[\d.\s+\-*/x×÷()]*\d[\d.\s+\-*/x×÷()]*?)\s*=\s*\$?(?P<rhs>" + _NUM + ")")
_ANSWER = re.compile(r"answer\s+is\s*:?\s*\$?(?P<v>-?[\d,]*\d(?:\.\d+)?)", re.IGNORECASE)
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}


def evaluate(expression: str) -> Fraction | None:
    """The exact value of a plain arithmetic expression, or None when it is not one."""
    expression = expression.replace("×", "*").replace("÷", "/")
    expression = re.sub(r"(?<=[\d)\s])x(?=[\s\d(])", "*", expression).strip()
    if not expression or not re.search(r"[+\-*/]", expression.strip("-")):
        return None
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return None

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ZeroDivisionError
            return _BINOPS[type(node.op)](left, right)
        raise ValueError("not arithmetic")

    try:
        return walk(tree.body)
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


def check_step(step: str, values: Sequence[int], answer: int, at: int = 0) -> tuple[bool | None, int]:
    """``(verdict, at)``: whether one step is right, and how far along the true values it got.

    Right: every calculation in it is right, its last result is a true value at or after
    ``values[at]``, and a final answer it states is the answer. ``verdict`` is None when the step
    claims nothing checkable."""
    claims = False
    last = None
    for m in _EQUATION.finditer(step):
        lhs = evaluate(m.group("lhs"))
        if lhs is None:
            continue
        claims = True
        stated = Fraction(m.group("rhs"))
        if lhs != stated and abs(float(lhs) - float(stated)) > 0.006:  # 2-decimal rounding
            return False, at
        last = stated
    if last is not None:
        later = [j for j in range(at, len(values)) if values[j] == last]
        if not later:
            return False, at
        at = later[0]
    m = _ANSWER.search(step)
    if m:
        claims = True
        if Fraction(m.group("v").replace(",", "")) != answer:
            return False, at
    return (True if claims else None), at


def gold_labels(problem: str, steps: Sequence[str]) -> list[int]:
    """Exact labels of ``steps`` as a solution of lab problem ``problem``: 1 right, 0 wrong
    (:func:`check_step`); a step that claims nothing checkable takes the label of the step before
    it (1 at the start); every step after the first wrong one is 0. A wrong step whose result
    equals a later true value counts as right (it skipped ahead)."""
    p = load_problem(problem)
    values, answer = p.values, p.answer
    labels, ok, at = [], True, 0
    for step in steps:
        if ok:
            verdict, at = check_step(step, values, answer, at)
            ok = verdict is not False
        labels.append(int(ok))
    return labels


def gold_record(record: Record) -> Record:
    """``record`` with gold ``labels`` and ``first_error`` (-1 when every step is right)."""
    labels = gold_labels(record.problem, record.steps)
    fe = first_error_from_labels([float(x) for x in labels])
    return Record(**{**record.to_dict(), "labels": [float(x) for x in labels],
                     "first_error": -1 if fe is None else fe})


def has_wrong_step(record: Record) -> bool:
    """Whether a solution of a lab problem holds a wrong step by its gold labels."""
    return 0 in gold_labels(record.problem, record.steps)


def trace_error(records: Sequence[Record]) -> float | None:
    """Uesato et al. 2022's trace error: the fraction of the right-answer solutions among
    ``records`` that hold a wrong step (gold labels). None when no answer is right."""
    right = [r for r in records if r.is_correct]
    if not right:
        return None
    return sum(has_wrong_step(r) for r in right) / len(right)
