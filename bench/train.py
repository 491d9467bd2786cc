"""PRM training speed and quality: prmkit's trainer against TRL's PRMTrainer, side by side.

Both trainers run in this one process on the same starting weights, the same data, the same
trainable parameters and the same number of optimiser steps; then the same code scores both
trained models on held-out labelled steps.

* Model: SmolLM2-135M-Instruct (``prmkit.models.pypi.resolve("smollm2-135m")``) as
  ``AutoModelForTokenClassification`` with 2 labels; the new head is initialised once (seeded)
  and copied, so both trainers start from identical weights.
* Trainable: ``prmkit.train.loop.set_trainable`` (default ``last-k`` with k=2: the last 2
  layers, the final norm and the head), applied once before the copy. TRL trains whatever
  requires a gradient, so both train exactly the same tensors (checked).
* Step format: TRL's convention (prompt, then each completion + "\\n", the label on the last
  token of each, ``tokenizer.bos_token_id`` first whenever the tokenizer has one, even if the
  tokenizer itself never adds it; SmolLM2: ``<|im_start|>``), which is prmkit's ``trl`` preset
  (``bos: always``) with a 2-class head. The bench checks that prmkit's ids and read positions
  equal TRL's ids and labelled positions for every training record, and that TRL trained on
  exactly prmkit's sequences.
* Data: PRM800K phase-1 human step labels, converted as ``prmkit convert --from prm800k
  --prm800k-alternatives --skip-empty`` (neutral = 1). Train: a seeded sample of
  ``--n-train`` records of the train part with every step labelled (TRL cannot hold an
  unlabelled step) and at most ``--max-length`` tokens, written with ``prmkit convert --to trl``
  and loaded with ``datasets.Dataset.from_list`` for TRL. Dev: ``--n-dev`` records of the
  *test* part with at least one labelled step (same length rule).
* Batches: TRL takes ``--batch-size`` random sequences per step (padded to the longest);
  prmkit packs length-sorted sequences under a token budget. The budget is the smallest one
  that packs the training set into at most as many batches as TRL has per epoch
  (ceil(n_train / batch size)), so the mean number of sequences per step matches (both are
  printed). With the defaults (96 records, batch 8, 12 steps) both run exactly one epoch.
* Optimiser: AdamW, the same peak lr, no warm-up (prmkit's one warm-up step is the peak),
  linear decay, weight decay 0, gradient clipping 1.0, fp32 (or bf16 autocast on both with
  ``--dtype bfloat16``). TRL's own defaults of gradient checkpointing and bf16 are turned off so
  both do the same computation; ``--trl-gradient-checkpointing`` turns TRL's back on.
* Tokens/s: real (non-padding) tokens of the trained batches / wall time of the training call
  (``Loop.run()`` for prmkit, ``trainer.train()`` for TRL); also per CPU second of this
  process over the same call, which other jobs on a shared machine disturb less. Each side
  trains ``--repeats`` times (default 3) from the same start, the order alternating (A B, B A,
  A B); the fastest run of each counts, the others are printed. Training is deterministic, so
  every run yields the same weights (checked). Model loading, tokenisation and
  trainer construction are outside both; prmkit's end-of-run checkpoint write (``last/`` and
  ``best/``, which it always does) is inside its time, TRL saves nothing (``save_strategy="no"``).
* Dev metric: step AUC (``prmkit.train.prm.auc`` through ``validate``) of ``HFPRM`` in float32
  around each trained model, with the format prmkit trained on; also for the untrained start.

Usage: ``.venv-bench/bin/python bench/train.py [--n-train 96] [--n-dev 96] [--steps 12] ...``
(``make bench-train``). Needs ``trl`` (1.13.0: the last release with ``PRMTrainer``, in
``trl.experimental.prm``) and ``datasets``, which live in ``.venv-bench``, not in ``.venv``.
Prints the figures last: ``RESULT prmkit/trl tokens/s ratio X.XX | dev AUC prmkit A vs trl B``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import time
import warnings
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from prmkit import formats  # noqa: E402
from prmkit.models.backends.hf import HFConfig, HFPRM, Reader  # noqa: E402
from prmkit.records import Record, write_records  # noqa: E402
from prmkit.models import folder as modeldir  # noqa: E402
from prmkit.train.loop import (Loop, LoopConfig, set_trainable, trainable_names,  # noqa: E402
                               training_batches)
from prmkit.train.prm import (PRMTrainConfig, StepObjective, make_saver, step_examples,  # noqa: E402
                              training_format, validate)
from prmkit.shareddata import shared_data_dir  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DATA = shared_data_dir()
PRM800K = "prm800k_stepwise_critic/phase1_{}.stepwise-critic.parquet"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# data


def sample(path: str, n: int, seed: int, bound, max_length: int, every_step: bool) -> list[Record]:
    """Seeded sample of converted PRM800K records whose sequence fits in ``max_length``."""
    opts = formats.ConvertOptions(prm800k_alternatives=True, skip_empty=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "left out N sessions" note of --skip-empty
        recs = list(formats.read("prm800k", path, opts))
    keep = [r for r in recs if r.labels and (all(x is not None for x in r.labels) if every_step
                                             else any(x is not None for x in r.labels))]
    random.Random(seed).shuffle(keep)
    out = []
    for r in keep:
        if len(out) == n:
            break
        if not bound.encode(r.problem, r.steps, max_length=max_length).truncated:
            out.append(r)
    if len(out) < n:
        raise SystemExit(f"{path}: only {len(out)} records fit, asked for {n}")
    return out


def budget_for(lengths: list[int], steps: int, seed: int) -> int:
    """The smallest token budget under which prmkit's loop packs ``lengths`` into at most
    ``steps`` batches (its own batching, :func:`prmkit.train.loop.training_batches`)."""
    lo, hi = max(lengths), max(lengths) * len(lengths)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(training_batches(lengths, mid, seed)) <= steps:
            hi = mid
        else:
            lo = mid + 1
    return lo


# ---------------------------------------------------------------------------------------------
# the two trainers


class CountingLoop(Loop):
    """prmkit's loop, counting the tokens of every batch it trains on (nothing else changed)."""

    real_tokens = 0
    computed_tokens = 0
    sequences = 0

    def _loss(self, batch):
        lens = [len(self.examples[i]) for i in batch]
        self.real_tokens += sum(lens)
        self.computed_tokens += max(lens) * len(lens)
        self.sequences += len(lens)
        return super()._loss(batch)


