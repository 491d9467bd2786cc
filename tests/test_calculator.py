"""The calculator's notes (prmkit.calculator) and the step format's ``calculator`` field.

Every expected note below was worked out by hand."""

from fractions import Fraction

import pytest

from prmkit.calculator import agrees, annotate, evaluate
from prmkit.stepformat import StepFormat, get_format
from tiny import tokenizer

CASES = [
    # right equations are left alone
    ("She gives away 3, so she has 11 - 3 = 8 shells.", None),
    ("One of the 4 groups has 14 / 4 = 3.5 shells.", None),
    ("So (2 + 3) * 4 = 20 apples.", None),
    ("He pays $1,200 + $300 = $1,500 in total.", None),
    ("Each costs 10 / 3 = 3.33 dollars.", None),           # rounded as written
    ("She keeps 7 / 2 = 3 whole cookies.", None),          # to the unit written
    ("$3 \\times 4 = 12$ and $12 \\div 4 = 3$.", None),
    # wrong ones get the value
    ("She gives away 3, so she has 11 - 3 = 9 shells.",
     "She gives away 3, so she has 11 - 3 = 9 [calculator: 8] shells."),
    ("One of the 4 groups has 14 / 4 = 4.5 shells.",
     "One of the 4 groups has 14 / 4 = 4.5 [calculator: 3.5] shells."),
    ("He pays $1,200 + $300 = $1,600 in total.",
     "He pays $1,200 + $300 = $1,600 [calculator: 1500] in total."),
    ("First 5 - 8 = -2, then 2 * 3 = 6.", "First 5 - 8 = -2 [calculator: -3], then 2 * 3 = 6."),
    ("$3 \\times 4 = 13$", "$3 \\times 4 = 13 [calculator: 12]$"),
    ("**Step 1:** 2 + 3 = 6", "**Step 1:** 2 + 3 = 6 [calculator: 5]"),
    ("It costs 5. 3 + 4 = 8 now.", "It costs 5. 3 + 4 = 8 [calculator: 7] now."),
    ("Each is 10 / 3 = 3.5 kg.", "Each is 10 / 3 = 3.5 [calculator: 3.33] kg."),
    # a chain: the last link is checked, an equality of two expressions is not
    ("2 + 3 = 5 + 4 = 10", "2 + 3 = 5 + 4 = 10 [calculator: 9]"),
    # not arithmetic, or not checkable: no note
    ("x = 5", None), ("2x - 3 = 7", None), ("2(3 + 4) = 15", None), ("so 2^3 = 9", None),
    ("50% of 4 = 3", None), ("1 + 1 = 2%", None), ("a <= 5 and 3 + 3 >= 7", None),
    ("1 / 0 = 3", None), ("(3 + 4 = 8", None), ("The answer is 42.", None),
    ("\\frac{1}{2} = 0.7", None), ("194 / 11 = 17 with a remainder of 7", None),
    ("(6 + 4 - 1) choose (4 - 1) = 9 choose 3", None), ("so b_2 - 3 = 17", None),
    ("x^2 + y^2 + 38 = 196", None), ("a \\cdot 15 + 0 = 225", None), ("\\(2 + 3 = 6\\)", "\\(2 + 3 = 6 [calculator: 5]\\)"),
    ("= 147^2 - 4 \\cdot 147 + 1 = 21609 - 588 + 1", None), ("so 2 = 2p^2 + 4", None),
]


@pytest.mark.parametrize("step,expected", CASES)
def test_annotate_by_hand(step, expected):
    assert annotate(step) == (step if expected is None else expected)


def test_evaluate_and_agrees_by_hand():
    assert evaluate("so she has 11 - 3 ") == 8
    assert evaluate("has 14 / 4 ") == Fraction(7, 2)
    assert evaluate("-(2 - 5) * 2 ") == 6
    assert evaluate("she has 20 ") is None          # no operator: nothing to check
    assert agrees("3.33", Fraction(10, 3)) and not agrees("3.3", Fraction(10, 4))
    assert agrees("1,500", Fraction(1500)) and not agrees("1501", Fraction(1500))


def test_the_format_reads_the_notes_and_keeps_them():
    """A calculator format encodes the annotated steps exactly as the plain format encodes
    them written out, and the field survives a save and a load."""
    tok = tokenizer()
    plain = get_format("prmkit")
    calc = StepFormat.from_dict({**plain.to_dict(), "calculator": True})
    steps = ["She has 11 - 3 = 9 shells.", "Then 9 + 1 = 10 shells.", "The answer is 10."]
    noted = [annotate(s) for s in steps]
    assert noted[0] != steps[0] and noted[1:] == steps[1:]
    got, want = calc.bind(tok).encode("Q?", steps), plain.bind(tok).encode("Q?", noted)
    assert got.input_ids == want.input_ids and got.read_positions == want.read_positions
    assert plain.bind(tok).encode("Q?", steps).input_ids != got.input_ids
    assert StepFormat.from_dict(calc.to_dict()).calculator is True
    assert StepFormat.from_dict({k: v for k, v in plain.to_dict().items()
                                 if k != "calculator"}).calculator is False
