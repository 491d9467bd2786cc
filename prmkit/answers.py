"""Final answers: extraction from a solution, equivalence, and grouping keys.

:func:`extract_answer` takes the *last* match of the first kind that matches:

1. ``\\boxed{...}`` or ``\\fbox{...}`` with balanced braces;
2. ``#### N`` (GSM8K references);
3. the last answer phrase: ``The answer is[:] X``, ``Final answer: X``, ``Answer: X``,
   ``# Answer`` then ``X`` on a later line (PRM800K), ``A: X`` at a line's start; ``X`` runs to
   the end of its line or sentence;
4. the last number in the text.

It strips whitespace, a trailing period and ``$...$`` / ``\\(...\\)``, nothing else (``"1,000"``
stays); ``None`` when nothing is found.

:func:`is_equivalent`: equal :func:`answer_key` values, or equal by math-verify (Hugging Face's
symbolic grader: ``\\frac{1}{2}``, ``0.5`` and ``1/2`` are equal). ``None`` or an empty answer
equals nothing, not even itself. Errors and timeouts inside math-verify count as "not equal".
math-verify's 5-second limit uses ``signal.alarm``, so it applies in the main thread only;
elsewhere there is no limit (use a process pool for a hard one).

:func:`normalize` (in the spirit of Hendrycks et al.'s MATH grader) unwraps ``\\boxed``, drops
``$``, spaces, ``\\left``/``\\right``, LaTeX spacing, ``\\text{...}`` units after a number,
degree and percent signs, a leading ``x =``, thousands commas and trailing decimal zeros, and
rewrites ``\\dfrac``/``\\tfrac``, ``\\frac12``, ``\\sqrt2`` and ``a/b``: so ``x=3``, ``50\\%`` and
``3 \\text{ cm}`` equal ``3``, ``50`` and ``3``.

:func:`answer_key` groups a majority vote: plain numbers get a canonical form (``10.0`` ->
``10``, ``\\frac{1}{2}`` -> ``0.5``, ``\\frac{1}{3}`` -> ``1/3``), anything else
:func:`normalize`. Equal keys mean equivalent answers, not the converse (``x^2+1`` and
``1+x^2``; ``0.333`` and ``\\frac{1}{3}``): merge groups with :func:`is_equivalent` where it
matters.
"""

from __future__ import annotations

import functools
import re
import threading
from fractions import Fraction

from prmkit.errors import PrmkitError

MATH_VERIFY_TIMEOUT_S = 5

# ---------------------------------------------------------------- extraction


