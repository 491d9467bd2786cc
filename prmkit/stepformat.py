"""The step format: the one component that turns (problem, steps) into token ids plus the
positions where step scores are read. Training, scoring, search, labelling and the server all go
through :meth:`BoundFormat.encode`; nothing else builds PRM inputs (docs/formats.md).

A format is data (:class:`StepFormat`), not code:

* the **layout** of the text:
    - ``text``: ``prefix`` (with ``{problem}``), then ``step`` (with ``{step}``) per step, with
      ``between`` after every step but the last (Math-Shepherd, TRL, prmkit);
    - ``chat``: the problem is the user turn of the tokenizer's chat template (optional system
      prompt), the steps follow in the assistant turn as in ``text`` (Qwen2.5-Math-PRM);
    - ``turns``: every step is a user turn and ``between`` the assistant's reply; the first turn
      is ``first_turn`` (``{problem}``, ``{step}``) (RLHFlow).
* the **reading rule**, at the last token of each step's piece (the tag):
    - ``label-tokens``: a causal LM; softmax over the ``positive`` and ``negative`` token logits,
      taking ``positive``;
    - ``classes``: a per-token classification head; softmax, taking ``positive_class``;
    - ``value``: a one-logit head; its sigmoid;
    - ``hazard`` (with ``classes``): P(no error here) at every token, step k's score their
      product up to its read position; ``surprisal`` adds the LM's surprise at each token
      (:mod:`prmkit.models.surprisal`);
    - ``log-ratio``: the implicit PRM (:mod:`prmkit.models.backends.implicit`), token log ratios
      log(pi/pi_ref) summed up to the end of step k (the read position is the step's end).
* the **label mapping** for training: 1 -> ``positive`` token / ``positive_class``, 0 -> the
  other; a soft label p trains against [1-p, p].
* the **tokenisation rule** (``tokenize``), as the model's own recipe does it:
    - ``whole``: the whole text in one tokenizer call, read (``read``) at every id equal to the
      tag's (``tag-id``) or at the token holding the last character of the step's piece
      (``end``, by the offset mapping); see :mod:`prmkit.wholetext`;
    - ``pieces``: the head, each step, its ``tag`` and ``between`` tokenised apart and joined
      (``bos="always"`` puts ``bos_token_id`` first, as TRL's ``tokenize_row``). A saved format
      without the field is ``pieces``.
* ``strip``: each step's surrounding whitespace is stripped first.
* ``calculator``: each step's wrong equations get a note with their value (``= 9 [calculator:
  8]``; :mod:`prmkit.calculator`).
* ``marker``: put before each step (``{n}``: the 1-based step number) unless the step starts
  with it (``"Step {n}: "`` for Math-Shepherd).

:meth:`StepFormat.bind` looks token ids up in the tokenizer, giving a :class:`BoundFormat`.
Under ``pieces`` a solution's first k steps' ids prefix the whole solution's ids; under
``whole`` a tokenizer may merge across the boundary. A step holding the format's tag is read
once, at the tag the format adds, with a warning.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, Sequence

from prmkit.calculator import annotate
from prmkit.errors import PrmkitError
from prmkit.wholetext import whole_text_ids

log = logging.getLogger("prmkit")

LAYOUTS = ("text", "chat", "turns")
READINGS = ("label-tokens", "classes", "value", "log-ratio")
TOKENIZE = ("pieces", "whole")
READS = ("end", "tag-id")
BOS = ("tokenizer", "always", "none")
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
    tag: str = ""               # after each step (after ``step``); the step is read at its last token
    marker: str = ""            # before step n ({n}) unless the step starts with it
    tokenize: str = "pieces"    # pieces | whole (see the module docstring)
    read: str = "end"           # end | tag-id
    bos: str = "tokenizer"      # tokenizer (its own special tokens) | always (bos_token_id first) | none
    strip: bool = False         # strip each step's surrounding whitespace first
    hazard: bool = False        # classes read at every token, multiplied up to each read position
    surprisal: bool = False     # hazard that also reads the LM's surprise at each token
    calculator: bool = False    # each step's wrong equations get a note (prmkit.calculator)

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
        if (self.hazard or self.surprisal) and self.reading != "classes" or self.surprisal > self.hazard:
            raise PrmkitError(f"step format {self.name!r}: hazard needs reading classes; surprisal needs hazard")
        if self.reading == "label-tokens" and not (self.positive and self.negative):
            raise PrmkitError(f"step format {self.name!r}: reading label-tokens needs "
                              f"'positive' and 'negative' tokens")
        if self.layout == "turns" and not self.between:
            raise PrmkitError(f"step format {self.name!r}: layout turns needs 'between' "
                              f"(the assistant's reply after each step)")
        for fld, value, known in (("tokenize", self.tokenize, TOKENIZE), ("read", self.read, READS),
                                  ("bos", self.bos, BOS)):
            if value not in known:
                raise PrmkitError(f"step format {self.name!r}: {fld} {value!r} is not one of "
                                  f"{', '.join(known)}")
        if self.read == "tag-id" and not (self.tag and self.tokenize == "whole"):
            raise PrmkitError(f"step format {self.name!r}: read tag-id needs a 'tag' and "
                              f"tokenize whole")
        if self.marker and "{n}" not in self.marker:
            raise PrmkitError(f"step format {self.name!r}: 'marker' must contain {{n}}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "step format") -> "StepFormat":
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise PrmkitError(f"{where}: unknown field {unknown[0]!r} (known: "
                             f"{', '.join(sorted(f.name for f in fields(cls)))})")
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
        name="math-shepherd", layout="text", prefix="{problem} ", step="{step}", tag=" ки",
        between="\n", marker="Step {n}: ", strip=True, tokenize="whole", read="tag-id",
        reading="label-tokens", positive="+", negative="-",
        description="Math-Shepherd (Wang et al., 2023; peiyi9979/math-shepherd-mistral-7b-prm) "
                    "and OpenRLHF: its model card's text, f'{question} {output}' with each step "
                    "stripped and written 'Step k: STEP ки' (the 'Step k: ' is added to a step "
                    "that does not start with it: the model was trained on such text, and "
                    "ProcessBench's steps have none), steps on separate lines, "
                    "tokenised in one call; P('+') against P('-') read wherever the id is the "
                    "tag's."),
    "qwen-prm": StepFormat(
        name="qwen-prm", layout="chat",
        system="Please reason step by step, and put your final answer within \\boxed{}.",
        prefix="{problem}", step="{step}", tag="<extra_0>", tokenize="whole", read="tag-id",
        reading="classes", positive_class=1,
        description="Qwen2.5-Math-PRM (Zhang et al., 2025): the steps in the assistant turn of "
                    "the chat template, '<extra_0>' after each, the whole text tokenised in one "
                    "call; class 1 of a 2-class head read at the '<extra_0>' ids."),
    "trl": StepFormat(
        name="trl", layout="text", prefix="{problem}", step="{step}", tag="\n",
        tokenize="pieces", bos="always", reading="classes", positive_class=1,
        description="TRL PRMTrainer (tokenize_row): the prompt, each step and the separator "
                    "'\\n' tokenised on their own and joined, the tokenizer's BOS first whenever "
                    "it has one; token classification at the separator's last token. No "
                    "separator between prompt and first step."),
    "skywork-prm": StepFormat(
        name="skywork-prm", layout="text", prefix="{problem}\n", step="{step}", tag="\n",
        tokenize="pieces", bos="always", reading="value",
        description="Skywork-o1-Open-PRM (skywork-o1-prm-inference, prepare_input): BOS, the "
                    "problem and '\\n' in one piece, each step and its '\\n' tokenised apart; "
                    "the sigmoid of a one-logit value head at each step's '\\n'."),
    "rlhflow": StepFormat(
        name="rlhflow", layout="turns", first_turn="{problem} {step}", step="{step}",
        between="+", strip=True, tokenize="whole", read="end", bos="none", reading="label-tokens",
        positive="+", negative="-",
        description="RLHFlow PRMs (Xiong et al., 2024; math-rm/prm_evaluate.py): each step a "
                    "user turn (stripped) answered '+', the conversation rendered by the chat "
                    "template and tokenised whole; P('+') against P('-') read at the token "
                    "before each '+' (its recipe's position -3)."),
    "prmkit": StepFormat(
        name="prmkit", layout="text", prefix="{problem}\n\n", step="{step} ки", between="\n\n",
        reading="classes", positive_class=1,
        description="prmkit's native format: ' ки' after each step, steps separated by a blank "
                    "line, read class 1 of a 2-class head. A trained prmkit model stores its "
                    "format beside its weights, so this preset is only a default for training."),
}


# the generative PRMs' templates (prmkit.verify.templates), which --format also names
GENERATIVE_TEMPLATES = ("thinkprm", "genprm", "plain")


def get_format(name_or_path: str) -> StepFormat:
    """A preset by name, or a format saved as JSON (a file, or a model folder holding one)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = os.path.join(name_or_path, FORMAT_FILE) if os.path.isdir(name_or_path) else name_or_path
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise PrmkitError(f"{path}:{e.lineno}: invalid JSON in step format: {e.msg}") from None
        return StepFormat.from_dict(data, where=path)
    if name_or_path in GENERATIVE_TEMPLATES:
        raise PrmkitError(f"--format {name_or_path} is a generative PRM's template, not a step "
                          f"format: use it with --backend generative")
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
    ``step_ends[k]`` is the length of the ids that cover the problem and steps 0..k, up to step
    k's read position (``read_positions[k] + 1``). Under ``tokenize="pieces"`` the ids of that
    prefix encoded alone are exactly ``input_ids[:step_ends[k]]``; under ``"whole"`` they
    usually are, and whoever relies on it checks (search's KV reuse does, per solution, and
    falls back). When the solution was truncated to a maximum length, steps that no longer fit
    are missing from both lists: ``n_steps`` says how many steps the solution has.
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
    tag_id: int | None = field(init=False, default=None)
    _warned: set = field(init=False, default_factory=set, repr=False, compare=False)

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
        bos_id = getattr(tok, "bos_token_id", None)
        if fmt.bos == "always":
            self.bos = [bos_id] if bos_id is not None else []
        elif fmt.bos == "tokenizer" and (fmt.layout == "text" or fmt.tokenize == "whole"):
            probe = tok("a", add_special_tokens=True)["input_ids"]
            if bos_id is not None and probe and probe[0] == bos_id:
                self.bos = [bos_id]
        if fmt.read == "tag-id":
            ids = tok(fmt.tag, add_special_tokens=False)["input_ids"]
            if not ids:
                raise PrmkitError(f"step format {fmt.name!r}: the tag {fmt.tag!r} has no tokens")
            self.tag_id = int(ids[-1])

    # -- the pieces of text, before tokenisation ------------------------------------------------
    def step_text(self, k: int, step: str) -> str:
        """Step k's own text: its marker (unless it starts with it), the ``step`` template."""
        if self.format.strip:
            step = step.strip()
        if self.format.calculator:
            step = annotate(step)
        marker = self.format.marker.format(n=k + 1) if self.format.marker else ""
        if marker and not step.startswith(marker.rstrip()):
            step = marker + step
        return self.format.step.format(step=step)

    def pieces(self, problem: str, steps: Sequence[str]) -> tuple[str, list[str], list[str]]:
        """(head, step_pieces, betweens): the text is head + piece_0 + between_0 + piece_1 ...

        Each step's score is read at the last token of its piece (which ends with the tag).
        ``betweens[k]`` follows piece k and precedes piece k+1 (there are len(steps) - 1).
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
        step_pieces = [self.step_text(k, s) + fmt.tag for k, s in enumerate(steps)]
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
            content = (fmt.first_turn.format(problem=problem, step=self.step_text(k, s)) if k == 0
                       else self.step_text(k, s))
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
            # the whole text holds every reply, the last one too (RLHFlow's recipe renders it,
            # and a tokenizer may merge the characters before the reply with it)
            betweens.append(replied[len(asked):])
            rendered = replied
        return "", step_pieces, betweens

    def text(self, problem: str, steps: Sequence[str]) -> tuple[str, list[int]]:
        """The whole text and, for each step, the offset just past its piece (its read point)."""
        head, step_pieces, betweens = self.pieces(problem, steps)
        if self.format.layout != "turns":
            betweens = betweens + [""]
        parts, ends, n = [head], [], len(head)
        for piece, between in zip(step_pieces, betweens):
            ends.append(n + len(piece))
            n += len(piece) + len(between)
            parts += [piece, between]
        return "".join(parts), ends

    def encode(self, problem: str, steps: Sequence[str], max_length: int | None = None) -> Encoded:
        """Token ids of (problem, steps) and the positions where each step is scored, by the
        format's tokenisation rule (see the module docstring).

        With ``max_length``, the ids are cut to that length and only the steps whose read
        position still fits are kept in ``read_positions`` (never misaligned: step k is always
        ``read_positions[k]``).
        """
        self._check_tags(problem, steps)
        if self.format.tokenize == "whole":
            ids, read_positions = self._encode_whole(problem, steps)
        else:
            ids, read_positions = self._encode_pieces(problem, steps)
        step_ends = [p + 1 for p in read_positions]
        ids = ids[:step_ends[-1]] if step_ends else ids  # nothing after the last read is needed
        if max_length is not None and len(ids) > max_length:
            keep = sum(1 for p in read_positions if p < max_length)
            return Encoded(ids[:max_length], read_positions[:keep], step_ends[:keep],
                           n_steps=len(steps), truncated=True)
        return Encoded(ids, read_positions, step_ends, n_steps=len(steps))

    def _encode_pieces(self, problem: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """Each piece tokenised on its own (the step, its tag and the separator apart)."""
        fmt = self.format
        head, step_pieces, betweens = self.pieces(problem, steps)
        if fmt.layout == "turns":
            betweens = betweens[:-1]
        if fmt.tag and fmt.layout != "turns":   # the tag is a piece of its own
            step_parts = [[p[:len(p) - len(fmt.tag)], fmt.tag] for p in step_pieces]
        else:
            step_parts = [[p] for p in step_pieces]
        texts = [head] + [t for parts in step_parts for t in parts] + betweens
        # no steps under the turns layout leaves no text at all (the problem is in step 0's turn)
        nonempty = list(dict.fromkeys(t for t in texts if t))
        ids_of = dict(zip(nonempty, self.tokenizer(nonempty, add_special_tokens=False)["input_ids"]
                          if nonempty else []))
        ids: list[int] = list(self.bos) + list(ids_of.get(head, []))
        read_positions: list[int] = []
        for parts, between in zip(step_parts, betweens + [""]):
            for part in parts:
                ids.extend(ids_of.get(part, []))
            if not ids_of.get(parts[-1]):
                raise PrmkitError(f"step format {fmt.name!r}: a step piece has no tokens")
            read_positions.append(len(ids) - 1)
            ids.extend(ids_of.get(between, []))
        return ids, read_positions

    def _encode_whole(self, problem: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """The whole text in one call, read by the format's rule (:mod:`prmkit.wholetext`)."""
        fmt = self.format
        text, ends = self.text(problem, steps)
        if not text:
            return list(self.bos), []
        return whole_text_ids(self.tokenizer, text, ends, special_tokens=(fmt.bos == "tokenizer"),
                              bos=self.bos if fmt.bos == "always" else [],
                              tag_id=self.tag_id if fmt.read == "tag-id" else None,
                              name=fmt.name, problem=problem)

    def _check_tags(self, problem: str, steps: Sequence[str]) -> None:
        """Warn, once per step, about a step holding the format's tag (the module docstring)."""
        fmt = self.format
        tag = (fmt.tag or fmt.step.split("{step}", 1)[1]).strip()
        k = next((k for k, s in enumerate(steps) if tag and tag in s), None)
        if k is None or (problem, k, steps[k]) in self._warned:   # not once per prefix read
            return
        if len(self._warned) < 10000:
            self._warned.add((problem, k, steps[k]))
        log.warning("step format %r: step %d of the solution to %r holds the tag %r; prmkit "
                    "reads each step once, at the tag it adds after the step (the model's own "
                    "recipe would also read the tag in the step)", fmt.name, k, problem[:60], tag)


def _single_token(tokenizer: Any, text: str | None, name: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise PrmkitError(f"step format {name!r}: label token {text!r} is {len(ids)} tokens in "
                          f"this tokenizer, expected exactly 1")
    return int(ids[0])
