"""What a generative PRM's scoring costs, against transformers' own ``generate`` on the same
model and the same prompts (docs/generative-prms.md, "What it costs").

Both sides read the first ``--n`` records of ``--input`` (records with steps) with the verifier
``--model`` (a folder of ``prmkit train verifier``, or any instruct model with ``--format``),
K = ``--samples`` verifications per solution at ``--temperature`` (0: greedy), at most
``--max-new-tokens`` each, stopping at the template's stop strings:

* prmkit: ``GenerativePRM.score`` on the transformers backend, verdict probabilities and the
  solution-level decision included: a prompt is prefilled once for its K samples, and up to 8
  solutions with as many steps are sampled in one batch;
* transformers: ``model.generate`` on each solution's prompt alone, ``num_return_sequences=K``
  (K prefills), ``stop_strings`` the template's: the sampling alone, nothing read after it.

The two sides alternate, ``--repeats`` times each, in this one process on ``--threads`` threads
(run it with nothing else on the machine). The table gives each side's median seconds and
generated tokens per solution, tokens per second, and the ratio transformers / prmkit in seconds
per solution with its range over the repeats. Usage:

    python bench/generative_cost.py --model runs/verifier --input held.jsonl --n 16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def prmkit_side(prm, problems, steps) -> tuple[float, int]:
    """Seconds and generated tokens of one ``score`` call."""
    before = prm.stats.tokens_generated
    start = time.perf_counter()
    prm.score(problems, steps)
    return time.perf_counter() - start, prm.stats.tokens_generated - before


def transformers_side(prm, problems, steps, samples: int, max_new: int, sampling,
                      ) -> tuple[float, int]:
    """Seconds and generated tokens of ``generate`` on each prompt alone, sampling as prmkit's
    side does (``sampling``: :class:`prmkit.verify.backend.Sampling`)."""
    import torch

    from prmkit.generate.hf import encode_prompt
    from prmkit.verify import templates as T

    gen = prm.backend.gen
    model, tok = gen.model, gen.tokenizer
    tokens, start = 0, time.perf_counter()
    for problem, solution in zip(problems, steps):
        prompt = T.whole_prompt(prm.template, prm.chat, problem, T.shown(solution, prm.calculator))
        ids = torch.tensor([encode_prompt(tok, prompt)])
        how = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
               "top_k": sampling.top_k or None} if sampling.temperature > 0 else {"do_sample": False}
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                 num_return_sequences=samples, stop_strings=T.whole_stops(len(solution)),
                                 tokenizer=tok, pad_token_id=gen.pad_id, **how)
        for row in out[:, ids.shape[1]:].tolist():
            tokens += next((i + 1 for i, t in enumerate(row) if t in (gen.pad_id, tok.eos_token_id)),
                           len(row))
    return time.perf_counter() - start, tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--format", default=None, help="the template (default: the folder's)")
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="auto")
    args = p.parse_args()

    import torch

    from prmkit.models.reading import HFConfig
    from prmkit.records import read_records
    from prmkit.verify.load import open_generative
    from prmkit.verify.prm import GenConfig

    torch.set_num_threads(args.threads)
    records = [r for r in read_records(args.input) if r.steps][:args.n]
    problems, steps = [r.problem for r in records], [r.steps for r in records]
    prm = open_generative(args.model, args.format, GenConfig(
        samples=args.samples, max_new_tokens=args.max_new_tokens, temperature=args.temperature),
        hf=HFConfig(dtype=args.dtype))
    if prm.template.per_step:
        sys.exit(f"--format {prm.template.name}: one verification per step; this bench compares "
                 f"whole verifications (thinkprm, plain)")
    cfg = prm.config
    runs: dict[str, list[tuple[float, int]]] = {"prmkit": [], "transformers": []}
    for r in range(args.repeats):
        runs["prmkit"].append(prmkit_side(prm, problems, steps))
        runs["transformers"].append(transformers_side(prm, problems, steps, cfg.samples,
                                                      cfg.max_new_tokens, cfg.sampling))
        print(f"repeat {r + 1}: " + ", ".join(f"{k} {v[-1][0]:.1f} s" for k, v in runs.items()),
              file=sys.stderr)
    n = len(records)
    dtype = str(next(prm.backend.gen.model.parameters()).dtype).replace("torch.", "")
    print(f"{n} solutions, K={cfg.samples}, temperature {cfg.temperature}, at most "
          f"{cfg.max_new_tokens} new tokens, {dtype}, {args.threads} threads, "
          f"{args.repeats} repeats\n")
    print("| side | seconds per solution (median) | tokens per solution | tokens per second |")
    print("|---|---|---|---|")
    for side, got in runs.items():
        secs = statistics.median(s for s, _ in got)
        toks = statistics.median(t for _, t in got)
        print(f"| {side} | {secs / n:.2f} | {toks / n:.0f} | {toks / secs:.1f} |")
    ratios = [t[0] / k[0] for k, t in zip(runs["prmkit"], runs["transformers"])]
    print(f"\ntransformers / prmkit, seconds: median {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f} to {max(ratios):.2f} over {len(ratios)} repeats)")


if __name__ == "__main__":
    main()
