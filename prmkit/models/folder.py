"""Model folders: finding a model by name, the step format stored in a folder, its kind, and the
trained folders prmkit writes (everything needed to use a model, and nothing unsafe).

A folder holds the tokenizer, ``prmkit_format.json``, ``README.md`` (the model card),
``prmkit_train.json`` (the training config and kind), optionally ``prmkit_threshold.json`` (the
first-error threshold the model was tuned for) and safetensors weights, either **full**
(``config.json`` + ``model.safetensors``, loadable by any transformers code) or **delta**
(``prmkit_base.json`` + ``prmkit_delta.safetensors``: only the trained tensors, applied on top
of the base model that ``prmkit_base.json`` names).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from prmkit.errors import PrmkitError
# the weights' names, re-exported where callers have found them (prmkit.models.weights loads)
from prmkit.models.weights import (ARCHITECTURES, BASE_FILE, DELTA_FILE,  # noqa: F401
                                   architecture_of, is_delta, load_model, read_base, save_delta)
from prmkit.stepformat import FORMAT_FILE, PRESETS, StepFormat, get_format

TRAIN_FILE = "prmkit_train.json"
THRESHOLD_FILE = "prmkit_threshold.json"  # {"threshold": float, "tuned_on": str, ...}
# a caller that has not read the model's own format yet (the functions below read it)
READ: Any = object()
# the threshold a command applies where neither --threshold nor the model gives one
DEFAULT_THRESHOLD = 0.5


def read_train_info(path: str) -> dict[str, Any]:
    """``prmkit_train.json`` of a trained folder ({} for any other folder)."""
    p = os.path.join(path, TRAIN_FILE)
    if not os.path.isfile(p):
        return {}
    with open(p, encoding="utf-8") as f:
        return json.load(f)


def saved_threshold(model: str | None) -> dict[str, Any] | None:
    """``prmkit_threshold.json`` of a model (``None`` or ``default``: the default PRM; a local
    folder), or None: a hub id, a URL, a named backbone or a folder without one. The file holds
    ``threshold`` (a step scored below it is a predicted error) and ``tuned_on`` (what chose it)."""
    from prmkit.models.pypi import DEFAULT_PRM_DIR, is_default

    if is_default(model):
        return read_threshold(DEFAULT_PRM_DIR)
    return read_threshold(model) if os.path.isdir(model) else None


def read_threshold(path: str) -> dict[str, Any] | None:
    """``prmkit_threshold.json`` of the folder ``path``, or None where it has none."""
    p = os.path.join(path, THRESHOLD_FILE)
    if not os.path.isfile(p):
        return None
    with open(p, encoding="utf-8") as f:
        info = json.load(f)
    if not isinstance(info.get("threshold"), (int, float)):
        raise PrmkitError(f"{p}: no numeric 'threshold'")
    return info


def threshold_for(model: str | None, given: float | None) -> tuple[float, str]:
    """The threshold a command applies, and the line it prints on stderr saying where it came
    from: ``given`` (``--threshold``), else the one saved with the model, else 0.5."""
    return threshold_from(saved_threshold(model), model or "default", given)


def threshold_from(saved: dict[str, Any] | None, name: str,
                   given: float | None) -> tuple[float, str]:
    """:func:`threshold_for` from the model's saved threshold ``saved`` (or None)."""
    if given is not None:
        return given, f"threshold {given:g} (--threshold)"
    if saved is None:
        return DEFAULT_THRESHOLD, (
            f"threshold {DEFAULT_THRESHOLD:g} (no threshold is saved with the model: --threshold "
            f"sets one; eval processbench --calibrate-on SPLIT tunes one on a split)")
    t = float(saved["threshold"])
    return t, (f"threshold {t:g}: the one saved with the model {name} (tuned on "
               f"{saved.get('tuned_on', 'its dev data')}); --threshold overrides it")


def write_card(path: str, title: str, lines: list[str]) -> None:
    with open(os.path.join(path, "README.md"), "w", encoding="utf-8") as f:
        f.write(f"# {title}\n\n" + "\n".join(lines) + "\n")


def kind_of(model: str) -> str:
    """What a model folder holds: prm, orm or implicit-prm (a folder prmkit did not train, or a
    name that is not a folder, is a prm)."""
    from prmkit.models.pypi import is_default

    if is_default(model) or not os.path.isdir(model):
        return "prm"
    return read_train_info(resolve_model_path(model)).get("kind", "prm")


