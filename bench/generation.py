"""Generation speed, measured side by side in one run, on the same prompts.

Policy: the default SmolLM2-135M-Instruct (chat prompt of ``prmkit generate``) on the first
``--prompts`` GSM8K test problems (``../shared/data/gsm8k/test.jsonl``; a built-in problem list
when the data is missing). Every sample generates exactly ``--max-tokens`` tokens (end tokens are
ignored, so each backend does the same work); the time includes each prompt's prefill.

Three runs:

1. ``hf`` batch 1: transformers (bfloat16 unless ``--dtype``), one prompt at a time;
2. ``hf`` batch 8: the same prompts, 8 decoded together (``--batch``);
3. ``llamacpp``: llama-cpp-python on the same model's GGUF (Q4_1), one prompt at a time
   (skipped when llama-cpp-python is not installed: ``make llamacpp``).

Prints tokens/s for each and their ratios last. The machines are shared: the load average is
printed beside the figures, and ``--threads 1`` is often faster than 2 on a busy machine.

Usage: ``python bench/generation.py [--prompts 8] [--max-tokens 64] [--threads N]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time

from prmkit.shareddata import shared_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = shared_data_dir()
FALLBACK = ["Tom has 3 boxes with 4 apples in each box. He eats 2 apples. How many are left?",
            "A train travels 60 miles per hour for 3 hours. How far does it go?",
            "Sara buys 5 pens at $2 each and a book for $7. How much does she spend?",
            "There are 24 students and each table seats 4. How many tables are needed?"]


def problems(n: int) -> list[str]:
    path = os.path.join(DATA, "gsm8k", "test.jsonl")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return [json.loads(line)["question"] for line in f][:n]
    return (FALLBACK * n)[:n]


def timed(gen, prompts: list[str], max_tokens: int, calls: list[list[str]]) -> tuple[int, float]:
    tokens, start = 0, time.perf_counter()
    for batch in calls:
        out = gen.generate(batch, n=1, max_tokens=max_tokens, temperature=0.7, seed=0)
        tokens += sum(c.n_tokens for row in out for c in row)
    return tokens, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for both backends")
    args = ap.parse_args()

    from prmkit.generate.load import load_policy

    texts = problems(args.prompts)
    results: dict[str, tuple[int, float]] = {}

    hf, prompter = load_policy("smollm2-135m", "hf", dtype=args.dtype, batch_size=args.batch,
                               threads=args.threads)
    import torch

    hf.end_ids = set()  # every sample runs to max_tokens
    prompts = [prompter.prompt(t) for t in texts]
    timed(hf, prompts[:1], 4, [prompts[:1]])  # warm-up
    results["hf batch 1"] = timed(hf, prompts, args.max_tokens, [[p] for p in prompts])
    results[f"hf batch {args.batch}"] = timed(
        hf, prompts, args.max_tokens,
        [prompts[i:i + args.batch] for i in range(0, len(prompts), args.batch)])

    if importlib.util.find_spec("llama_cpp") is not None:
        lc, lc_prompter = load_policy("smollm2-135m", "llamacpp", threads=args.threads)
        assert lc_prompter.prompt(texts[0]) == prompts[0], "backends must see the same prompt"
        lc.end_ids = set()
        lc._is_eog = lambda vocab, token: False
        timed(lc, prompts[:1], 4, [prompts[:1]])
        results["llamacpp"] = timed(lc, prompts, args.max_tokens, [[p] for p in prompts])
    else:
        print("llama-cpp-python is not installed (make llamacpp): llamacpp skipped")

    print(f"\n{len(prompts)} prompts x {args.max_tokens} tokens; hf {args.dtype}; torch threads "
          f"{torch.get_num_threads()}; llama.cpp threads {args.threads or 'default'}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rate = {name: tokens / seconds for name, (tokens, seconds) in results.items()}
    for name, (tokens, seconds) in results.items():
        print(f"{name:>12}: {tokens:5d} tokens in {seconds:7.1f} s = {rate[name]:7.1f} tokens/s")
    b1, b8 = rate["hf batch 1"], rate[f"hf batch {args.batch}"]
    print(f"ratio hf batch {args.batch} / hf batch 1: {b8 / b1:.2f}x")
    if "llamacpp" in rate:
        print(f"ratio llamacpp / hf batch 1: {rate['llamacpp'] / b1:.2f}x")
        print(f"ratio hf batch {args.batch} / llamacpp: {b8 / rate['llamacpp']:.2f}x")


if __name__ == "__main__":
    main()
