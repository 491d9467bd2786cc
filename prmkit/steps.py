"""Splitting a solution text into steps, and joining steps back into text.

Rules:

``"blank-lines"``
    Steps are separated by an empty line; the separator is ``"\\n\\n"``. A line of spaces or
    tabs is not a boundary (clean it first with ``re.sub(r"(?m)^[ \\t]+$", "", text)``).
``"lines"``
    Every line is a step; the separator is ``"\\n"``. Empty lines are not steps.
``"step-markers"``
    A step starts at each line that begins with a marker such as ``Step 1:``, ``**Step 3:**``,
    ``## Step 4`` or ``- step 5)`` (case-insensitive; indentation, ``#``, a bullet and emphasis
    allowed before ``Step`` and a number); the marker stays in its step and the separator is
    the ``"\\n"`` before it. Text before the first marker is a step of its own unless it is only
    whitespace (then it starts step 1). A text without markers is one step.
``"auto"``
    ``"step-markers"`` with at least 2 markers, else ``"blank-lines"`` with a blank line, else
    ``"lines"``; :func:`detect_rule` tells which, so the steps can be joined with that rule.

Guarantees:

* ``join_steps(split_steps(t, r), r) == t`` for every text with a non-whitespace character and
  every rule (``"auto"``: join with ``detect_rule(t)``); an empty or blank text gives ``[]``.
* The separator is taken from the end of each gap (a run of whitespace holding it): whitespace
  before it stays at the end of the previous step, whitespace after it starts the next
  (``"a\\n\\n\\nb"`` by blank lines is ``["a\\n", "b"]``). The text's leading and trailing
  whitespace stay in the first and last step.
* For a text in normal form (no outer whitespace, every gap exactly the separator) every step
  is stripped, and ``split_steps(join_steps(steps, r), r) == steps`` for non-empty, stripped
  steps holding no separator (for step-markers: each but an introduction starts with a marker).
* ``"\\r\\n"`` is not a separator; convert it to ``"\\n"`` first.
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