def resolve_model_path(name_or_path: str) -> str:
    """``default`` (the trained default PRM), a default model name (see prmkit.models.pypi), a
    local folder, or a hub id."""
    from prmkit.models.pypi import (DEFAULT_MODELS, DEFAULT_PRM, default_prm_path, is_default,
                                    resolve)

    if is_default(name_or_path):
        return default_prm_path()
    if name_or_path in DEFAULT_MODELS:
        return resolve(name_or_path)
    if os.path.isdir(name_or_path):
        if not (os.path.isfile(os.path.join(name_or_path, "config.json")) or is_delta(name_or_path)):
            raise PrmkitError(f"{name_or_path}: not a model folder (no config.json)")
        return name_or_path
    looks_like_hub_id = name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~"))
    if looks_like_hub_id and not os.path.exists(name_or_path):
        check_hub(name_or_path)
        return name_or_path
    raise PrmkitError(f"model {name_or_path!r}: no such folder (named models: {DEFAULT_PRM}, "
                      f"{', '.join(DEFAULT_MODELS)})")


def check_hub(repo_id: str, timeout: float = 3.0) -> None:
    """Fail at once, saying why, when the hub id ``repo_id`` is not in the local Hugging Face
    cache and the hub cannot be reached (transformers would retry for most of a minute)."""
    try:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.constants import HF_HUB_OFFLINE
    except ImportError:
        return
    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return
    from prmkit.tables import hub_unreachable

    why = "HF_HUB_OFFLINE is set" if HF_HUB_OFFLINE else hub_unreachable(timeout)
    if why is None:
        return
    raise PrmkitError(f"model {repo_id!r} is not in the local Hugging Face cache and cannot be "
                      f"downloaded: {why}. Where the hub is reachable, run `hf download {repo_id} "
                      f"--local-dir DIR`, then `{score_line(repo_id)}`")


def score_line(repo_id: str) -> str:
    """The command that scores with a hub model once it is downloaded to DIR: its step format
    (from ``models/names.py``, NAME when prmkit does not know it), and ``--trust-remote-code``
    where its recipe runs the model's own code."""
    from prmkit.models.names import format_for, needs_remote_code

    remote = " --trust-remote-code" if needs_remote_code(repo_id) else ""
    return f"prmkit score --model DIR --format {format_for(repo_id) or 'NAME'}{remote}"


def base_of(path: str, base: str) -> str:
    """The base model that the trained folder ``path`` names: a folder beside it (relative to
    ``path``) when there is one, else a default model name, a folder or a hub id."""
    relative = os.path.join(path, base)
    return resolve_model_path(relative if os.path.isdir(relative) else base)


def delta_base(path: str) -> str | None:
    """The resolved base of the delta folder ``path`` (None for any other folder)."""
    return base_of(path, read_base(path)["base"]) if is_delta(path) else None


def own_format(model: str, path: str) -> StepFormat | None:
    """The step format that belongs to the model: the one saved in its folder
    (``prmkit_format.json``), else the one ``models/names.py`` gives its hub id, else None."""
    from prmkit.models.names import format_for

    saved = os.path.join(path, FORMAT_FILE)
    if os.path.isfile(saved):
        return get_format(saved)
    return get_format(format_for(model) or "") if format_for(model) else None


def folder_format(model: str, path: str, step_format: str | StepFormat | None,
                  presets: str = "(qwen-prm, trl, prmkit, ...)") -> StepFormat:
    """The step format given, or else the model's own (:func:`own_format`); without either, an
    error naming ``presets`` to choose from. A format given by name that is not the model's own
    is said by :func:`note_other_format`, once the loader has checked that it fits."""
    if isinstance(step_format, StepFormat):
        return step_format
    if step_format is not None:
        return get_format(step_format)
    own = own_format(model, path)
    if own is None:
        raise PrmkitError(f"model {model!r} has no {FORMAT_FILE}: say which step format it "
                          f"reads {presets}")
    return own


def is_other_format(model: str, path: str, fmt: StepFormat) -> StepFormat | None:
    """The model's own format when ``fmt`` is not it (None when it is, or it has none)."""
    own = own_format(model, path)
    return own if own is not None and not same_format(fmt, own) else None


def note_other_format(model: str, path: str, step_format: str | StepFormat | None,
                      fmt: StepFormat) -> None:
    """Say on stderr that ``--format`` is not the format the model was saved with: its scores
    are then not the ones its own recipe reads."""
    own = is_other_format(model, path, fmt) if isinstance(step_format, str) else None
    if own is not None:
        say_other_format(model, step_format, own)


def say_other_format(model: str, given: str, own: StepFormat) -> None:
    print(f"note: --format {given} is not the step format model {model} was saved with "
          f"({own.name}); its scores follow --format", file=sys.stderr)


def same_format(a: StepFormat, b: StepFormat) -> bool:
    """Whether two formats build the same ids and read them the same way (names and
    descriptions aside)."""
    def key(f: StepFormat) -> dict[str, Any]:
        return {k: v for k, v in f.to_dict().items() if k not in ("name", "description")}

    return key(a) == key(b)


