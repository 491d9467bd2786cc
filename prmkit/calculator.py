"""A calculator's checks written into the steps a PRM reads (the step format's ``calculator``).

Verifiers that read a calculator: Cobbe et al. 2021 ("Training Verifiers to Solve Math Word
Problems") annotate every calculation; Li et al. 2024 ("Tool-Augmented Reward Modeling") give a
reward model tool outputs. :func:`annotate` finds each equation of a step whose left side is
plain arithmetic and whose right side is a number, evaluates the left side exactly, and writes
the value after a stated number that is wrong (rounded as stated)::

    She gives away 3, so she has 11 - 3 = 9 shells.
    -> She gives away 3, so she has 11 - 3 = 9 [calculator: 8] shells.

A right equation is left as it is. The note is a pure function of the step's text, so training,
prefix sharing, search and the server read the same text.

An equation is ``LEFT = RIGHT``: LEFT the longest run of numbers joined by ``+ - * / × ÷ ·``
(or LaTeX ``\\times \\cdot \\div``), with parentheses, spaces and ``$``, holding an operator;
RIGHT one number not followed by another operator or ``%``. Numbers may have thousands commas
and decimals. A stated number passes within half a unit of its last written digit (``10 / 3 =
3.33`` and ``7 / 2 = 3`` pass, ``7 / 2 = 4.5`` does not). Variables, powers, percentages,
unbalanced parentheses and division by zero are not checked.
"""

from __future__ import annotations

import re
from fractions import Fraction

NOTE = " [calculator: {value}]"
_LATEX = (("\\times", "*"), ("\\cdot", "*"), ("\\div", "/"), ("×", "*"), ("÷", "/"), ("·", "*"))
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
# the right side: spaces, an optional $, a whole number (not followed by a letter, a digit, a
# bracket or a power: ``= 2p^2``, ``= 2(a + 1)``), then not another operator or a percent
_RIGHT = re.compile(r"\s*\$?\s*(-?(?:" + _NUMBER + r"))(?![\w(\[{^]|[.,]\d)"
                    r"(?!\s*(?:[-+*/×÷·%^]|\\times|\\cdot|\\div))")
_TOKEN = re.compile(r"\s*(" + _NUMBER + r"|[-+*/()])")
_LEFT_CHARS = set("0123456789.,+-*/()$ \t")
_GLUE = set("_^}])|\\")        # before a run, these make it part of a longer expression
_OPERATORS = ("+", "-", "*", "/")
_REMAINDER = re.compile(r"\s*(?:with a |and a )?(?:remainder|r\b|R\b)")   # 194 / 11 = 17 R 7


def annotate(step: str) -> str:
    """``step`` with a calculator note after every equation whose stated result is wrong."""
    out, last = [], 0
    for eq in re.finditer("=", step):
        right = _RIGHT.match(step, eq.end())
        if right is None or step[eq.start() - 1:eq.start()] in ("<", ">", "!", "="):
            continue
        value = evaluate(step[:eq.start()])
        if value is None:
            continue
        stated = right.group(1)
        if not agrees(stated, value) and not _REMAINDER.match(step, right.end()):
            out.append(step[last:right.end()])
            out.append(NOTE.format(value=written(value, stated)))
            last = right.end()
    out.append(step[last:])
    return "".join(out)


def evaluate(before: str) -> Fraction | None:
    """The exact value of the arithmetic that ends ``before`` (its run of numbers, operators,
    parentheses and spaces, from the last stray comma or dot on), or None unless that run is
    one expression with at least one operator and stands on its own: not glued to a letter,
    a subscript or a power before it (``b_2 - 3``, ``y^2 + 38``, ``2x - 3``, ``a \\cdot 15``)."""
    text = before
    for latex, plain in _LATEX:
        text = text.replace(latex, plain)
    start = len(text)
    while start > 0 and text[start - 1] in _LEFT_CHARS:
        start -= 1
    if text[start - 1:start + 1] == "\\(":        # LaTeX's \( opens inline maths
        start += 1
    run = text[start:].replace("$", " ")
    tokens = _tokens(run)
    if not tokens:
        return None
    glued = start > 0 and (text[start - 1].isalnum() or text[start - 1] in _GLUE)
    word = re.search(r"[A-Za-z]\s*$", text[:start]) is not None
    if glued and (tokens[0] in _OPERATORS or not run[:1].isspace()) or word and tokens[0] == "(":
        return None        # part of a longer expression than arithmetic, or f (x), a choose (b)
    while tokens and tokens[0] in ("+", "*", "/", ")"):   # markup before it (**Step 1:**)
        tokens = tokens[1:]
    return _parse(tokens) if tokens else None


def agrees(stated: str, value: Fraction) -> bool:
    """Whether ``stated`` is ``value`` rounded to the last digit written."""
    number = Fraction(stated.replace(",", ""))
    decimals = len(stated.split(".", 1)[1]) if "." in stated else 0
    return abs(number - value) <= Fraction(1, 2 * 10 ** decimals)


def written(value: Fraction, stated: str) -> str:
    """The value as the note writes it: exact when it is whole, else to the stated number's
    decimals (at least 2), trailing zeros dropped."""
    if value.denominator == 1:
        return str(value.numerator)
    decimals = max(2, len(stated.split(".", 1)[1]) if "." in stated else 0)
    return f"{float(value):.{decimals}f}".rstrip("0").rstrip(".")


def _tokens(run: str) -> list[str] | None:
    out, pos = [], 0
    run = run.rstrip()
    while pos < len(run):
        m = _TOKEN.match(run, pos)
        if m is None:
            if run[pos:].strip() == "":
                break
            # a stray comma or dot (a list, the end of a clause): the expression starts after it
            out, pos = [], pos + 1
            continue
        out.append(m.group(1))
        pos = m.end()
    return out or None


def _is_number(token: str) -> bool:
    return token[0].isdigit() or token[0] == "."


def _parse(tokens: list[str]) -> Fraction | None:
    """Evaluate ``tokens`` as sum/product/parentheses with unary minus; None unless they are
    exactly one expression with at least one binary operator."""
    parser = _Parser(tokens)
    try:
        value = parser.sum()
    except (ValueError, ZeroDivisionError, IndexError):
        return None
    if parser.pos != len(tokens) or not parser.binary:
        return None
    return value


class _Parser:
    """Recursive descent over number and operator tokens."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.pos, self.binary = tokens, 0, False

    def sum(self) -> Fraction:
        value = self.product()
        while self.pos < len(self.tokens) and self.tokens[self.pos] in "+-":
            op = self.tokens[self.pos]
            self.pos += 1
            right = self.product()
            value = value + right if op == "+" else value - right
            self.binary = True
        return value

    def product(self) -> Fraction:
        value = self.unary()
        while self.pos < len(self.tokens) and self.tokens[self.pos] in ("*", "/"):
            op = self.tokens[self.pos]
            self.pos += 1
            right = self.unary()
            value = value / right if op == "/" else value * right
            self.binary = True
        return value

    def unary(self) -> Fraction:
        token = self.tokens[self.pos]
        if token == "-":
            self.pos += 1
            return -self.unary()
        if token == "(":
            self.pos += 1
            value = self.sum()
            if self.tokens[self.pos] != ")":
                raise ValueError("unbalanced")
            self.pos += 1
            return value
        if not _is_number(token):
            raise ValueError(token)
        self.pos += 1
        return Fraction(token.replace(",", ""))
