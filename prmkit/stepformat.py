"""The step format: the one component that turns (problem, steps) into token ids plus the
positions where step scores are read.

Every PRM has its own input convention, and most real PRM bugs come from training and inference
formatting a solution differently. So training, scoring, search, labeling and the server all go
through :func:`encode` here, and nowhere else builds PRM inputs.

A format is data (:class:`StepFormat`), not code:

* the **layout** of the text:
    - ``text``: ``prefix`` (with ``{problem}``), then for each step ``step`` (with ``{step}``), with
      ``between`` after every step but the last. Math-Shepherd, TRL and prmkit use this.
    - ``chat``: the problem is the user turn of the tokenizer's own chat template (with an optional
      system prompt), the steps follow in the assistant turn as in ``text``. Qwen2.5-Math-PRM.
    - ``turns``: every step is a user turn and ``between`` is the assistant's reply, rendered with
      the tokenizer's chat template. The first turn is ``first_turn`` (``{problem}``, ``{step}``).
      RLHFlow.
* the **reading rule**: scores are read at the last token of each step's piece (the tag):
    - ``label-tokens``: a causal LM; the score is softmax over the logits of the ``positive`` and
      ``negative`` tokens, taking ``positive`` (Math-Shepherd, RLHFlow);
    - ``classes``: a per-token classification head; softmax over the classes, taking
      ``positive_class`` (Qwen2.5-Math-PRM's 2-class head, TRL's token classification);
    - ``value``: a one-logit head; the score is its sigmoid.
    - ``log-ratio``: a causal LM and its frozen reference (the implicit PRM,
      :mod:`prmkit.models.implicit`); step k's score comes from the token log ratios
      log(pi/pi_ref) summed up to the end of step k, so the "read position" is the step's end.
* the **label mapping** for training: label 1 -> ``positive`` token / class ``positive_class``,
  label 0 -> ``negative`` token / the other class; a soft label p trains against [1-p, p].

Token ids are never hard-coded: :meth:`StepFormat.bind` looks them up in the tokenizer when the
model loads, giving a :class:`BoundFormat`.

The ids are built piece by piece (each piece is tokenised on its own and the ids concatenated),
so the ids of a solution's first k steps are a prefix of the ids of the whole solution. That is
what makes one-pass scoring equal per-prefix scoring for a causal model, and what lets search
reuse the key-value cache of a prefix.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, Sequence

from prmkit.errors import PrmkitError

LAYOUTS = ("text", "chat", "turns")
READINGS = ("label-tokens", "classes", "value", "log-ratio")
FORMAT_FILE = "prmkit_format.json"


@dataclass(frozen=True)
class StepFormat:
    """A PRM input convention. See the module docstring for what each field means."""

    name: str
    layout: str = "text"
    prefix: str = "{problem}"
    step: str = "{step}"
    between: str = ""
    system: str | None = None
    first_turn: str = "{problem} {step}"
    reading: str = "label-tokens"
    positive: str | None = None
    negative: str | None = None
    positive_class: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise PrmkitError(f"step format {self.name!r}: layout {self.layout!r} is not one of "
                              f"{', '.join(LAYOUTS)}")
        if self.reading not in READINGS:
            raise PrmkitError(f"step format {self.name!r}: reading {self.reading!r} is not one of "
                              f"{', '.join(READINGS)}")
        if "{step}" not in self.step:
            raise PrmkitError(f"step format {self.name!r}: 'step' must contain {{step}}")
        if self.layout == "text" and "{problem}" not in self.prefix:
            raise PrmkitError(f"step format {self.name!r}: 'prefix' must contain {{problem}}")
        if self.reading == "label-tokens" and not (self.positive and self.negative):
            raise PrmkitError(f"step format {self.name!r}: reading label-tokens needs "
                              f"'positive' and 'negative' tokens")
        if self.layout == "turns" and not self.between:
            raise PrmkitError(f"step format {self.name!r}: layout turns needs 'between' "
                              f"(the assistant's reply after each step)")

    # -- persistence: a trained model stores its format beside its weights -------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "step format") -> "StepFormat":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise PrmkitError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        if "name" not in d:
            raise PrmkitError(f"{where}: field 'name' is missing")
        return cls(**d)

    def save(self, directory: str) -> str:
        path = os.path.join(directory, FORMAT_FILE)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, ensure_ascii=False)
            f.write("\n")
        return path

    def bind(self, tokenizer: Any) -> "BoundFormat":
        """Look up this format's token ids in ``tokenizer``."""
        return BoundFormat(self, tokenizer)


