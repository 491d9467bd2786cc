"""Model weights: loading a base or full model folder (safetensors only), and the delta folders
prmkit writes (``prmkit_base.json`` + ``prmkit_delta.safetensors``: only the trained tensors,
applied on top of the base model the first names). What a folder says about its model (kind,
format, head, threshold) is :mod:`prmkit.models.folder`; the base of a delta folder is resolved
there too, so loading here reads no name."""

from __future__ import annotations

import json
import os
from typing import Any

from prmkit.errors import PrmkitError

BASE_FILE = "prmkit_base.json"
DELTA_FILE = "prmkit_delta.safetensors"
ARCHITECTURES = ("causal-lm", "token-classification")


def architecture_of(reading: str) -> str:
    return "causal-lm" if reading in ("label-tokens", "log-ratio") else "token-classification"


def load_model(path: str, architecture: str, num_labels: int | None, dtype: Any,
               trust_remote_code: bool = False) -> tuple[Any, dict[str, Any]]:
    """Load a base or full model folder (safetensors only). Returns (model, loading info)."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    kwargs: dict[str, Any] = dict(dtype=dtype, use_safetensors=True,
                                  trust_remote_code=trust_remote_code, output_loading_info=True)
    if architecture == "causal-lm":
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if num_labels is not None:
        kwargs["num_labels"] = num_labels
    return AutoModelForTokenClassification.from_pretrained(path, **kwargs)


def is_delta(path: str) -> bool:
    return os.path.isfile(os.path.join(path, BASE_FILE))


def read_base(path: str) -> dict[str, Any]:
    """``prmkit_base.json`` of a delta folder: its base model, architecture and labels."""
    with open(os.path.join(path, BASE_FILE), encoding="utf-8") as f:
        info = json.load(f)
    if info.get("architecture") not in ARCHITECTURES:
        raise PrmkitError(f"{path}/{BASE_FILE}: field 'architecture' must be one of "
                          f"{', '.join(ARCHITECTURES)}")
    return info


def load_delta(path: str, dtype: Any, base_path: str) -> Any:
    """Base model (in ``base_path``, :func:`prmkit.models.folder.base_of` of the base that
    ``prmkit_base.json`` names) + the trained tensors of a delta folder."""
    from safetensors.torch import load_file

    info = read_base(path)
    base = info["base"]
    model, _ = load_model(base_path, info["architecture"], info.get("num_labels"), dtype)
    delta = load_file(os.path.join(path, DELTA_FILE))
    own = model.state_dict()
    unknown = [k for k in delta if k not in own]
    if unknown:
        raise PrmkitError(f"{path}/{DELTA_FILE}: tensor {unknown[0]!r} does not exist in the base "
                          f"model {base!r}")
    for k, v in delta.items():
        if own[k].shape != v.shape:
            raise PrmkitError(f"{path}/{DELTA_FILE}: tensor {k!r} has shape {tuple(v.shape)}, "
                              f"the base model has {tuple(own[k].shape)}")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in delta.items()}, strict=False)
    return model


def save_delta(path: str, model: Any, names: list[str], base: str, architecture: str) -> None:
    """Write only the named tensors, with a pointer to the base model."""
    from safetensors.torch import save_file

    state = model.state_dict()
    save_file({n: state[n].detach().contiguous().cpu() for n in names},
              os.path.join(path, DELTA_FILE))
    info = {"base": base, "architecture": architecture,
            "num_labels": getattr(model.config, "num_labels", None)
            if architecture == "token-classification" else None}
    with open(os.path.join(path, BASE_FILE), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