def run_prmkit(model, tokenizer, fmt, examples, args, budget, out_dir, train_path) -> dict:
    loop_cfg = LoopConfig(train=args.train, last_k=args.last_k, max_steps=args.steps, lr=args.lr,
                          warmup=0.0, batch_tokens=budget, seed=args.seed, resume=False)
    cfg = PRMTrainConfig(base="smollm2-135m", data=train_path, output=out_dir, format="trl",
                         head="class", max_length=args.max_length, dtype=args.dtype, loop=loop_cfg,
                         command="bench/train.py")
    saver = make_saver(cfg, fmt, tokenizer, "prm", model, len(examples), 0)
    save_seconds = [0.0]

    def save(m, folder, metrics):  # prmkit's own saver, timed
        t = time.perf_counter()
        saver(m, folder, metrics)
        save_seconds[0] += time.perf_counter() - t

    reader = Reader(model, fmt, fmt.bind(tokenizer))
    pad = next(i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None)
    loop = CountingLoop(model, StepObjective(reader, pad), examples, loop_cfg, out_dir,
                        "neg_train_loss", lambda m: {}, save,
                        autocast_bf16=args.dtype == "bfloat16")
    t, c = time.perf_counter(), time.process_time()
    history = loop.run()
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    return dict(seconds=seconds, cpu_seconds=cpu, real_tokens=loop.real_tokens, computed_tokens=loop.computed_tokens,
                sequences=loop.sequences, steps=loop.step, batches=len(loop.batches),
                checkpoint_seconds=save_seconds[0], train_loss=history[-1]["train_loss"],
                optimizer=type(loop.opt.optimizer if hasattr(loop.opt, "optimizer") else loop.opt).__name__)


