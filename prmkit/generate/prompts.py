"""Prompts: how a policy is asked to solve a problem, one step at a time.

A prompt style fixes three things that must agree with each other:

* the **prompt text** for a problem and a partial solution;
* the **step separator** the prompt teaches, which is the separator of a step rule of
  :mod:`prmkit.steps` (``"lines"``: a newline; ``"blank-lines"``: a blank line). Step-wise
  continuation stops there, and ``prmkit generate`` splits full solutions with that rule;
* how a solution **ends**: end tokens (:data:`END_TOKENS`, such as ``<|im_end|>``) and end strings
  (for a base model, the blank line and ``Question:`` that would start a new example). End
  strings are not part of the solution.

Two styles:

``chat`` (instruct models with a chat template, such as SmolLM2-135M-Instruct)
    A system message asks for a step-by-step solution, one step per line, ending with
    ``The answer is N.``; the problem is the user message; the solution so far is the start
    of the assistant's reply. The template is the model's own (the tokenizer's or the GGUF's
    ``chat_template``), rendered with Jinja2 as transformers does.

``few-shot`` (base models, such as Gemma 3 270M)
    An instruction, three worked GSM8K-style examples (written for prmkit, not taken from a
    data set) in the form ``Question: ...`` / ``Answer:`` / one step per line / ``The answer
    is N.``, a blank line between examples, then the problem. A blank line or a new
    ``Question:`` ends the solution.

Both teach the ``lines`` rule, the form of GSM8K's own solutions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.steps import INSTRUCTION, RULES, join_steps, separator

# (question, steps, answer), written for prmkit in the style of GSM8K.
EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("A baker makes 24 muffins in the morning and 18 muffins in the afternoon. He sells 30 "
     "muffins. How many muffins does he have left?",
     ("The baker makes 24 + 18 = 42 muffins.",
      "After selling 30 muffins he has 42 - 30 = 12 muffins left.",
      "The answer is 12.")),
    ("Maria buys 3 notebooks for $4 each and a pen for $2. She pays with a $20 bill. How much "
     "change does she get?",
     ("The notebooks cost 3 * 4 = $12.",
      "Together with the pen she spends 12 + 2 = $14.",
      "Her change is 20 - 14 = $6.",
      "The answer is 6.")),
    ("A garden has 5 rows of tomato plants with 8 plants in each row. Each plant gives 4 "
     "tomatoes. Half of the tomatoes are used for sauce. How many tomatoes are used for sauce?",
     ("There are 5 * 8 = 40 tomato plants.",
      "They give 40 * 4 = 160 tomatoes.",
      "Half of them is 160 / 2 = 80 tomatoes.",
      "The answer is 80.")),
)


@dataclass(frozen=True)
class PromptStyle:
    """How a kind of model is prompted (see the module docstring)."""

    name: str
    description: str
    step_rule: str = "lines"
    instruction: str = INSTRUCTION
    examples: tuple[tuple[str, tuple[str, ...]], ...] = ()
    end_strings: tuple[str, ...] = ()
    chat: bool = False

    def __post_init__(self) -> None:
        if self.step_rule not in RULES or self.step_rule == "auto":
            raise PrmkitError(f"prompt style {self.name!r}: step_rule must be one of "
                              f"lines, blank-lines, step-markers, got {self.step_rule!r}")


STYLES: dict[str, PromptStyle] = {
    "chat": PromptStyle(
        name="chat", chat=True,
        description="instruct models: the model's chat template, an instruction in the system "
                    "message, the problem as the user message"),
    "few-shot": PromptStyle(
        name="few-shot", examples=EXAMPLES,
        description="base models: an instruction and three worked examples "
                    "(Question: / Answer: / one step per line / The answer is N.)",
        end_strings=("\n\n", "\nQuestion:")),
}

# Special tokens that end a text wherever they exist as single tokens, besides the tokenizer's
# EOS: the end-of-turn tokens of common chat formats.
END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<eos>")

# The style each default model is prompted with (prmkit.models.pypi.DEFAULT_MODELS).
MODEL_STYLES: dict[str, str] = {"smollm2-135m": "chat", "gemma3-270m": "few-shot"}


@dataclass
class Prompter:
    """A prompt style bound to a model's chat template: builds prompts, knows the separator."""

    style: PromptStyle
    chat_template: str | None = None
    special: dict[str, str] = field(default_factory=dict)   # bos_token, eos_token for the template
    step_rule: str | None = None                             # overrides style.step_rule

    def __post_init__(self) -> None:
        if self.style.chat and not self.chat_template:
            raise PrmkitError(f"prompt style {self.style.name!r} needs a chat template, and the "
                              f"model has none: use --prompt-style few-shot")
        rule = self.rule
        if rule not in RULES or rule == "auto":
            raise PrmkitError(f"step rule {rule!r}: use lines, blank-lines or step-markers for "
                              f"generation")

    @property
    def rule(self) -> str:
        return self.step_rule or self.style.step_rule

    @property
    def separator(self) -> str:
        """The text between two steps; step-wise continuation stops right after it."""
        return separator(self.rule)

    @property
    def end_strings(self) -> list[str]:
        """Strings that end a solution (not part of it). A blank line ends a few-shot
        solution; when blank lines separate steps, two of them do."""
        if self.separator == "\n\n":
            return [("\n\n\n" if s == "\n\n" else s) for s in self.style.end_strings]
        return list(self.style.end_strings)

    def prompt(self, problem: str, steps: Sequence[str] = ()) -> str:
        """The prompt for ``problem``, followed by the steps written so far, each followed by
        the separator (so the model continues with the next step)."""
        steps = list(steps)
        head = self._chat(problem) if self.style.chat else self._few_shot(problem)
        if not steps:
            return head
        return head + join_steps(steps, self.rule) + self.separator

    def _chat(self, problem: str) -> str:
        messages = [{"role": "system", "content": self.style.instruction},
                    {"role": "user", "content": problem.strip()}]
        return render_chat(self.chat_template or "", messages, **self.special)

    def _few_shot(self, problem: str) -> str:
        sep = self.separator
        parts = [self.style.instruction]
        for question, steps in self.style.examples:
            parts.append(f"Question: {question}\nAnswer:\n{join_steps(list(steps), self.rule)}")
        parts.append(f"Question: {problem.strip()}\nAnswer:\n")
        if sep == "\n\n":  # blank lines separate steps: examples need a stronger break
            return "\n\n\n".join(parts)
        return "\n\n".join(parts)


