"""The implicit PRM: step rewards from an outcome-trained log-likelihood ratio.

Paper: Yuan et al. 2024, "Free Process Rewards without Process Labels" (arXiv 2412.01981);
PRIME (Cui et al. 2025) uses the same reward online during RL. An outcome reward model
parameterised as r(y) = beta * sum_t log(pi(y_t | y_<t) / pi_ref(y_t | y_<t)) over response
tokens and trained on outcome labels (:mod:`prmkit.train.implicit`) gives process rewards: the
partial sums q_t are, by the paper's proposition, a Q value at token t.

Step k covers ``input_ids[step_ends[k-1]:step_ends[k]]`` of the step format (the separator
before a step belongs to it). Forms, all including beta:

* ``step``: r_k, the token log ratios summed inside step k;
* ``cumulative``: q_k = r_0 + ... + r_k (the paper's q); the last q is the outcome reward;
* ``probability`` (the default of :meth:`ImplicitPRM.score`): sigmoid(q_k), in [0, 1] like every
  other PRM's score (the trainer fits sigmoid(r) to P(correct)).

The reference is the base model: with ``last-k`` training the two share every tensor but the
last k layers and final norm (:func:`share_frozen`); with LoRA it is the policy with its
adapters off (``reference=None``); full fine-tuning holds two copies. Scoring costs two forward
passes per solution; only response tokens go through the LM head, in chunks.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from prmkit.errors import PrmkitError
from prmkit.steps import INSTRUCTION
from prmkit.models.base import collect
from prmkit.models.architectures import head_is_known
from prmkit.models.body import backbone as body_of
from prmkit.models.backends.sharedbody import head_logps, shared_logps
from prmkit.models import folder
from prmkit.models.weights import load_delta
from prmkit.models.reading import (HFConfig, ScoreStats, encode_or_warn, pad_right, torch_dtype,
                                   prefix_encodings, token_budget_batches)
from prmkit.stepformat import BoundFormat, Encoded, StepFormat, get_format

FORMS = ("probability", "cumulative", "step")
KIND = "implicit-prm"
# the first batch read through the shared bottom layers must give the two whole passes'
# log-probabilities to within this (rounding of the same sums in another order)
SHARED_TOLERANCE = 1e-4


def _formats() -> dict[str, StepFormat]:
    return {
        "chat": StepFormat(
            name="implicit-chat", layout="chat", system=INSTRUCTION, prefix="{problem}",
            step="{step}", between="\n", reading="log-ratio",
            description="the policy's own chat prompt (prmkit.generate.prompts, style chat): the "
                        "instruction as system message, the problem as user message, the steps "
                        "one per line in the assistant turn"),
        "lines": StepFormat(
            name="implicit-lines", layout="text", prefix="{problem}\n", step="{step}",
            between="\n", reading="log-ratio",
            description="plain text for models without a chat template: the problem, a newline, "
                        "then the steps one per line"),
    }


def implicit_format(name: str) -> StepFormat:
    """``chat`` or ``lines`` (above), or any preset / saved format, read as a log ratio (only
    its text layout matters to an implicit PRM)."""
    import dataclasses

    fmts = _formats()
    if name in fmts:
        return fmts[name]
    return dataclasses.replace(get_format(name), reading="log-ratio", positive=None,
                               negative=None)


# ---------------------------------------------------------------------------------------------
# token log-probabilities


def _core(model: Any) -> Any:
    """The transformers model under a peft wrapper (the LoRA layers stay injected in it)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def token_logps(model: Any, ids: Any, attn: Any, rows: Any, cols: Any, via: Any = None) -> Any:
    """log pi(ids[r, c] | ids[r, :c]) for each (r, c), c >= 1, as float32.

    Only the hidden states at the positions before the wanted tokens go through the LM head
    (:func:`prmkit.models.backends.sharedbody.head_logps`). ``via`` (a DDP wrapper) takes the plain full
    forward.
    """
    import torch

    targets = ids[rows, cols]
    core = _core(model)
    head = core.get_output_embeddings()
    backbone = body_of(core)
    plain = via is not None or head is None or backbone is None or not head_is_known(core)
    if plain:
        logits = (via or model)(input_ids=ids, attention_mask=attn).logits[rows, cols - 1].float()
        return logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
    hidden = backbone(input_ids=ids, attention_mask=attn).last_hidden_state[rows, cols - 1]
    return head_logps(core, hidden, targets)