def run_trl(model, tokenizer, rows, args, out_dir) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl.experimental.prm import PRMConfig, PRMTrainer

    config = PRMConfig(
        output_dir=out_dir, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
        learning_rate=args.lr, lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, gradient_checkpointing=args.trl_gradient_checkpointing,
        bf16=args.dtype == "bfloat16", fp16=False, use_cpu=True, seed=args.seed,
        data_seed=args.seed, max_length=args.max_length, step_separator="\n",
        save_strategy="no", eval_strategy="no", report_to="none", logging_steps=1,
        dataloader_num_workers=0, disable_tqdm=False,
        train_sampling_strategy="group_by_length" if args.trl_group_by_length else "random")
    counts = dict(real_tokens=0, computed_tokens=0, sequences=0)

    def count(_module, _args, kwargs):
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is not None and torch.is_grad_enabled():
            counts["computed_tokens"] += ids.numel()
            counts["real_tokens"] += int(mask.sum()) if mask is not None else ids.numel()
            counts["sequences"] += ids.shape[0]

    losses = []

    class Losses(TrainerCallback):
        def on_log(self, _args, _state, _control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(logs["loss"])

    trainer = PRMTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer, callbacks=[Losses()])
    handle = trainer.model.register_forward_pre_hook(count, with_kwargs=True)
    t, c = time.perf_counter(), time.process_time()
    out = trainer.train()
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    handle.remove()
    # the same smoothing as prmkit's progress bar, so the two losses compare
    running = None
    for x in losses:
        running = x if running is None else 0.9 * running + 0.1 * x
    return dict(seconds=seconds, cpu_seconds=cpu, steps=out.global_step, train_loss=round(running or float("nan"), 6),
                optimizer=type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer")
                               else trainer.optimizer).__name__,
                tokenized=trainer.train_dataset, **counts)


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="the shared data folder")
    ap.add_argument("--n-train", type=int, default=96, help="training records")
    ap.add_argument("--n-dev", type=int, default=96, help="held-out dev records (test part)")
    ap.add_argument("--steps", type=int, default=12, help="optimiser steps, both trainers")
    ap.add_argument("--batch-size", type=int, default=8,
                    help="TRL per_device_train_batch_size; prmkit's token budget is set to match")
    ap.add_argument("--lr", type=float, default=2e-4, help="peak learning rate, both trainers")
    ap.add_argument("--train", default="last-k", choices=("last-k", "full"))
    ap.add_argument("--last-k", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=512,
                    help="only records that fit in this many tokens are sampled")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="training compute dtype, both (bfloat16 = autocast)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3,
                    help="train each side this many times from the same start, alternating the "
                         "order; the fastest run of each counts (all are printed)")
    ap.add_argument("--order", default="prmkit,trl", choices=("prmkit,trl", "trl,prmkit"),
                    help="which trainer runs first")
    ap.add_argument("--trl-gradient-checkpointing", action="store_true",
                    help="keep TRL's default gradient checkpointing (prmkit has none)")
    ap.add_argument("--trl-group-by-length", action="store_true",
                    help="TRL batches of similar length (train_sampling_strategy=\"group_by_length\"; off "
                         "by default), which cuts its padding")
    ap.add_argument("--output", default=os.path.join(ROOT, "runs", "bench_train"))
    args = ap.parse_args(argv)

    import accelerate
    import datasets
    import transformers
    import trl
    from transformers import AutoTokenizer
    from trl.experimental.prm import PRMTrainer

    from prmkit.models.pypi import resolve

    os.makedirs(args.output, exist_ok=True)
    versions = dict(torch=torch.__version__, transformers=transformers.__version__,
                    trl=trl.__version__, accelerate=accelerate.__version__,
                    datasets=datasets.__version__, threads=torch.get_num_threads())
    log(f"versions: {versions}; load average at start {os.getloadavg()}")

    # -- model, tokenizer, format ------------------------------------------------------------
    path = resolve("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:  # TRL's collator pads with it; prmkit falls back to eos
        tokenizer.pad_token = tokenizer.eos_token
    fmt = training_format("trl", "class")
    bound = fmt.bind(tokenizer)

    # -- data ----------------------------------------------------------------------------------
    t = time.perf_counter()
    train = sample(os.path.join(args.data, PRM800K.format("train_plus")), args.n_train, args.seed,
                   bound, args.max_length, every_step=True)
    dev = sample(os.path.join(args.data, PRM800K.format("test")), args.n_dev, args.seed,
                 bound, args.max_length, every_step=False)
    train_path = os.path.join(args.output, "train.jsonl")
    trl_path = os.path.join(args.output, "train.trl.jsonl")
    write_records(train_path, train)
    write_records(os.path.join(args.output, "dev.jsonl"), dev)
    formats.write("trl", trl_path, formats.read("prmkit", train_path))  # prmkit convert --to trl
    with open(trl_path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    examples, _ = step_examples(train, bound, args.max_length, soft=False, until_first_error=False)
    lengths = [len(e.input_ids) for e in examples]
    # as many batches as TRL has per epoch, so the mean sequences per step match
    budget = budget_for(lengths, -(-len(examples) // args.batch_size), args.seed)
    n_batches = len(training_batches(lengths, budget, args.seed))
    dev_steps = [float(y >= 0.5) for r in dev for y in r.labels if y is not None]
    log(f"data: {len(train)} train records ({sum(lengths)} tokens, {sum(len(e.targets) for e in examples)} "
        f"labelled steps, {sum(t_ < 0.5 for e in examples for t_ in e.targets)} wrong); {len(dev)} dev "
        f"records ({len(dev_steps)} labelled steps, {int(len(dev_steps) - sum(dev_steps))} wrong); "
        f"prmkit budget {budget} tokens -> {n_batches} batches ({time.perf_counter() - t:.1f} s)")

    # prmkit and TRL must see the same ids and read the same positions
    same_ids = same_pos = 0
    for r, e in zip(train, examples):
        row = PRMTrainer.tokenize_row({"prompt": r.problem, "completions": r.steps,
                                       "labels": [y >= 0.5 for y in r.labels]}, tokenizer, "\n",
                                      args.max_length, None, False, False)
        same_ids += row["input_ids"] == e.input_ids
        pos = [i for i, y in enumerate(row["labels"]) if y != -100]
        same_pos += pos == e.read_positions and \
            [float(row["labels"][i]) for i in pos] == e.targets
    log(f"format {fmt.prefix!r}+steps: prmkit ids equal TRL's for {same_ids}/{len(train)} records, "
        f"read positions and targets for {same_pos}/{len(train)}")

    # -- one starting model for both -----------------------------------------------------------
    torch.manual_seed(args.seed)
    base, _ = modeldir.load_model(path, "token-classification", 2, torch.float32)
    if base.config.pad_token_id is None:
        base.config.pad_token_id = tokenizer.pad_token_id
    base = set_trainable(base, LoopConfig(train=args.train, last_k=args.last_k))
    start = {k: v.detach().clone() for k, v in base.state_dict().items()}
    names = trainable_names(base)
    n_trainable = sum(p.numel() for p in base.parameters() if p.requires_grad)

    # warm up the kernels once (forward + backward, no optimiser step), so neither side pays it
    ids = torch.tensor([examples[0].input_ids] * 2)
    base.train()
    base(input_ids=ids).logits.sum().backward()
    for p in base.parameters():
        p.grad = None

    # each side trains --repeats times from a fresh copy of the same start, the order alternating
    # (A B, B A, A B, ...); the fastest run of each counts (the others are printed)
    first, second = args.order.split(",")
    runs: dict[str, list[dict]] = {"prmkit": [], "trl": []}
    models: dict[str, Any] = {}
    trained: dict[str, dict] = {}
    for rep in range(args.repeats):
        for name in ((first, second) if rep % 2 == 0 else (second, first)):
            model = copy.deepcopy(base)
            assert trainable_names(model) == names
            load_before = os.getloadavg()[0]
            log(f"--- training {name}, run {rep + 1}/{args.repeats} (load average {load_before:.2f})")
            if name == "prmkit":
                r = run_prmkit(model, tokenizer, fmt, examples, args, budget,
                               os.path.join(args.output, "prmkit"), train_path)
            else:
                r = run_trl(model, tokenizer, rows, args, os.path.join(args.output, "trl"))
                # TRL tokenised the same rows itself: it must have trained on prmkit's sequences
                tokenized = sorted(tuple(x) for x in r.pop("tokenized")["input_ids"])
                assert tokenized == sorted(tuple(e.input_ids) for e in examples)
            r.update(load_before=load_before, load_after=os.getloadavg()[0])
            # only the trainable tensors moved
            state = model.state_dict()
            moved = [k for k, v in state.items() if not torch.equal(v, start[k])]
            assert set(moved) <= set(names), f"{name} changed frozen tensors: {moved[:3]}"
            r["moved_tensors"] = len(moved)
            now = {k: state[k].detach().clone() for k in names}
            if name in trained:  # the same start, data and seed: the same weights every run
                r["same_weights_as_run_1"] = all(torch.equal(now[k], trained[name][k]) for k in names)
            trained[name] = now
            runs[name].append(r)
            models[name] = model
            log(f"    {name}: {r['seconds']:.1f} s, {r['cpu_seconds']:.1f} CPU s")
    results: dict[str, dict] = {}
    for name, rs in runs.items():
        results[name] = dict(min(rs, key=lambda r: r["seconds"]),
                             all_seconds=[round(r["seconds"], 1) for r in rs],
                             all_cpu_seconds=[round(r["cpu_seconds"], 1) for r in rs],
                             deterministic=all(r.get("same_weights_as_run_1", True) for r in rs))

    # -- the same dev metric for both ------------------------------------------------------------
    hf = HFConfig(dtype="float32", max_length=args.max_length)
    base.load_state_dict(start)
    for name, m in [*models.items(), ("untrained", base)]:
        t = time.perf_counter()
        results.setdefault(name, {}).update(validate(HFPRM(m, tokenizer, fmt, hf), dev))
        log(f"dev {name}: {results[name]} ({time.perf_counter() - t:.1f} s)")

    # -- report -----------------------------------------------------------------------------------
    for r in results.values():
        if "seconds" in r:
            r["tokens_per_s"] = r["real_tokens"] / r["seconds"]
            r["tokens_per_cpu_s"] = r["real_tokens"] / r["cpu_seconds"]
            r["padding_efficiency"] = r["real_tokens"] / r["computed_tokens"]
            r["seqs_per_step"] = r["sequences"] / r["steps"]
    p, q = results["prmkit"], results["trl"]
    summary = dict(date=time.strftime("%Y-%m-%d %H:%M"), versions=versions, args=vars(args),
                   format=fmt.to_dict(), trainable_parameters=n_trainable, budget=budget,
                   n_train_tokens=sum(lengths), results=results,
                   ratio=p["tokens_per_s"] / q["tokens_per_s"],
                   cpu_ratio=p["tokens_per_cpu_s"] / q["tokens_per_cpu_s"])
    with open(os.path.join(args.output, "result.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, default=str)

    print(f"model SmolLM2-135M token classification (2 labels), train {args.train}"
          + (f" k={args.last_k}" if args.train == "last-k" else "")
          + f" ({n_trainable:,} parameters), {args.dtype}, lr {args.lr}, {args.steps} steps, "
            f"seed {args.seed}, {torch.get_num_threads()} threads")
    print(f"data: {len(train)} PRM800K train records ({sum(lengths)} tokens), {len(dev)} dev records "
          f"({len(dev_steps)} labelled steps, {int(len(dev_steps) - sum(dev_steps))} wrong)")
    print(f"{'':9}{'steps':>6}{'seq/step':>9}{'real tok':>9}{'pad eff':>8}{'seconds':>9}"
          f"{'cpu s':>8}{'tok/s':>8}{'tok/cpu-s':>10}{'loss':>8}{'dev AUC':>9}{'dev F1':>8}")
    for name in ("prmkit", "trl"):
        r = results[name]
        print(f"{name:9}{r['steps']:>6}{r['seqs_per_step']:>9.2f}{r['real_tokens']:>9}"
              f"{r['padding_efficiency']:>8.3f}{r['seconds']:>9.1f}{r['cpu_seconds']:>8.1f}"
              f"{r['tokens_per_s']:>8.0f}{r['tokens_per_cpu_s']:>10.0f}"
              f"{r['train_loss']:>8.4f}{r.get('dev_auc', float('nan')):>9.4f}"
              f"{r.get('dev_f1', float('nan')):>8.2f}")
    for name in ("prmkit", "trl"):
        r = results[name]
        print(f"{name} runs: wall {r['all_seconds']} s, CPU {r['all_cpu_seconds']} s; weights "
              f"identical across runs: {r['deterministic']}")
    u = results["untrained"]
    print(f"untrained start: dev AUC {u.get('dev_auc', float('nan')):.4f}; prmkit time includes "
          f"{p['checkpoint_seconds']:.1f} s of checkpoint writing; load average "
          f"{p['load_before']:.2f}->{p['load_after']:.2f} (prmkit), "
          f"{q['load_before']:.2f}->{q['load_after']:.2f} (trl)")
    print(f"cpu-time ratio (tokens per CPU second of this process, less sensitive to other "
          f"jobs): {summary['cpu_ratio']:.2f}")
    print(f"RESULT prmkit/trl tokens/s ratio {summary['ratio']:.2f} | dev AUC prmkit "
          f"{p.get('dev_auc', float('nan')):.4f} vs trl {q.get('dev_auc', float('nan')):.4f}")


if __name__ == "__main__":
    main()