def render_chat(template: str, messages: list[dict[str, str]], bos_token: str = "",
                eos_token: str = "") -> str:
    """``template`` rendered as transformers' ``apply_chat_template(..., tokenize=False,
    add_generation_prompt=True)`` renders it (a sandboxed Jinja2 environment)."""
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise PrmkitError("chat templates need jinja2: pip install jinja2") from None

    def raise_exception(message: str) -> None:
        raise PrmkitError(f"chat template: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                            bos_token=bos_token or "", eos_token=eos_token or "")


def get_style(name: str) -> PromptStyle:
    if name not in STYLES:
        raise PrmkitError(f"unknown prompt style {name!r}; known: {', '.join(STYLES)}")
    return STYLES[name]


def style_for(policy: str, chat_template: str | None, override: str | None = None) -> PromptStyle:
    """The prompt style for a policy: ``override`` if given, the default model's style, else
    ``chat`` when the model has a chat template and ``few-shot`` when it has none."""
    if override:
        return get_style(override)
    if policy in MODEL_STYLES:
        return STYLES[MODEL_STYLES[policy]]
    return STYLES["chat" if chat_template else "few-shot"]


def make_prompter(policy: str, chat_template: str | None, special: dict[str, str] | None = None,
                  style: str | None = None, step_rule: str | None = None) -> Prompter:
    """A prompter for a policy (see :func:`style_for`)."""
    chosen = style_for(policy, chat_template, style)
    return Prompter(chosen, chat_template if chosen.chat else None, dict(special or {}), step_rule)


def tokenizer_specials(tokenizer: Any) -> dict[str, str]:
    """The special token strings a chat template may use, from an HF tokenizer."""
    return {"bos_token": tokenizer.bos_token or "", "eos_token": tokenizer.eos_token or ""}


_FINAL = re.compile(r"\\boxed\s*\{|\banswer\s+is\b|^\s*(?:the\s+)?(?:final\s+)?(?:answer|a)\s*[:=]|^\s*####",
                    re.IGNORECASE)


def has_final_answer(text: str) -> bool:
    """Whether a step states the final answer: ``\\boxed{...}``, ``... answer is ...``, or a
    line that begins ``Answer:``, ``A:`` or GSM8K's ``####``."""
    return _FINAL.search(text) is not None
