"""Tests for prmkit.answers: extraction, normalisation, keys and equivalence, on hand-made
cases and on the real GSM8K, MATH-500 and ProcessBench data."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from prmkit import answers
from prmkit.answers import answer_key, extract_answer, is_equivalent, normalize
from prmkit.shareddata import shared_data_dir

DATA = Path(shared_data_dir())
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared data not found")


@pytest.mark.parametrize("text, expected", [
    # \boxed and \fbox, balanced braces, the last one wins
    ("so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{\\sqrt{\\frac{1}{2}}}.", "\\sqrt{\\frac{1}{2}}"),
    ("first \\boxed{1}, then \\boxed{2}", "2"),
    ("The final answer is $\\boxed{\\{1, 2\\}}$.", "\\{1, 2\\}"),
    ("\\fbox{7} and a cut-off \\boxed{8", "7"),
    ("$\\boxed 5$", "5"),
    ("#### 3\nbut \\boxed{4}", "4"),
    # GSM8K
    ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
    ("#### 1,000", "1,000"),
    # answer phrases
    ("The answer is: 13520", "13520"),
    ("So the answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("The answer is 12. She has 3 left.", "12"),
    ("The answer is $x = 2$ or $x = 3$.", "$x = 2$ or $x = 3$"),
    ("Answer: $5.$", "5"),
    ("Answer: 1, 2, 3, ...", "1, 2, 3, ..."),
    ("We get 5.\n\n# Answer\n\n29", "29"),
    ("**Final Answer:** $-3$", "-3"),
    ("Answer: 1,000 dollars", "1,000 dollars"),
    ("She makes 9 * 2 = $<<9*2=18>>18\nA: 18", "18"),
    ("The answer is 4.\nAnswer: 5", "5"),
    # the last number
    ("so she has 5 apples left.", "5"),
    ("it costs $1,250.50 in total", "1,250.50"),
    ("x = -7", "-7"),
    ("16-3=13 eggs", "13"),
    ("no number here", None),
    ("", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("answer, expected", [
    ("\\boxed{10}", "10"),
    ("10.0", "10"),
    ("0.50", "0.5"),
    (".5", "0.5"),
    ("1,000", "1000"),
    ("-1,234.500", "-1234.5"),
    ("$ 18 $", "18"),
    ("\\$18.", "18"),
    ("\\dfrac{3}{4}", "\\frac{3}{4}"),
    ("\\tfrac34", "\\frac{3}{4}"),
    ("1/2", "\\frac{1}{2}"),
    ("\\sqrt 2", "\\sqrt{2}"),
    ("x = 3", "3"),
    ("\\theta=\\frac{\\pi}{2}", "\\frac{\\pi}{2}"),
    ("y = x = 3", "y=x=3"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("x \\rightarrow 1", "x\\rightarrow1"),
    ("5 \\text{ cm}", "5"),
    ("12\\text{ square units}", "12"),
    ("\\text{(C)}", "(C)"),
    ("30^\\circ", "30"),
    ("50\\%", "50"),
    ("1\\,000", "1000"),
    ("10{,}000", "10000"),
    ("10,\\!000", "10000"),
    ("(1,2)", "(1,2)"),
])
def test_normalize(answer, expected):
    assert normalize(answer) == expected


@pytest.mark.parametrize("answer, expected", [
    ("\\frac{1}{2}", "0.5"),
    ("0.5", "0.5"),
    ("1/2", "0.5"),
    ("\\dfrac{3}{4}", "0.75"),
    ("-\\frac{6}{4}", "-1.5"),
    ("\\frac{1}{3}", "1/3"),
    ("\\boxed{10}", "10"),
    ("10.00", "10"),
    ("1,000", "1000"),
    ("x=3", "3"),
    ("\\sqrt2", "\\sqrt{2}"),
    (None, None),
])
def test_answer_key(answer, expected):
    assert answer_key(answer) == expected


EQUAL = [
    ("\\frac{1}{2}", "0.5"),
    ("\\frac{1}{2}", "1/2"),
    ("1/2", "0.5"),
    ("\\boxed{10}", "10.0"),
    ("1,000", "1000"),
    ("\\dfrac{3}{4}", "0.75"),
    ("x=3", "3"),  # a leading "x =" is dropped
    ("\\sqrt{2}", "\\sqrt 2"),
    ("$18", "18"),
    ("x^2+1", "1+x^2"),                                  # math-verify only
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),    # math-verify only
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
]
NOT_EQUAL = [
    ("2", "3"),
    ("0.5", "0.05"),
    ("\\frac{1}{3}", "0.33"),
    ("\\sqrt{2}", "2"),
    ("(1,2)", "(2,1)"),
    ("x^2", "x^3"),
]


@pytest.mark.parametrize("a, b", EQUAL)
def test_equivalent(a, b):
    assert is_equivalent(a, b)
    assert is_equivalent(b, a)


@pytest.mark.parametrize("a, b", NOT_EQUAL)
def test_not_equivalent(a, b):
    assert not is_equivalent(a, b)
    assert not is_equivalent(b, a)


@pytest.mark.parametrize("a, b", [(None, None), (None, "3"), ("3", None), ("", ""), (" $ ", "$")])
def test_missing_answers_equal_nothing(a, b):
    assert not is_equivalent(a, b)


def test_equal_keys_are_equivalent():
    for a, b in EQUAL + NOT_EQUAL:
        if answer_key(a) == answer_key(b):
            assert is_equivalent(a, b)


def test_is_equivalent_works_in_threads():
    """math-verify's signal-based timeout only works in the main thread; prmkit turns it off
    elsewhere, so worker threads get the same answers and no error."""
    pairs = EQUAL + NOT_EQUAL
    with ThreadPoolExecutor(max_workers=4) as pool:
        in_threads = list(pool.map(lambda pair: is_equivalent(*pair), pairs))
    assert in_threads == [True] * len(EQUAL) + [False] * len(NOT_EQUAL)


class _BrokenMathVerify:
    """A math-verify whose parser raises, or times out (its TimeoutException is a
    BaseException)."""

    def __init__(self, error: BaseException):
        self.error = error

    def parse(self, *args, **kwargs):
        raise self.error

    def verify(self, *args, **kwargs):
        raise self.error


@pytest.mark.parametrize("error", [RuntimeError("boom"), type("TimeoutException", (BaseException,), {})()])
def test_math_verify_failures_fall_back_to_keys(monkeypatch, error):
    answers._parse.cache_clear()
    monkeypatch.setattr(answers, "_math_verify", lambda: _BrokenMathVerify(error))
    try:
        assert is_equivalent("1,000", "1000")
        assert is_equivalent("\\frac{1}{2}", "0.5")
        assert not is_equivalent("x^2+1", "1+x^2")  # only math-verify knows these are equal
    finally:
        answers._parse.cache_clear()


# ---------------------------------------------------------------- real data


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8")]


@needs_data
def test_gsm8k_references():
    rows = _jsonl(DATA / "gsm8k" / "test.jsonl")
    assert len(rows) == 1319
    for row in rows:
        extracted = extract_answer(row["answer"])
        assert extracted == row["answer"].split("####")[-1].strip()
        assert is_equivalent(extracted, extracted)


@needs_data
@pytest.mark.parametrize("model", ["6b_finetuning", "6b_verification", "175b_finetuning",
                                   "175b_verification"])
def test_gsm8k_model_solutions_agree_with_is_correct(model):
    """Measured: 1319/1319 (100%) agreement with `is_correct` for each of the 4 models."""
    rows = _jsonl(DATA / "gsm8k" / "example_model_solutions.jsonl")
    agree = sum(
        is_equivalent(extract_answer(row["ground_truth"]), extract_answer(row[model]["solution"]))
        == row[model]["is_correct"]
        for row in rows)
    assert agree / len(rows) >= 0.99, agree


@needs_data
def test_math500_solutions_give_the_reference_answer():
    """Measured: 500/500 extracted answers are equivalent to `answer`."""
    rows = _jsonl(DATA / "math500" / "test500.jsonl")
    agree = sum(is_equivalent(row["answer"], extract_answer(row["solution"])) for row in rows)
    assert agree / len(rows) >= 0.98, agree


@needs_data
def test_math500_different_answers_are_not_merged():
    """Random pairs of MATH-500 reference answers: math-verify finds no equality that the
    keys miss (measured on 2000 pairs: none), so it does not merge distinct answers."""
    answers_ = [row["answer"] for row in _jsonl(DATA / "math500" / "test500.jsonl")]
    rng = random.Random(0)
    for _ in range(300):
        a, b = rng.choice(answers_), rng.choice(answers_)
        assert is_equivalent(a, b) == (answer_key(a) == answer_key(b)), (a, b)


@needs_data
def test_processbench_final_answers_agree_with_labels():
    """ProcessBench-dev solutions to GSM8K / MATH-500 problems, graded against the reference:
    measured 47/48 agree with `final_answer_correct` (the one miss is labelled wrong although
    its boxed 59 is the reference answer)."""
    references = {row["question"].strip(): row["answer"].split("####")[-1].strip()
                  for row in _jsonl(DATA / "gsm8k" / "test.jsonl")}
    references.update({row["problem"].strip(): row["answer"]
                       for row in _jsonl(DATA / "math500" / "test500.jsonl")})
    agree = total = 0
    for split in ("gsm8k", "math"):
        for record in json.loads((DATA / "processbench_dev" / f"{split}.json").read_text()):
            reference = references.get(record["problem"].strip())
            if reference is None:
                continue
            total += 1
            graded = is_equivalent(reference, extract_answer("\n\n".join(record["steps"])))
            agree += graded == record["final_answer_correct"]
    assert total == 48
    assert agree >= 46