def response_positions(encs: Sequence[Encoded], starts: Sequence[int],
                       ends: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """(rows, cols) of every response token: positions ``start .. end - 1`` of each sequence
    (position 0 has no prediction, so it is never a response token)."""
    rows: list[int] = []
    cols: list[int] = []
    for b, (e, s) in enumerate(zip(encs, starts)):
        end = len(e.input_ids) if ends is None else ends[b]
        first = max(s, 1)
        rows.extend([b] * max(0, end - first))
        cols.extend(range(first, end))
    return rows, cols


# ---------------------------------------------------------------------------------------------
# sharing weights between the policy and its reference


def share_frozen(target: Any, source: Any, own: set[str]) -> int:
    """Point every parameter of ``target`` whose name is not in ``own`` at the same tensor of
    ``source`` (same architecture), so the two models hold one copy of it. Tied weights stay
    tied. Returns the number of parameters that stay ``target``'s own."""
    src = dict(source.named_parameters(remove_duplicate=False))
    kept = 0
    for name, p in list(target.named_parameters(remove_duplicate=False)):
        if name in own:
            kept += p.numel()
            continue
        if name not in src or src[name].shape != p.shape:
            raise PrmkitError(f"cannot share parameter {name!r}: the reference model differs")
        module_name, _, attr = name.rpartition(".")
        setattr(target.get_submodule(module_name) if module_name else target, attr, src[name])
    return kept


def make_reference(model: Any, train: str) -> Any:
    """The frozen reference of a policy about to be trained (call it before the first step).

    ``lora``: None (the policy with its adapters off). ``last-k``: a copy whose trainable
    tensors are its own (frozen copies) and every other tensor the policy's. ``full``: a copy.
    """
    import copy

    if train == "lora":
        return None
    trainable = {n for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    ref = copy.deepcopy(model)
    if train == "last-k":
        share_frozen(ref, model, trainable)
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref.eval()


# ---------------------------------------------------------------------------------------------
# the scorer


@dataclass
class ImplicitRewards:
    """Everything the implicit PRM says about one solution (all values include beta).

    ``token_rewards[i]`` is beta * log(pi/pi_ref) of the i-th response token that fits;
    ``step_rewards[k]`` their sum over step k; ``q[k]`` the sum up to the end of step k;
    ``outcome`` the sum over the whole response (None when the solution was cut to the model's
    maximum length: steps that do not fit are None too).
    """

    token_rewards: list[float]
    step_rewards: list[float | None]
    q: list[float | None]
    outcome: float | None


class ImplicitPRM:
    """A policy and its reference read as a PRM. ``score`` is the protocol method.

    ``reference=None`` means the policy with its (peft) adapters switched off.
    """

    def __init__(self, policy: Any, reference: Any, tokenizer: Any, step_format: StepFormat,
                 beta: float, config: HFConfig | None = None, form: str = "probability"):
        import torch

        if form not in FORMS:
            raise PrmkitError(f"implicit PRM form {form!r} is not one of {', '.join(FORMS)}")
        if not beta > 0:
            raise PrmkitError(f"beta must be positive, got {beta}")
        if reference is None and not hasattr(policy, "disable_adapter"):
            raise PrmkitError("an implicit PRM needs a reference model (or a peft policy)")
        self.torch = torch
        self.model = policy.eval()
        self.reference = reference.eval() if reference is not None else None
        self.tokenizer, self.format, self.beta, self.form = tokenizer, step_format, beta, form
        self.config = config or HFConfig()
        self.bound: BoundFormat = step_format.bind(tokenizer)
        self.stats = ScoreStats()
        limit = getattr(_core(policy).config, "max_position_embeddings", None)
        self.max_length = self.config.max_length or (int(limit) if limit and limit < 10**7 else 4096)
        self.pad_id = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)
        self.device = next(policy.parameters()).device
        self._heads: dict[str, int] = {}
        # the shared-bottom pass: None until the first batch checks it, then True or False
        self.shared: bool | None = None

    # -- the protocol -----------------------------------------------------------------------
    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        return collect(len(problems), self.score_iter(problems, steps))

    def score_iter(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
                   ) -> Iterator[tuple[int, list[float | None]]]:
        """Yield ``(index, step_scores)`` in this scorer's form as batches finish."""
        for i, rw in self.rewards_iter(problems, steps):
            yield i, self._form(rw)

    def _form(self, rw: ImplicitRewards) -> list[float | None]:
        if self.form == "step":
            return rw.step_rewards
        if self.form == "cumulative":
            return rw.q
        return [None if q is None else sigmoid(q) for q in rw.q]

    def rewards(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[ImplicitRewards]:
        """Token, step, cumulative and outcome rewards of every solution (one pass each)."""
        out: list[ImplicitRewards | None] = [None] * len(problems)
        for i, rw in self.rewards_iter(problems, steps):
            out[i] = rw
        return out  # type: ignore[return-value]

    def rewards_iter(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
                     ) -> Iterator[tuple[int, ImplicitRewards]]:
        if len(problems) != len(steps):
            raise PrmkitError(f"{len(problems)} problems but {len(steps)} step lists")
        encs = [encode_or_warn(self.bound, p, s, self.max_length, self.stats)
                for p, s in zip(problems, steps)]
        starts = [self.head_length(p) for p in problems]
        for batch in token_budget_batches([len(e.input_ids) for e in encs], self.config.token_budget):
            ratios = self._ratios([encs[i] for i in batch], [starts[i] for i in batch])
            for i, r in zip(batch, ratios):
                yield i, split_steps(r, starts[i], encs[i])

    def score_per_prefix(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        """The slow reference: every prefix (problem, steps 0..k) in its own pass; its q is the
        sum over all its response tokens. Equal to one-pass scoring for a causal model."""
        where, encs = prefix_encodings(self.bound, problems, steps, self.max_length)
        q: list[list[float | None]] = [[None] * len(s) for s in steps]
        starts = [self.head_length(problems[i]) for i, _ in where]
        for batch in token_budget_batches([len(e.input_ids) for e in encs], self.config.token_budget):
            ratios = self._ratios([encs[j] for j in batch], [starts[j] for j in batch])
            for j, r in zip(batch, ratios):
                i, k = where[j]
                q[i][k] = math.fsum(r)
        out = []
        for qs in q:
            steps_r = [None if b is None or a is None else b - a
                       for a, b in zip([0.0] + qs[:-1], qs)]
            out.append(self._form(ImplicitRewards([], steps_r, qs, qs[-1] if qs else None)))
        return out

    # -- internals ------------------------------------------------------------------------------
    def head_length(self, problem: str) -> int:
        """Tokens before the first step: the response starts there."""
        if problem not in self._heads:
            self._heads[problem] = len(self.bound.encode(problem, []).input_ids)
        return self._heads[problem]

    def _ratios(self, encs: Sequence[Encoded], starts: Sequence[int]) -> list[list[float]]:
        """beta * log(pi/pi_ref) of every response token that fits, per sequence."""
        torch = self.torch
        ends = [e.step_ends[-1] if e.step_ends else 0 for e in encs]
        rows, cols = response_positions(encs, starts, ends)
        ids, mask = pad_right([e.input_ids for e in encs], self.pad_id)
        self.stats.forwards += 1
        self.stats.real_tokens += int(mask.sum())
        self.stats.computed_tokens += ids.numel()
        ids = ids.to(self.device)
        # right padding after every real token: a causal model needs no mask
        r = torch.tensor(rows, dtype=torch.long, device=self.device)
        c = torch.tensor(cols, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            both = self._shared(ids, r, c)
            if both is None:
                both = self._whole(ids, r, c)
        policy, reference = both
        values = (self.beta * (policy.double() - reference.double())).cpu().tolist()
        out: list[list[float]] = [[] for _ in encs]
        for b, v in zip(rows, values):
            out[b].append(v)
        return out

    def _whole(self, ids: Any, r: Any, c: Any) -> tuple[Any, Any]:
        """Both models' log-probabilities, each model read whole."""
        policy = token_logps(self.model, ids, None, r, c)
        with self._reference() as ref_model:
            return policy, token_logps(ref_model, ids, None, r, c)

    def _shared(self, ids: Any, r: Any, c: Any) -> tuple[Any, Any] | None:
        """Both through their shared bottom layers once (:mod:`prmkit.models.backends.sharedbody`), or
        None. The first batch is checked against :meth:`_whole`; a difference turns it off."""
        if self.shared is False or self.reference is None:
            return None
        both = shared_logps(_core(self.model), self.reference, ids, r, c)
        if both is not None and self.shared is None:
            whole = self._whole(ids, r, c)
            if both[0].numel():              # a batch with no response token checks nothing
                self.shared = all(bool((a.double() - b.double()).abs().max() <= SHARED_TOLERANCE)
                                  for a, b in zip(both, whole))
            return whole
        self.shared = self.shared if both is not None else False
        return both

    def _reference(self) -> Any:
        if self.reference is not None:
            return contextlib.nullcontext(self.reference)
        return _adapters_off(self.model)


@contextlib.contextmanager
def _adapters_off(model: Any) -> Iterator[Any]:
    with model.disable_adapter():
        yield model


def split_steps(token_rewards: list[float], start: int, enc: Encoded) -> ImplicitRewards:
    """Group one solution's token rewards (positions ``max(start, 1)`` onwards) into steps."""
    first = max(start, 1)
    steps: list[float | None] = []
    q: list[float | None] = []
    lo = first
    for end in enc.step_ends:
        steps.append(math.fsum(token_rewards[lo - first:end - first]))
        q.append(math.fsum(token_rewards[:end - first]))
        lo = end
    missing = enc.n_steps - len(steps)
    outcome = None if missing or enc.truncated else math.fsum(token_rewards)
    return ImplicitRewards(token_rewards, steps + [None] * missing, q + [None] * missing, outcome)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# ---------------------------------------------------------------------------------------------
# loading a trained folder


def load_implicit_prm(path: str, config: HFConfig | None = None,
                      step_format: str | StepFormat | None = None,
                      form: str | None = None) -> ImplicitPRM:
    """Load a folder written by ``prmkit train implicit-prm`` (kind ``implicit-prm``).

    The reference is the base model the policy was trained from (``config.base`` in
    ``prmkit_train.json``). A delta folder (``--train last-k``) shares every tensor but the
    trained ones with it; a full folder (LoRA merged, or full) is a second model.
    """
    from transformers import AutoTokenizer

    config = config or HFConfig()
    info = folder.read_train_info(path)
    if info.get("kind") != KIND:
        raise PrmkitError(f"{path}: not an implicit PRM folder (kind {info.get('kind')!r})")
    train = info.get("config", {})
    if "base" not in train or "beta" not in train:
        raise PrmkitError(f"{path}/{folder.TRAIN_FILE}: field 'config' needs 'base' and 'beta'")
    base_path = folder.base_of(path, train["base"])
    dtype = torch_dtype(config.dtype, config.device)
    fmt = folder.folder_format(path, path, step_format)
    folder.note_other_format(path, path, step_format, fmt)  # only its text layout matters here
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        reference, _ = folder.load_model(base_path, "causal-lm", None, dtype)
        if folder.is_delta(path):
            from safetensors.torch import load_file

            policy = load_delta(path, dtype, folder.delta_base(path))
            share_frozen(policy, reference, set(load_file(os.path.join(path, folder.DELTA_FILE))))
        else:
            policy, _ = folder.load_model(path, "causal-lm", None, dtype)
    except PrmkitError:
        raise
    except Exception as e:  # noqa: BLE001 - any loader failure is the folder's, said plainly
        raise PrmkitError(folder.load_error(path, path, e, "implicit PRM")) from None
    for p in list(policy.parameters()) + list(reference.parameters()):
        p.requires_grad_(False)
    return ImplicitPRM(policy.to(config.device), reference.to(config.device), tokenizer, fmt,
                       float(train["beta"]), config, form or train.get("score_form", "probability"))
