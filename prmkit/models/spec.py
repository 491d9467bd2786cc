"""One model spec: what a user typed after ``--model``, with ``--backend``, ``--format``,
``--token`` and ``--trust-remote-code``, resolved once.

:func:`resolve_model` is the one place that decides what a model name means, and the openers
(:data:`prmkit.scoring.OPENERS`, one per backend) open the spec without looking any of it up
again:

* None or ``default`` is the trained default PRM shipped in the package, always
  (:func:`prmkit.models.pypi.is_default`): a folder named ``default`` in the working directory
  is ``./default``;
* an ``http://`` or ``https://`` URL is a running ``prmkit serve`` (``served``);
* a default model name, a local folder or a hub id becomes its path
  (:func:`prmkit.models.folder.resolve_model_path`: a missing one is refused here, before any
  heavy import), and its kind comes from ``prmkit_train.json`` (prm, orm, implicit-prm) or
  ``prmkit_verifier.json`` (verifier);
* for the ``hf`` and ``vllm`` backends, the step format (``--format``, else the model's own) is
  chosen and checked against the model's head here, once;
* the threshold saved with the model (``prmkit_threshold.json``) is read here, once;
* a public PRM whose recipe runs its own code (:data:`prmkit.models.names.REMOTE_CODE`) is
  refused without ``--trust-remote-code``, in one line, before its weights load.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.models import folder
from prmkit.models.names import is_remote, needs_remote_code
from prmkit.models.pypi import DEFAULT_PRM, is_default
from prmkit.stepformat import StepFormat, get_format

BACKENDS = ("hf", "vllm", "generative")
# what marks a folder written by `prmkit train verifier`: its template and sampling settings
VERIFIER_FILE = "prmkit_verifier.json"


@dataclass(frozen=True)
class ModelSpec:
    """A model as resolved once: ``given`` as typed, ``path`` its folder (a hub id or a URL as
    given), ``kind`` (prm, orm, implicit-prm or verifier; a server is a prm), ``backend``, the
    step format ``step_format`` (checked against the head, or for an implicit PRM, which has
    none, its text layout alone; None where the opener reads its own: a server, a generative
    verifier), the format as given and the model's own, and the saved threshold."""

    given: str | None
    path: str
    kind: str
    backend: str = "hf"
    step_format: StepFormat | None = None
    format_given: str | StepFormat | None = None
    own_format: StepFormat | None = None
    threshold: dict[str, Any] | None = None
    trust_remote_code: bool = False
    token: str | None = None
    delta_base: str | None = None     # the resolved base of a delta folder

    @property
    def is_default(self) -> bool:
        return is_default(self.given)

    @property
    def name(self) -> str:
        """How messages name the model: as typed, or ``default``."""
        return DEFAULT_PRM if self.is_default else str(self.given)

    @property
    def served(self) -> bool:
        """Whether it is a running ``prmkit serve`` (a URL), not a model."""
        return is_remote(self.path)

    @property
    def opener(self) -> str:
        """The key of the opener that opens it (:data:`prmkit.scoring.OPENERS`)."""
        if self.served:
            return "served"
        if self.backend == "hf" and self.kind == "implicit-prm":
            return "implicit-prm"
        return self.backend

    def threshold_for(self, given: float | None) -> tuple[float, str]:
        """The threshold a command applies, and the line that says where it came from."""
        return folder.threshold_from(self.threshold, self.name, given)


def resolve_model(model: str | None, backend: str = "hf", fmt: str | StepFormat | None = None,
                  token: str | None = None, trust_remote_code: bool = False,
                  presets: str = "with --format (math-shepherd, qwen-prm, trl, rlhflow, "
                                 "prmkit)") -> ModelSpec:
    """The spec of ``model`` (see the module docstring); a model that does not exist, a
    generative verifier on another backend, a server on vLLM or a format that does not fit
    the model's head is refused in one line. ``presets`` is what the refusal of a model with
    no format of its own suggests."""
    if backend not in BACKENDS:
        raise PrmkitError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}")
    common = dict(backend=backend, format_given=fmt, trust_remote_code=trust_remote_code,
                  token=token)
    if model is not None and is_remote(model):
        if backend == "vllm":
            raise PrmkitError(f"--backend vllm reads a model folder or hub id, not a server URL "
                              f"({model})")
        return ModelSpec(model, model, "prm", **common)
    if backend == "generative":
        kind = "verifier" if model and os.path.isfile(os.path.join(model, VERIFIER_FILE)) \
            else "prm"
        return ModelSpec(model, model or "", kind, **common)
    if model and os.path.isfile(os.path.join(model, VERIFIER_FILE)):
        raise PrmkitError(f"--model {model}: a generative verifier (prmkit train verifier); "
                          f"score it with --backend generative")
    name = DEFAULT_PRM if is_default(model) else str(model)
    path = folder.resolve_model_path(name)   # a hub id not downloaded is refused here first
    if needs_remote_code(name) and not trust_remote_code:
        raise PrmkitError(f"model {name!r} runs its own code (its recipe loads it with "
                          f"trust_remote_code): add --trust-remote-code if you trust it")
    local = os.path.isdir(path)
    kind = folder.read_train_info(path).get("kind", "prm") if local else "prm"
    own = folder.own_format(name, path)
    if kind == "implicit-prm":   # no head to check: only the format's text layout matters
        # (with neither a format given nor its own, the opener refuses it, once its kind is
        # known to the command: export refuses an implicit PRM whatever its format)
        step_format = _chosen(name, fmt, own, presets) if fmt or own else None
        if isinstance(fmt, str) and own is not None and not folder.same_format(step_format, own):
            folder.say_other_format(name, fmt, own)
    else:
        step_format = _chosen(name, fmt, own, presets)
        folder.check_head(name, path, step_format, own)
        if own is not None and not folder.same_format(step_format, own):
            _check_other_format(name, path, step_format, fmt, own, trust_remote_code)
    return ModelSpec(model, path, kind, step_format=step_format, own_format=own,
                     threshold=folder.read_threshold(path) if local else None,
                     delta_base=folder.delta_base(path) if local else None, **common)


def _chosen(name: str, fmt: str | StepFormat | None, own: StepFormat | None,
            presets: str) -> StepFormat:
    """The step format given, else the model's own; without either, a refusal."""
    if isinstance(fmt, StepFormat):
        return fmt
    if fmt is not None:
        return get_format(fmt)
    if own is None:
        raise PrmkitError(f"model {name!r} has no {folder.FORMAT_FILE}: say which step format "
                          f"it reads {presets}")
    return own


def _check_other_format(name: str, path: str, fmt: StepFormat, given: str | StepFormat | None,
                        own: StepFormat, trust_remote_code: bool) -> None:
    """A format other than the model's own: one that reads its tag's id is refused where the
    model's tokenizer splits that tag (:func:`prmkit.models.folder.check_tag`; the tokenizer is
    loaded for that check alone), and a ``--format`` given by name is said on stderr."""
    if fmt.read == "tag-id":
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        except Exception as e:  # noqa: BLE001 - any loader failure is the folder's, said plainly
            raise PrmkitError(folder.load_error(name, path, e, "tokenizer of model")) from None
        folder.check_tag(name, path, fmt, tokenizer, own)
    if isinstance(given, str):
        folder.say_other_format(name, given, own)