def _last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces (or of
    ``\\boxed 5``), or None."""
    for match in reversed(list(re.finditer(r"\\(?:boxed|fbox)\b", text))):
        rest = text[match.end():]
        if not rest.lstrip().startswith("{"):
            bare = re.match(r" +([^\s$]+)", rest)  # "\boxed 5"
            if bare:
                return bare.group(1)
            continue
        start = match.end() + rest.index("{") + 1
        depth, i = 1, start
        while i < len(text):
            if text[i] == "\\":
                i += 2  # "\{" and "\}" are literal braces
                continue
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i]
            i += 1
    return None


_GSM8K = re.compile(r"####[ \t]*([^\n]*)")
_PHRASES = [
    re.compile(r"the\s+(?:final\s+)?answer\s+is\s*:?[ \t]*([^\n]+)", re.IGNORECASE),
    re.compile(r"^[ \t*#]*(?:final\s+)?answer[ \t*]*:[ \t*]*([^\n]+)", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^#+[ \t]*answer[ \t]*\n\s*([^\n]+)", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^A:[ \t]*([^\n]+)", re.MULTILINE),
]
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?<![\d.,])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")


def _clean(answer: str) -> str:
    """Strip whitespace, a trailing period and math delimiters around an extracted answer."""
    answer = _strip_period(answer)
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        inner = answer[len(left): len(answer) - len(right)]
        if (answer.startswith(left) and answer.endswith(right)
                and len(answer) >= len(left) + len(right) and right not in inner):
            return _strip_period(inner)
    return answer


def _strip_period(answer: str) -> str:
    """Strip whitespace and one final period (not the last dot of an ellipsis)."""
    return re.sub(r"(?<!\.)\.$", "", answer.strip()).strip()


def _phrase_answer(text: str) -> str | None:
    """The answer after the last answer phrase, up to the end of its line or sentence."""
    matches = [m for pattern in _PHRASES for m in pattern.finditer(text)]
    if not matches:
        return None
    found = max(matches, key=lambda m: m.start(1)).group(1)
    return re.split(r"\.\s", found, maxsplit=1)[0]


def extract_answer(text: str) -> str | None:
    """The final answer of a solution text (see the module docstring for the order), cleaned
    but not normalised; None if the text has no answer and no number."""
    for found in (_last_boxed(text),
                  (_GSM8K.findall(text) or [None])[-1],
                  _phrase_answer(text),
                  (_NUMBER.findall(text) or [None])[-1]):
        if found is not None and _clean(found):
            return _clean(found)
    return None


# ---------------------------------------------------------------- normalisation

_SUBSTITUTIONS = [
    (r"\\left(?![a-zA-Z])|\\right(?![a-zA-Z])", ""),
    (r"\\[!,;: ]|~", " "),                               # LaTeX spacing
    (r"\\[dt]frac", r"\\frac"),
    (r"\{,\}", ","),                                    # 10{,}000 -> 10,000
    (r"\^\s*\{?\s*\\circ\s*\}?|°", ""),                    # degrees
    (r"\\%|%|\\\$|\$", ""),
    (r"^(.*\d)\s*\\(?:text|mbox|mathrm)\{\s*[a-zA-Z][a-zA-Z ]*\}(?:\^\{?\d\}?)?$", r"\1"),  # units
    (r"\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}", r"\1"),
    (r"\s+", ""),
    (r"\\sqrt(\w)", r"\\sqrt{\1}"),                      # \sqrt2 -> \sqrt{2}
    (r"\\frac(\w)(\w)", r"\\frac{\1}{\2}"),              # \frac12 -> \frac{1}{2}
    (r"\\frac(\w)\{", r"\\frac{\1}{"),
    (r"\\frac(\{[^{}]*\})(\w)", r"\\frac\1{\2}"),
    (r"^(-?\d+)/(\d+)$", r"\\frac{\1}{\2}"),             # 1/2 -> \frac{1}{2}
    (r"^(?:[a-zA-Z]|\\[a-zA-Z]+)=(?=[^=]*$)", ""),       # x=3 -> 3
    (r"^(-?)\.(\d)", r"\g<1>0.\2"),                      # .5 -> 0.5
]


def normalize(answer: str) -> str:
    """A canonical string for ``answer`` (see the module docstring for what it drops)."""
    answer = answer.strip()
    boxed = _last_boxed(answer)
    if boxed is not None:
        answer = boxed
    for pattern, replacement in _SUBSTITUTIONS:
        answer = re.sub(pattern, replacement, answer)
    answer = _strip_period(answer)
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", answer):
        answer = answer.replace(",", "")                 # 1,000 -> 1000
    if re.fullmatch(r"-?\d+\.\d+", answer):
        answer = answer.rstrip("0").rstrip(".")          # 10.0 -> 10, 0.50 -> 0.5
    return "0" if answer == "-0" else answer


# ---------------------------------------------------------------- keys and equivalence

_FRAC = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}")


def _as_fraction(normalized: str) -> Fraction | None:
    """The value of a normalised plain number or simple fraction, else None."""
    if re.fullmatch(r"-?\d+(?:\.\d+)?", normalized):
        return Fraction(normalized)
    match = _FRAC.fullmatch(normalized)
    if match and int(match.group(3)) != 0:
        value = Fraction(int(match.group(2)), int(match.group(3)))
        return -value if match.group(1) else value
    return None


def _number_string(value: Fraction) -> str:
    """An exact decimal if ``value`` has one, else ``p/q``."""
    if value.denominator == 1:
        return str(value.numerator)
    digits, denominator = 1, value.denominator
    while 10 ** digits % denominator and digits < 64:
        digits += 1
    if 10 ** digits % denominator:
        return f"{value.numerator}/{value.denominator}"
    scaled = abs(value.numerator) * (10 ** digits // denominator)
    whole, fraction = divmod(scaled, 10 ** digits)
    sign = "-" if value < 0 else ""
    return f"{sign}{whole}.{str(fraction).rjust(digits, '0').rstrip('0')}"


def answer_key(answer: str | None) -> str | None:
    """A key for grouping ``answer`` with equivalent answers (majority vote); None stays None.
    Limits: see the module docstring."""
    if answer is None:
        return None
    normalized = normalize(answer)
    value = _as_fraction(normalized)
    return normalized if value is None else _number_string(value)


def is_equivalent(a: str | None, b: str | None) -> bool:
    """Whether answers ``a`` and ``b`` are the same (module docstring; math-verify is tried
    both ways round)."""
    if a is None or b is None:
        return False
    key_a, key_b = answer_key(a), answer_key(b)
    if not key_a or not key_b:
        return False
    if key_a == key_b:
        return True
    return _math_verify_equal(_for_math_verify(a), _for_math_verify(b))


def _for_math_verify(answer: str) -> str:
    """The answer as a boxed LaTeX expression, the form math-verify extracts first."""
    answer = _clean(answer)
    boxed = _last_boxed(answer)
    return "\\boxed{" + (answer if boxed is None else boxed) + "}"


def _timeout() -> int | None:
    """math-verify's time limit: only the main thread can use signal.alarm."""
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=1)
def _math_verify():
    try:
        import math_verify
    except ImportError as error:
        raise PrmkitError("answer equivalence needs math-verify: pip install math-verify==0.9.0") from error
    return math_verify


@functools.lru_cache(maxsize=4096)
def _parse(answer: str, timeout: int | None) -> tuple:
    try:
        return tuple(_math_verify().parse(answer, parsing_timeout=timeout))
    except PrmkitError:
        raise
    except BaseException as error:  # math-verify's TimeoutException is a BaseException
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        return ()


def _math_verify_equal(a: str, b: str) -> bool:
    timeout = _timeout()
    parsed_a, parsed_b = _parse(a, timeout), _parse(b, timeout)
    if not parsed_a or not parsed_b:
        return False
    try:
        verify = _math_verify().verify
        return bool(verify(list(parsed_a), list(parsed_b), timeout_seconds=timeout)
                    or verify(list(parsed_b), list(parsed_a), timeout_seconds=timeout))
    except BaseException as error:
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        return False
