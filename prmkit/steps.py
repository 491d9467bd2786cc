"""Splitting a solution text into steps, and joining steps back into text.

A PRM scores a solution step by step, so every text that enters prmkit (a generated solution,
a dataset whose solutions are one string) is cut into steps by one of these rules:

``"blank-lines"``
    Steps are separated by a blank line; the separator is ``"\\n\\n"``. A blank line is an
    *empty* line: a line holding only spaces or tabs is not a step boundary, because the text
    between two steps must be exactly the separator for the round trip to hold (replace such
    lines with ``re.sub(r"(?m)^[ \\t]+$", "", text)`` first if they should count).
``"lines"``
    Every line is a step; the separator is ``"\\n"``. Empty lines are not steps.
``"step-markers"``
    A step starts at each line that begins with a marker such as ``Step 1:``, ``Step 2.``,
    ``**Step 3:**``, ``## Step 4`` or ``- step 5)`` (case-insensitive; optional indentation,
    ``#`` heading, list bullet and ``**`` / ``*`` / ``__`` emphasis before the word ``Step`` and a
    number). The marker stays inside its step. The separator is ``"\\n"``: the line break just
    before a marker line. Text before the first marker becomes a step of its own (an
    introduction can be wrong and deserves a score) unless it is only whitespace, in which case
    it is kept at the start of step 1. A text without markers is one step.
``"auto"``
    ``"step-markers"`` if the text has at least 2 markers, else ``"blank-lines"`` if it has a
    blank line (``"\\n\\n"`` between non-space text), else ``"lines"``. :func:`detect_rule` tells
    which rule ``"auto"`` picks, so that the steps can be joined with the same rule.

What is kept where (the exact guarantee):

* Whitespace is never dropped, so ``join_steps(split_steps(t, r), r) == t`` for every text
  ``t`` that contains a non-whitespace character, for every rule ``r`` (for ``"auto"``, join
  with ``detect_rule(t)``). A text that is empty or only whitespace has no steps: ``[]``.
* Between two steps, the whitespace around a boundary is a *gap* (a maximal run of whitespace
  that contains the separator). The separator is taken from the *end* of the gap: extra
  whitespace before it (a third newline, trailing spaces) stays at the end of the previous
  step, and whitespace after it (the indentation of the next line) starts the next step.
  ``"a\\n\\n\\nb"`` splits by blank lines into ``["a\\n", "b"]``.
* Leading whitespace of the text stays in the first step and trailing whitespace in the last
  (``"a\\nb\\n"`` splits by lines into ``["a", "b\\n"]``). Use ``split_steps(text.strip())``
  for steps without them.
* A text is in a rule's *normal form* when it has no leading or trailing whitespace and every
  gap is exactly the separator. Then every step is free of leading and trailing whitespace,
  and conversely ``split_steps(join_steps(steps, r), r) == steps`` for steps that are
  non-empty, stripped and hold no separator (for step-markers: each step but a first
  introduction starts with a marker and none holds a marker line elsewhere).
* Windows line breaks (``"\\r\\n"``) are not separators; convert them to ``"\\n"`` first.
"""

from __future__ import annotations

import re

from prmkit.errors import PrmkitError

# what a policy is asked to write: steps one per line, the calculation in each, an answer line
# (the generation prompts, and the implicit PRM's chat format, which reads the policy's prompt)
INSTRUCTION = ("Solve the math problem step by step. Write one short step per line, with the "
               "calculation in it. Finish with a last line of the form: The answer is N.")

RULES = ("auto", "blank-lines", "lines", "step-markers")

_SEPARATORS = {"blank-lines": "\n\n", "lines": "\n", "step-markers": "\n"}

# A marker at the start of a line: indentation, then an optional heading ("##") or list bullet
# ("- ", "* "), optional emphasis ("**", "*", "__", "_"), the word "step" and a number.
_MARKER = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*|[-*+][ \t]+)?(?:\*\*|__|\*|_)?[ \t]*step[ \t]*\d+(?![0-9A-Za-z])",
    re.IGNORECASE | re.MULTILINE,
)
_WHITESPACE = re.compile(r"\s+")


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise PrmkitError(f"unknown step rule {rule!r}; known rules: {', '.join(RULES)}")


def separator(rule: str) -> str:
    """The text that :func:`join_steps` puts between steps under ``rule``.

    ``"auto"`` has no single separator: use ``separator(detect_rule(text))``.
    """
    _check_rule(rule)
    if rule == "auto":
        raise PrmkitError("rule 'auto' has no single separator; resolve it with detect_rule(text)")
    return _SEPARATORS[rule]


def count_markers(text: str) -> int:
    """How many step markers (``Step 1:``, ``**Step 2.**``, ...) start a line of ``text``."""
    return len(_MARKER.findall(text))


def detect_rule(text: str) -> str:
    """The rule that ``"auto"`` uses for ``text`` (never ``"auto"`` itself)."""
    if count_markers(text) >= 2:
        return "step-markers"
    if "\n\n" in text.strip():
        return "blank-lines"
    return "lines"


def split_steps(text: str, rule: str = "auto") -> list[str]:
    """Split ``text`` into steps by ``rule`` (see the module docstring).

    Raises :class:`PrmkitError` for an unknown rule. Returns ``[]`` for a text that is empty or
    only whitespace; otherwise every step holds a non-whitespace character and
    ``join_steps(steps, rule) == text`` (for ``"auto"``, join with ``detect_rule(text)``).
    """
    _check_rule(rule)
    if not text.strip():
        return []
    if rule == "auto":
        rule = detect_rule(text)
    if rule == "step-markers":
        cuts = _marker_cuts(text)
    else:
        cuts = _gap_cuts(text, _SEPARATORS[rule])
    sep_len = len(_SEPARATORS[rule])
    steps, start = [], 0
    for cut in cuts:
        steps.append(text[start:cut])
        start = cut + sep_len
    steps.append(text[start:])
    return steps


def join_steps(steps: list[str], rule: str) -> str:
    """Join ``steps`` into one text with the separator of ``rule``; the inverse of
    :func:`split_steps`. ``"auto"`` is refused: join with the rule that
    :func:`detect_rule` picked."""
    return separator(rule).join(steps)


def _gap_cuts(text: str, sep: str) -> list[int]:
    """Where separators start: in each gap between non-space text that holds ``sep``, its
    last occurrence."""
    cuts = []
    for gap in _WHITESPACE.finditer(text):
        if gap.start() == 0 or gap.end() == len(text):
            continue  # leading and trailing whitespace belong to the first and last step
        at = gap.group().rfind(sep)
        if at >= 0:
            cuts.append(gap.start() + at)
    return cuts


def _marker_cuts(text: str) -> list[int]:
    """Where separators start: the line break just before each marker line, except before a
    first marker that only whitespace precedes."""
    starts = [m.start() for m in _MARKER.finditer(text)]
    if starts and not text[: starts[0]].strip():
        starts = starts[1:]
    return [start - 1 for start in starts if start > 0]
