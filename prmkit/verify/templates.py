"""The prompts of generative PRMs, by name, each the one its checkpoint was trained on.

* ``thinkprm``: ThinkPRM (Khalifa et al. 2025, "Process Reward Models That Think",
  arXiv:2504.16828; github.com/mukhal/ThinkPRM, ``utils/helper.py``'s
  ``format_verification_cot_for_thinkprm`` and ``prm/thinkprm_api.py``'s ``process_example``).
  One user turn: the problem and the steps as ``Step i: text`` lines (a ``Step N:`` the step
  already carries is removed first), the fixed instruction; the chat template's generation prompt,
  then ``\\nLet's verify step by step:``. One verification covers every step; it writes
  ``\\boxed{correct}`` or ``\\boxed{incorrect}`` per step and stops at ``Is the solution
  correct?``, ``</think>`` or ``Step N+1:`` (a step that does not exist).
* ``genprm``: GenPRM (Zhao et al. 2025, "GenPRM: Scaling Test-Time Compute of Process Reward
  Models via Generative Reasoning", arXiv:2504.00891; github.com/RyanLiu112/GenPRM,
  ``src/prm_evaluation/prm_evaluate.py`` and ``genprm_inference.py``, its analyze-only mode:
  no code execution). A conversation: the system line, then one user turn per step (the first
  is the problem, a newline, the first step), each followed by the verifier's own earlier
  verification as the assistant turn. Step k's prompt is the conversation up to its user turn,
  rendered without the generation prompt and without the trailing end token (``build_prompt``),
  then ``<analyze>\\nLet's analyze the Paragraph k step by step: ``. The analysis stops at
  ``</analyze>\\n``; then ``<output>\\n**Judgement**: $\\boxed`` is appended and the verdict
  ``{Yes}`` or ``{No}`` sampled, stopping at ``</output>\\n``. One verification per step.
* ``plain``: any instruct model: ThinkPRM's layout with an instruction that names the verdict
  format; no text after the generation prompt. Without a chat template, the same text as plain
  text ending in ``Verification:``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from prmkit.models.spec import VERIFIER_FILE  # a trained verifier's template and sampling settings
from prmkit.errors import PrmkitError
from prmkit.stepformat import GENERATIVE_TEMPLATES

THINKPRM_INSTRUCTION = ("Review and critique each step in the proposed solution to determine "
                        "whether each step is correct. If the solution is incomplete, only "
                        "verify the provided steps.")
THINKPRM_LAYOUT = ("You are given a math problem and a proposed step-by-step solution:\n\n"
                   "[Math Problem]\n\n{problem}\n\n[Solution]\n\n{solution}\n\n{instruction}")
THINKPRM_START = "\nLet's verify step by step:"
THINKPRM_END = "Is the solution correct?"   # the question before the solution-level decision
PLAIN_INSTRUCTION = ("Check each step in order. For each step write 'Step i:', a short check of "
                     "that step, and end with \\boxed{correct} if the step is correct or "
                     "\\boxed{incorrect} if it is not. Stop after the first incorrect step.")
GENPRM_SYSTEM = ("You are a math teacher. Your task is to review and critique the paragraphs in "
                 "solution step by step.")
GENPRM_ANALYZE = "<analyze>\nLet's analyze the Paragraph {k} step by step: "
GENPRM_ANALYZE_STOP = "</analyze>\n"
GENPRM_OUTPUT = "<output>\n**Judgement**: $\\boxed"
GENPRM_OUTPUT_STOP = "</output>\n"
GENPRM_OUTPUT_TOKENS = 20   # the recipe's budget for the verdict after the forced output start


Chat = Callable[[list[dict[str, str]], bool], str]   # (messages, add_generation_prompt) -> text


@dataclass(frozen=True)
class Template:
    """A generative PRM's prompt: its name, the recipe it reproduces, and how it verifies."""

    name: str
    recipe: str
    per_step: bool        # one verification per step (GenPRM), or one for all steps
    needs_chat: bool      # refuses a model without a chat template
    verdicts: str         # the verdict words: correct first, then incorrect
    temperature: float    # the recipe's sampling settings, the defaults where none is set
    top_p: float = 1.0
    top_k: int = 0        # 0: off