HEADS = {"label-tokens": "is a language model (it reads label tokens from its vocabulary)",
         "classes": "has a classification head", "value": "has a one-logit value head"}
READS_HEAD = {"label-tokens": "reads label tokens from a language model's vocabulary",
              "classes": "reads a classification head", "value": "reads a one-logit value head",
              "log-ratio": "reads an implicit PRM's log ratios (a policy and its reference)"}


def head_of(path: str) -> tuple[str, int] | None:
    """What the model in ``path`` reads steps with, and its number of classes: (label-tokens,
    0), (classes, N) or (value, 1); None when its config does not say (an architecture prmkit
    does not know, or a hub id that is not in the local cache)."""
    if is_delta(path):
        with open(os.path.join(path, BASE_FILE), encoding="utf-8") as f:
            info = json.load(f)
        if info.get("architecture") == "causal-lm":
            return ("label-tokens", 0)
        n = int(info.get("num_labels") or 2)
        return ("value", 1) if n == 1 else ("classes", n)
    config = config_of(path)
    name = (config.get("architectures") or [""])[0]
    if name.endswith(("ForCausalLM", "LMHeadModel")):
        return ("label-tokens", 0)
    if name.endswith("ForTokenClassification") or "RewardModel" in name:
        n = int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)
        return ("value", 1) if n == 1 else ("classes", n)
    return None


def config_of(path: str) -> dict[str, Any]:
    """A model's ``config.json`` (from the local Hugging Face cache for a hub id), or {}."""
    p: Any = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        try:
            from huggingface_hub import try_to_load_from_cache

            p = try_to_load_from_cache(path, "config.json")
        except (ImportError, ValueError):
            return {}
    if not isinstance(p, str) or not os.path.isfile(p):
        return {}
    try:
        with open(p, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def check_tag(model: str, path: str, fmt: StepFormat, tokenizer: Any, own: Any = READ) -> None:
    """Refuse a format that reads its tag's id (math-shepherd, qwen-prm) on a model saved with
    another format whose tokenizer splits that tag into several tokens: the format's recipe
    reads a tag of one token, and the model was never trained to read this one. A model with no
    format of its own (a base model read zero-shot) is the user's choice, and is let through.
    ``own`` is the model's own format where the caller has read it."""
    own = own_format(model, path) if own is READ else own
    if fmt.read != "tag-id" or own is None or same_format(fmt, own):
        return
    ids = tokenizer(fmt.tag, add_special_tokens=False)["input_ids"]
    if len(ids) == 1:
        return
    pieces = ", ".join(repr(t) for t in tokenizer.convert_ids_to_tokens(ids))
    raise PrmkitError(f"step format {fmt.name!r} reads the id of its tag {fmt.tag!r}, one token "
                      f"in the models it was made for, but the tokenizer of model {model!r} "
                      f"splits it into {len(ids)} ({pieces}): "
                      f"{advice_for(model, path, fmt.reading, own)}")


def advice_for(model: str, path: str, kind: str, own: Any = READ) -> str:
    """What to pass instead of a format that does not fit: the model's own, or the presets that
    read its kind of head."""
    own = own_format(model, path) if own is READ else own
    if own is not None and own.reading == kind:
        return f"leave --format out to use its own ({own.name})"
    names = [f.name for f in PRESETS.values() if f.reading == kind]
    return f"use a format that fits it ({', '.join(names)})" if names else "use a format that fits it"


def check_head(model: str, path: str, fmt: StepFormat, own: Any = READ) -> None:
    """Refuse, in one line and before any weights load, a step format that reads another kind
    of head than the model has (label tokens on a classification head, or the reverse): the
    scores would be an index error or, worse, numbers read from the wrong place."""
    head = head_of(path)
    if head is None:
        return
    kind, n = head
    fits = fmt.reading == kind and (kind != "classes" or fmt.positive_class < n)
    if fits:
        return
    advice = advice_for(model, path, kind, own)
    what = HEADS[kind] + (f" of {n} classes" if kind == "classes" else "")
    reads = READS_HEAD.get(fmt.reading, f"reads {fmt.reading}")
    if fmt.reading == kind == "classes":
        reads = f"reads class {fmt.positive_class}"
    raise PrmkitError(f"model {model!r} {what}, but step format {fmt.name!r} {reads}: {advice}")


def load_error(model: str, path: str, error: BaseException, what: str = "model") -> str:
    """One line that names the folder (or name) and what failed to load from it: any error of
    a loader, so that a user never sees a traceback."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    where = model if os.path.abspath(model) == os.path.abspath(path) else f"{model} ({path})"
    return f"{what} {where}: cannot load: {type(error).__name__}: {first}".rstrip(": ")