# ---------------------------------------------------------------------------------------------
# presets of the public PRM conventions

PRESETS: dict[str, StepFormat] = {
    "math-shepherd": StepFormat(
        name="math-shepherd", layout="text", prefix="{problem} ", step="{step} ки", between="\n",
        reading="label-tokens", positive="+", negative="-",
        description="Math-Shepherd (Wang et al., 2023) and OpenRLHF: ' ки' after each step, "
                    "read P('+') against P('-') at the tag."),
    "qwen-prm": StepFormat(
        name="qwen-prm", layout="chat",
        system="Please reason step by step, and put your final answer within \\boxed{}.",
        prefix="{problem}", step="{step}<extra_0>", reading="classes", positive_class=1,
        description="Qwen2.5-Math-PRM (Zhang et al., 2025): the steps in the assistant turn of "
                    "the chat template, '<extra_0>' after each, read class 1 of a 2-class head."),
    "trl": StepFormat(
        name="trl", layout="text", prefix="{problem}", step="{step}\n", reading="classes",
        positive_class=1,
        description="TRL PRMTrainer: token classification at the last token of step plus "
                    "separator ('\\n'); no separator between prompt and first step."),
    "rlhflow": StepFormat(
        name="rlhflow", layout="turns", first_turn="{problem} {step}", step="{step}",
        between="+", reading="label-tokens", positive="+", negative="-",
        description="RLHFlow PRMs (Xiong et al., 2024): each step a user turn, the assistant "
                    "replies '+'; read P('+') against P('-') where the reply starts."),
    "prmkit": StepFormat(
        name="prmkit", layout="text", prefix="{problem}\n\n", step="{step} ки", between="\n\n",
        reading="classes", positive_class=1,
        description="prmkit's native format: ' ки' after each step, steps separated by a blank "
                    "line, read class 1 of a 2-class head. A trained prmkit model stores its "
                    "format beside its weights, so this preset is only a default for training."),
}


