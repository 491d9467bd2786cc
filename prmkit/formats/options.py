"""The options of ``prmkit convert`` (:class:`ConvertOptions`), shared by every converter."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from prmkit.errors import PrmkitError

SHEPHERD_LABEL_STYLES = ("text", "tokens", "floats")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class ConvertOptions:
    """Options of ``prmkit convert``. Each field's help text is in its metadata."""

    prm800k_neutral: float | None = field(default=1.0, metadata=_help(
        "label for a PRM800K rating of 0 (neutral). Let's Verify Step by Step counted neutral "
        "steps as correct (1); use 0 to count them as wrong, or null to leave them unlabelled."))
    soft_threshold: float = field(default=0.5, metadata=_help(
        "when writing a hard-label format (TRL true/false, Math-Shepherd +/-, PRM800K -1/1) "
        "from float labels: a label >= this is correct"))
    strip_calculator: bool = field(default=False, metadata=_help(
        "GSM8K: remove the calculator annotations <<a*b=c>> from the steps"))
    math_shepherd_labels: str = field(default="text", metadata={**_help(
        "writing Math-Shepherd: 'text' (label = the input with each tag replaced by +/-, the "
        "original dataset), 'tokens' (label = a list of '+'/'-', OpenRLHF) or 'floats' "
        "(label = a list of float labels, OpenRLHF soft labels)"), "choices": SHEPHERD_LABEL_STYLES})
    prm800k_alternatives: bool = field(default=False, metadata=_help(
        "PRM800K: besides each labelling session's path, one record per rated alternative "
        "step: the path up to that step, then the alternative as the last step (the "
        "trl-lib/prm800k expansion). Phase-1 paths hold almost no wrong step; the wrong "
        "steps are among the alternatives."))
    skip_empty: bool = field(default=False, metadata=_help(
        "PRM800K: leave out labelling sessions with no step to keep (the labeller rated and "
        "chose nothing), with a warning that counts them; by default such a session is an "
        "error"))
    prmbench_later_steps: float | None = field(default=None, metadata=_help(
        "PRMBench: label for steps after the first error that are not error steps. Default "
        "null (unlabelled, as ProcessBench and PRM800K); PRMBench's own evaluation counts "
        "them as correct, which is 1."))

    def __post_init__(self) -> None:
        for name in ("prm800k_neutral", "prmbench_later_steps"):
            value = getattr(self, name)
            if value is not None and not _unit(value):
                raise PrmkitError(f"option {name}: {value!r} is not a number in [0, 1] or none")
        if not _unit(self.soft_threshold):
            raise PrmkitError(f"option soft_threshold: {self.soft_threshold!r} is not a number "
                              f"in [0, 1]")
        for name in ("strip_calculator", "prm800k_alternatives", "skip_empty"):
            if not isinstance(getattr(self, name), bool):
                raise PrmkitError(f"option {name}: expected true or false, got "
                                  f"{getattr(self, name)!r}")
        if self.math_shepherd_labels not in SHEPHERD_LABEL_STYLES:
            raise PrmkitError(f"option math_shepherd_labels: {self.math_shepherd_labels!r} is "
                              f"not one of {', '.join(SHEPHERD_LABEL_STYLES)}")

    @staticmethod
    def help() -> dict[str, str]:
        """Each option's help text, by field name."""
        return {f.name: f.metadata["help"] for f in fields(ConvertOptions)}


def _unit(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and 0.0 <= value <= 1.0)