TEMPLATES = {
    # ThinkPRM's prm/thinkprm_api.py samples at 0.7; GenPRM's genprm_inference.py at 0.6 with
    # top_p 0.95 and top_k 20
    "thinkprm": Template("thinkprm", "ThinkPRM (launch/ThinkPRM-1.5B, -7B, -14B)", False, True,
                         "correct,incorrect", 0.7),
    "genprm": Template("genprm", "GenPRM (GenPRM/GenPRM-1.5B, -7B, -32B), analyze-only mode",
                       True, True, "Yes,No", 0.6, 0.95, 20),
    "plain": Template("plain", "any instruct model: ThinkPRM's layout, the verdict format "
                      "spelled out", False, False, "correct,incorrect", 0.7),
}

assert tuple(TEMPLATES) == GENERATIVE_TEMPLATES   # the names --format refuses as step formats


def get_template(name: str) -> Template:
    if name not in TEMPLATES:
        raise PrmkitError(f"--format {name!r} is not a generative PRM template; known: "
                          f"{', '.join(TEMPLATES)}")
    return TEMPLATES[name]


def chat_of(tokenizer: Any, template: Template, model: str) -> Chat | None:
    """``tokenizer``'s chat template as a function, or None for a plain prompt; a model without
    one is refused for a template that needs one."""
    if getattr(tokenizer, "chat_template", None):
        return lambda messages, gen: tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen)
    if template.needs_chat:
        raise PrmkitError(f"--model {model}: the tokenizer has no chat template, and --format "
                          f"{template.name} needs one (--format plain works without)")
    return None


def step_line(step: str) -> str:
    """A step as ThinkPRM's solution text shows it after ``Step i:`` (its own ``Step N:``
    removed)."""
    return re.sub(r"Step \d+:", "", step).strip()


def numbered(steps: Sequence[str]) -> str:
    """ThinkPRM's solution text: ``Step i: text`` lines."""
    return "\n".join(f"Step {i}: {step_line(s)}" for i, s in enumerate(steps, 1))


def shown(steps: Sequence[str], calculator: bool) -> list[str]:
    """The steps as a verifier reads them: with the calculator's note after each wrong
    equation (:func:`prmkit.calculator.annotate`) for a verifier trained with the calculator,
    as the discriminative step format ``calculator`` writes them; else as written."""
    if not calculator:
        return list(steps)
    from prmkit.calculator import annotate

    return [annotate(s) for s in steps]


def whole_prompt(template: Template, chat: Chat | None, problem: str,
                 steps: Sequence[str]) -> str:
    """The prompt of a template that verifies all steps at once (thinkprm, plain)."""
    instruction = THINKPRM_INSTRUCTION if template.name == "thinkprm" else PLAIN_INSTRUCTION
    user = THINKPRM_LAYOUT.format(problem=problem, solution=numbered(steps),
                                  instruction=instruction)
    if chat is None:
        return user + "\n\nVerification:\n"
    text = chat([{"role": "user", "content": user}], True)
    return text + THINKPRM_START if template.name == "thinkprm" else text


def whole_stops(n_steps: int) -> list[str]:
    """Where a whole verification stops: ThinkPRM's stop patterns, and the first step that
    does not exist."""
    return [THINKPRM_END, "</think>", f"Step {n_steps + 1}:"]


def genprm_prompt(chat: Chat, eos: str, problem: str, steps: Sequence[str],
                  earlier: Sequence[str]) -> str:
    """GenPRM's prompt for step ``len(earlier) + 1``: the conversation up to that step's user
    turn, ``earlier`` the verifications of the steps before it, then the analysis start."""
    k = len(earlier) + 1
    messages = [{"role": "system", "content": GENPRM_SYSTEM}]
    for i in range(k):
        messages.append({"role": "user", "content": problem + "\n" + steps[0] if i == 0 else steps[i]})
        if i < k - 1:
            messages.append({"role": "assistant", "content": earlier[i]})
    text = chat(messages, False)
    for tail in (eos + "\n", eos):
        if eos and text.endswith(tail):
            text = text[:-len(tail)]
            break
    return text + GENPRM_ANALYZE.format(k=k)