def get_format(name_or_path: str) -> StepFormat:
    """A preset by name, or a format saved as JSON (a file, or a model folder holding one)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = name_or_path
    if os.path.isdir(path):
        path = os.path.join(path, FORMAT_FILE)
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise PrmkitError(f"{path}:{e.lineno}: invalid JSON in step format: {e.msg}") from None
        return StepFormat.from_dict(data, where=path)
    raise PrmkitError(f"unknown step format {name_or_path!r}: use one of "
                      f"{', '.join(PRESETS)}, or a path to a {FORMAT_FILE}")


# ---------------------------------------------------------------------------------------------
# encoding


class Tokenizer(Protocol):
    """What the step format needs from a Hugging Face tokenizer."""

    def __call__(self, text: Any, add_special_tokens: bool = ...) -> Any: ...
    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


@dataclass
class Encoded:
    """One solution as token ids, with where each step's score is read.

    ``read_positions[k]`` is the index in ``input_ids`` of the token whose output scores step k.
    ``step_ends[k]`` is the length of the ids that cover the problem and steps 0..k (the ids of
    that prefix are exactly ``input_ids[:step_ends[k]]``). When the solution was truncated to a
    maximum length, steps that no longer fit are missing from both lists: ``n_steps`` says how
    many steps the solution has.
    """

    input_ids: list[int]
    read_positions: list[int]
    step_ends: list[int]
    n_steps: int = 0
    truncated: bool = False


@dataclass
class BoundFormat:
    """A step format bound to a tokenizer: label token ids looked up, pieces ready to encode."""

    format: StepFormat
    tokenizer: Any
    positive_id: int | None = field(init=False, default=None)
    negative_id: int | None = field(init=False, default=None)
    bos: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        fmt, tok = self.format, self.tokenizer
        if fmt.reading == "label-tokens":
            self.positive_id = _single_token(tok, fmt.positive, fmt.name)
            self.negative_id = _single_token(tok, fmt.negative, fmt.name)
            if self.positive_id == self.negative_id:
                raise PrmkitError(f"step format {fmt.name!r}: positive and negative tokens "
                                  f"map to the same id {self.positive_id}")
        if fmt.layout in ("chat", "turns") and not getattr(tok, "chat_template", None):
            raise PrmkitError(f"step format {fmt.name!r} uses the chat template, but this "
                              f"tokenizer has none (use a text format such as math-shepherd)")
        if fmt.layout == "text":
            bos_id = getattr(tok, "bos_token_id", None)
            probe = tok("a", add_special_tokens=True)["input_ids"]
            if bos_id is not None and probe and probe[0] == bos_id:
                self.bos = [bos_id]

    # -- the pieces of text, before tokenisation ------------------------------------------------
    def pieces(self, problem: str, steps: Sequence[str]) -> tuple[str, list[str], list[str]]:
        """(head, step_pieces, betweens): the text is head + piece_0 + between_0 + piece_1 ...

        Each step's score is read at the last token of its piece. ``betweens[k]`` follows
        piece k and precedes piece k+1 (there are len(steps) - 1 of them).
        """
        fmt = self.format
        if fmt.layout == "turns":
            return self._turn_pieces(problem, steps)
        if fmt.layout == "chat":
            messages = ([{"role": "system", "content": fmt.system}] if fmt.system else [])
            messages.append({"role": "user", "content": fmt.prefix.format(problem=problem)})
            head = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=True)
        else:
            head = fmt.prefix.format(problem=problem)
        step_pieces = [fmt.step.format(step=s) for s in steps]
        return head, step_pieces, [fmt.between] * max(len(steps) - 1, 0)

    def _turn_pieces(self, problem: str, steps: Sequence[str]) -> tuple[str, list[str], list[str]]:
        """Each step a user turn; the pieces are differences of chat-template renderings, so
        they are exactly the model's own template, cut where the assistant reply starts."""
        fmt, tok = self.format, self.tokenizer
        messages: list[dict[str, str]] = ([{"role": "system", "content": fmt.system}]
                                          if fmt.system else [])
        rendered = ""
        step_pieces: list[str] = []
        betweens: list[str] = []
        for k, s in enumerate(steps):
            content = fmt.first_turn.format(problem=problem, step=s) if k == 0 else fmt.step.format(step=s)
            messages.append({"role": "user", "content": content})
            asked = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            if not asked.startswith(rendered):
                raise PrmkitError(f"step format {fmt.name!r}: the chat template is not "
                                  f"prefix-stable, so steps cannot be scored in one pass")
            step_pieces.append(asked[len(rendered):])
            messages.append({"role": "assistant", "content": fmt.between})
            replied = tok.apply_chat_template(messages, tokenize=False)
            if not replied.startswith(asked):
                raise PrmkitError(f"step format {fmt.name!r}: the chat template is not "
                                  f"prefix-stable, so steps cannot be scored in one pass")
            if k < len(steps) - 1:
                betweens.append(replied[len(asked):])
            rendered = replied
        return "", step_pieces, betweens

    def encode(self, problem: str, steps: Sequence[str], max_length: int | None = None) -> Encoded:
        """Token ids of (problem, steps) and the positions where each step is scored.

        With ``max_length``, the ids are cut to that length and only the steps whose read
        position still fits are kept in ``read_positions`` (never misaligned: step k is always
        ``read_positions[k]``).
        """
        head, step_pieces, betweens = self.pieces(problem, steps)
        texts = [head] + [t for pair in zip(step_pieces, betweens + [""]) for t in pair]
        nonempty = [t for t in texts if t]
        # no steps under the turns layout leaves no text at all (the problem is in step 0's turn)
        ids_of = dict(zip(nonempty, self.tokenizer(nonempty, add_special_tokens=False)["input_ids"])) \
            if nonempty else {}
        ids: list[int] = list(self.bos) + list(ids_of.get(head, []))
        read_positions: list[int] = []
        step_ends: list[int] = []
        for piece, between in zip(step_pieces, betweens + [""]):
            ids.extend(ids_of.get(piece, []))
            if not piece or not ids_of.get(piece):
                raise PrmkitError(f"step format {self.format.name!r}: a step piece has no tokens")
            read_positions.append(len(ids) - 1)
            step_ends.append(len(ids))
            ids.extend(ids_of.get(between, []))
        if step_ends:
            ids = ids[:step_ends[-1]]  # nothing after the last step's read point is needed
        enc = Encoded(ids, read_positions, step_ends, n_steps=len(steps))
        if max_length is not None and len(ids) > max_length:
            keep = sum(1 for p in read_positions if p < max_length)
            enc = Encoded(ids[:max_length], read_positions[:keep], step_ends[:keep],
                          n_steps=len(steps), truncated=True)
        return enc


def _single_token(tokenizer: Any, text: str | None, name: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise PrmkitError(f"step format {name!r}: label token {text!r} is {len(ids)} tokens in "
                          f"this tokenizer, expected exactly 1")
    return int(ids[0])
