"""The lab demo: the whole PRM story on one CPU (``prmkit demo``, ``make demo``).

Every stage is the library code a user runs on real data; only the policy is the lab's
synthetic one (:mod:`prmkit.world.policy`). The PRM (a surprisal head) and the ORM are heads on
a frozen SmolLM2-135M, trained here on the same candidates with the same budget, both reading a
calculator's notes on wrong equations (``--no-calculator`` leaves them out).

1. **Problems and candidates**: lab problems, candidates from the lab policy, graded.
2. **Monte Carlo labels** (Math-Shepherd, Wang et al. 2024) against the exact gold labels, and
   binary search for the first error (OmegaPRM, Luo et al. 2024) with the rollouts it saves.
3. **Training**: a PRM on the MC step labels and an ORM on the outcomes; the ORM is Let's
   Verify's class head read at the last step (``--orm-recipe`` picks another).
4. **Best-of-N** (Lightman et al. 2023): PRM (prod, min, last), ORM, majority, PRM-weighted
   majority, the exact-label PRM and the oracle.
5. **Search** (``--full`` only; its protocol's cost is most of the full demo's time):
   PRM-guided beam search at widths B against best-of-4B on harder problems of its own, with
   generated tokens, Holm-corrected over the widths (Snell et al. 2024;
   :mod:`prmkit.lab.demo.search`).
6. **Report**: an HTML page with plots, tables and every test solution's steps coloured by
   the PRM; the summary table is printed last.

Every number is measured by the run. The stages write into ``--output``; a rerun with the same
settings reuses every finished stage, so a killed demo continues where it stopped. The search
stage's settings (:data:`prmkit.lab.demo.search.FIELDS`) and ``--implicit``'s are their stages'
own: changing them redoes that stage alone. ``--margin`` and ``--full`` are read by the summary
and the search stage only, so a demo run without ``--full`` and then with it reuses stages 1-4.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.lab.demo import implicit as implicitstage
from prmkit.lab.demo import report
from prmkit.lab.demo.scoring import score_test
from prmkit.lab.demo import search as searchstage
from prmkit.world.problems import LabConfig
from prmkit.lab.candidates import SplitConfig
from prmkit.world.config import WorldConfig
from prmkit.lab.stages import Lazy, Printer, begin, stage
from prmkit.models.reading import fast_dtype
from prmkit.records import Record
from prmkit.train.common import HEADS

# Stored with the settings: a folder written by another version of the stages starts again
# rather than reusing files the current code would not make. Raise it when a stage's output
# changes.
STAGES_VERSION = 11
ORM_RECIPES = ("class", "prm", "own")


@dataclass
class DemoConfig:
    """Sizes and budgets of the lab demo."""

    output: str = field(default="demo_out", metadata={"help": "folder for every file the demo writes"})
    world: WorldConfig = field(default_factory=WorldConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    rollouts: int = field(default=4, metadata={"help": "Monte Carlo rollouts per labelled step (K)"})
    base: str = field(default="smollm2-135m", metadata={"help": "base model of the PRM and the ORM"})
    last_k: int = field(default=4, metadata={"help": "--orm-recipe own: the ORM's trained layers (plus head)"})
    lr: float = field(default=3e-4, metadata={"help": "--orm-recipe own: the ORM's peak learning rate"})
    head_lr: float = field(default=0.0, metadata={
        "help": "peak learning rate of the new heads of the models that train layers (the ORM; "
                "the PRM when --prm-last-k > 0), their bodies at their own rate (0: the heads "
                "at that rate too)"})
    epochs: int = field(default=1, metadata={"help": "--orm-recipe own: the ORM's passes over the training candidates"})
    head: str = field(default="surprisal", metadata={
        "help": "the PRM's head (prmkit train prm --head): surprisal (every token's P(no "
                "error) from its state and the LM's surprise at it, multiplied up to each "
                "step), hazard (the same without the surprise), class (read at each step's "
                "tag) or label-tokens"})
    calculator: bool = field(default=True, metadata={
        "help": "the PRM and the ORM read a calculator's checks: the value after every wrong "
                "equation of a step ('= 9 [calculator: 8]'; as train prm "
                "--calculator)"})
    prm_last_k: int = field(default=0, metadata={
        "help": "the PRM's trained transformer layers (0: its head alone on the frozen body, "
                "whose states and LM features are computed once: train prm --last-k 0 "
                "--cache-frozen)"})
    prm_lr: float = field(default=1e-3, metadata={
        "help": "the PRM's peak learning rate"})
    prm_batch_tokens: int = field(default=4096, metadata={
        "help": "the PRM's training batch, in tokens (the ORM's is --batch-tokens)"})
    prm_epochs: int = field(default=16, metadata={
        "help": "the PRM's passes over the training candidates"})
    batch_tokens: int = field(default=512, metadata={"help": "--orm-recipe own: the ORM's batch, in tokens"})
    orm_recipe: str = field(default="class", metadata={
        "help": "class: Let's Verify's ORM, one classifier of the whole solution read at its "
                "last step (a class head on the frozen body, with the PRM's budget: "
                "--prm-last-k, --prm-lr, --prm-epochs, --prm-batch-tokens and its stored "
                "states), trained on the outcome labels; prm: the PRM's own head read at the "
                "last step (a survival head: P(no error anywhere), a product over every "
                "token, so its training on outcomes also gives step credit, an outcome-"
                "supervised PRM); own: its last --last-k layers and a class head, at --lr for "
                "--epochs in batches of --batch-tokens"})
    full: bool = field(default=False, metadata={
        "help": "also run stage 5, the search stage: the beam-search claim's protocol (beam "
                "search at each width of --beam-n against best-of-4B on --search-problems "
                "problems; most of the full demo's time, docs/lab.md). Without it "
                "the demo runs stages 1-4 and the best-of-N claims."})
    search_problems: int = field(default=320, metadata={
        "help": "problems for beam search: lab problems of their own (seed + 2000), harder "
                "than the test problems (--search-min-steps, --search-max-steps). Beam search "
                "at each width B against best-of-4B is a non-inferiority claim with a margin "
                "of --margin points, the widths Holm-corrected as one family (320: the power "
                "that claim needs, docs/lab.md)."})
    search_min_steps: int = field(default=4, metadata={
        "help": "fewest operations per search problem"})
    search_max_steps: int = field(default=8, metadata={
        "help": "most operations per search problem"})
    beam_n: list[int] = field(default_factory=lambda: [4, 8], metadata={
        "help": "beam search widths B (candidates per step), each compared with best-of-N at "
                "4B samples of the search problems. With B = M one beam survives each step."})
    beam_m: int = field(default=4, metadata={
        "help": "beam search: next steps sampled per kept beam (B / M beams are kept; M=4 is "
                "search-and-learn's beam width)"})
    score_dtype: str = field(default="auto", metadata={
        "help": "dtype the PRM and the ORM score and search in; auto: bfloat16 with the "
                "calculator where auto means bfloat16 (a CPU with native bfloat16, or "
                "PRMKIT_AUTO_DTYPE), float32 without the calculator or elsewhere"})
    select: str = field(default="prm-prod", metadata={
        "help": "how the PRM picks a candidate in the claims (prm-prod, prm-min, prm-last), "
                "fixed before the run; prod is Let's Verify's choice"})
    margin: float = field(default=5.0, metadata={
        "help": "non-inferiority margin in points: beam search at B 'matches' best-of-4B when the "
                "95%% interval of their difference lies above minus this"})
    implicit: bool = field(default=False, metadata={
        "help": "also train an implicit PRM (Yuan et al. 2024: beta log pi/pi_ref, outcome labels "
                "only) on the training candidates and report its best-of-N and step AUC as rows "
                "of their own, not in the claims (prmkit.lab.demo.implicit)"})
    implicit_last_k: int = field(default=2, metadata={
        "help": "--implicit: the implicit PRM's trained layers, the base's last k and its final norm"})
    implicit_epochs: int = field(default=2, metadata={"help": "--implicit: the implicit PRM's epochs"})
    implicit_lr: float = field(default=2e-4, metadata={
        "help": "--implicit: the implicit PRM's peak learning rate"})

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise PrmkitError(f"--head {self.head!r} is not one of {', '.join(HEADS)}")
        if self.prm_last_k < 0 or min(self.prm_epochs, self.prm_batch_tokens) < 1 \
                or not self.prm_lr > 0:
            raise PrmkitError("--prm-last-k must be 0 or more, --prm-epochs and "
                              "--prm-batch-tokens at least 1 and --prm-lr positive")
        if self.orm_recipe not in ORM_RECIPES:
            raise PrmkitError(f"--orm-recipe {self.orm_recipe!r} is not one of "
                              f"{', '.join(ORM_RECIPES)}")
        if self.head_lr < 0:
            raise PrmkitError(f"--head-lr must be 0 (the heads at --lr) or positive, got "
                              f"{self.head_lr}")
        if self.score_dtype not in ("auto", "float32", "bfloat16"):
            raise PrmkitError(f"--score-dtype {self.score_dtype!r} is not auto, float32 or "
                              f"bfloat16")
        if self.select not in report.PRM_METHODS:
            raise PrmkitError(f"--select {self.select!r} is not one of "
                              f"{', '.join(report.PRM_METHODS)}")
        if min(self.implicit_last_k, self.implicit_epochs) < 1 or not self.implicit_lr > 0:
            raise PrmkitError("--implicit-last-k and --implicit-epochs must be at least 1 and "
                              "--implicit-lr positive")
        if self.margin < 0:
            raise PrmkitError(f"--margin must be at least 0, got {self.margin}")
        if not self.beam_n or self.beam_m < 1 or any(b < 1 or b % self.beam_m
                                                      for b in self.beam_n):
            raise PrmkitError(f"--beam-n {' '.join(map(str, self.beam_n))}: each width must "
                              f"be a positive multiple of --beam-m {self.beam_m}")
        if len(set(self.beam_n)) != len(self.beam_n):
            raise PrmkitError(f"--beam-n {' '.join(map(str, self.beam_n))}: a width twice")
        if self.search_problems < 1:
            raise PrmkitError(f"--search-problems must be at least 1, got {self.search_problems}")
        LabConfig(n=1, min_steps=self.search_min_steps, max_steps=self.search_max_steps)

def run(config: DemoConfig) -> int:
    out = config.output
    say = begin("demo", config, STAGES_VERSION, f"the lab world, seed {config.world.seed}",
                own=implicitstage.FIELDS + searchstage.FIELDS, free=("margin", "full"))
    world = _world(config, out, say)
    labels = _labels(config, out, world, say)
    prm_dir, orm_dir = os.path.join(out, "prm"), os.path.join(out, "orm")
    _train(config, "prm", os.path.join(out, "train_mc.jsonl"), prm_dir, say)
    _train(config, "orm", os.path.join(out, "train_candidates.jsonl"), orm_dir, say)
    recipe = (f"{_trained(config.prm_last_k)}, {config.prm_epochs} epoch(s), lr "
              f"{config.prm_lr}, batches of {config.prm_batch_tokens} tokens")
    orm = ({"prm": "the same head and recipe", "class": "a class head read at the last step, "
            "the same budget"}.get(config.orm_recipe) or
           f"class head, {_trained(config.last_k)}, {config.epochs} epoch(s), lr {config.lr}"
           f"{f', heads {config.head_lr}' if config.head_lr else ''}, batches of "
           f"{config.batch_tokens} tokens")
    tool = "; both read the calculator's notes" if config.calculator else ""
    say.stage(3, f"trained from {config.base} on {len(world.train)} candidates: a PRM "
                 f"({config.head} head, MC step labels; {recipe}) and an ORM (outcome labels; "
                 f"{orm}){tool}")
    dtype = config.score_dtype if config.score_dtype != "auto" else (
        "bfloat16" if config.calculator and fast_dtype() == "bfloat16" else "float32")
    prm = Lazy(lambda: _load(prm_dir, dtype))     # loaded once, for scoring and for search
    scored = stage(out, "test_scored.jsonl", lambda: score_test(world, prm(),
                                                             _load(orm_dir, dtype)))
    bon = report.bestofn_stage(config, scored, say)
    implicit = implicitstage.implicit_stage(config, os.path.join(out, "train_candidates.jsonl"),
                                            world.test, out, dtype)
    figures = None if implicit is None else implicitstage.implicit_figures(
        config, implicit, world.gold, bon.curve["n"])
    if figures is not None:
        say.stage(4, "; ".join(f"{k}: {v}" for k, v in report.implicit_rows(figures)))
    search = searchstage.search_stage(config, world, prm, out) if config.full else None
    if search is not None:
        say.stage(5, f"search on {search['problems']} problems of {search['operations'][0]}-"
                     f"{search['operations'][1]} operations, {searchstage.pool(config)} samples "
                     f"each (accuracy {report.pct(search['sample_accuracy'])}): " + "; ".join(
            f"{row['method']} n={row['n']} {row['accuracy']:.1f}% at {row['tokens']:.0f} tokens"
            for row in search["rows"]))
    result = report.Results(config, scored, bon, labels, search, world.gold, figures)
    report.finish(result, out, say, say.elapsed)
    return 0


@dataclass
class World:
    """Stage 1's output: the problems, their candidates and the gold labels."""

    train: list[Record]
    test: list[Record]
    test_problems: list[Record]
    gold: dict[str, Record]
    policy: Any
    prompter: Any
    policy_name: str


def _world(config: DemoConfig, out: str, say: "Printer") -> World:
    """1. problems and candidates."""
    from prmkit.lab import gold_record
    from prmkit.lab.candidates import split_of

    split = split_of(config.world, config.split.train_problems, config.split.test_problems)
    train = stage(out, "train_candidates.jsonl", lambda: split.train(config.split.train_n))
    test = stage(out, "test_candidates.jsonl", lambda: split.test(config.split.n))
    gold = {r.id: gold_record(r) for r in train + test}
    say.stage(1, f"{len(split.train_problems)} training problems x {config.split.train_n} "
                 f"candidates, "
                 f"{len(split.test_problems)} test problems x {config.split.n}; "
                 f"{config.world.min_steps}-{config.world.max_steps} operations, policy "
                 f"{split.policy_name}: candidate accuracy "
                 f"{report.pct(100 * report.mean(r.is_correct for r in train + test))}")
    return World(train, test, split.test_problems, gold, split.policy, split.prompter,
                 split.policy_name)


def _labels(config: DemoConfig, out: str, world: World, say: "Printer") -> "report.Labels":
    """2. Monte Carlo labels, per step and by binary search, against the gold labels."""
    from prmkit.label.mc import MCConfig, label_mc
    from prmkit.label.quality import label_quality

    def mc(strategy: str) -> list[Record]:
        return list(label_mc(world.train, world.policy, world.prompter,
                             MCConfig(rollouts=config.rollouts, mode="hard", strategy=strategy,
                                      seed=config.world.seed), world.policy_name))

    per_step = stage(out, "train_mc.jsonl", lambda: mc("per-step"))
    binary = stage(out, "train_mc_binary.jsonl", lambda: mc("binary"))
    quality = {q.method: q for q in label_quality(per_step + binary, world.gold)}
    q_step = next(q for m, q in quality.items() if "per-step" in m)
    q_bin = next(q for m, q in quality.items() if "binary" in m)
    spent = (sum(r.meta["mc"]["rollouts_spent"] for r in binary),
             sum(r.meta["mc"]["rollouts_spent"] for r in per_step))
    say.stage(2, f"Monte Carlo labels (hard, K={config.rollouts}) vs exact gold labels: step "
                 f"agreement {report.pct(q_step.step_agreement)}, first-error agreement "
                 f"{report.pct(q_step.first_error_agreement)}; binary search: first-error agreement "
                 f"{report.pct(q_bin.first_error_agreement)} with {spent[0]} rollouts vs {spent[1]} "
                 f"per step")
    return report.Labels(q_step, q_bin, spent, quality)


# ---------------------------------------------------------------------------------------------
# stages


def _train(config: DemoConfig, kind: str, data: str, output: str, say: Printer) -> None:
    from prmkit.train.loop import LoopConfig

    if os.path.isfile(os.path.join(output, "done.json")):
        return
    recipe = kind == "prm" or config.orm_recipe != "own"   # the PRM's budget
    last_k = config.prm_last_k if recipe else config.last_k
    loop = LoopConfig(last_k=last_k, lr=config.prm_lr if recipe else config.lr,
                      head_lr=(config.head_lr or None) if last_k else None,
                      epochs=config.prm_epochs if recipe else config.epochs,
                      batch_tokens=config.prm_batch_tokens if recipe else config.batch_tokens,
                      seed=config.world.seed, resume=True)
    cache = recipe and (config.prm_epochs > 1 or not last_k)
    # the PRM's and the ORM's bodies are the same frozen base on the same candidates: the
    # ORM reads the states (and LM features) the PRM's pass stored
    store = os.path.join(os.path.dirname(output), "frozen") if cache else None
    # bfloat16 autocast where the CPU has it natively; emulated, it is 7x slower than float32
    dtype = fast_dtype()
    if kind == "prm":
        from prmkit.train.prm import PRMTrainConfig, train_prm

        train_prm(PRMTrainConfig(base=config.base, data=data, output=output, dtype=dtype,
                                 head=config.head, loop=loop, command="prmkit demo",
                                 calculator=config.calculator,
                                 cache_frozen=cache, frozen_store=store))
    else:
        from prmkit.train.orm import ORMTrainConfig, train_orm

        train_orm(ORMTrainConfig(base=config.base, data=data, output=output, dtype=dtype,
                                 head=config.head if config.orm_recipe == "prm" else "class",
                                 loop=loop,
                                 command="prmkit demo", cache_frozen=cache, frozen_store=store,
                                 calculator=config.calculator))
        shutil.rmtree(store, ignore_errors=True)    # both have trained: the states can go
    with open(os.path.join(output, "done.json"), "w", encoding="utf-8") as f:
        json.dump({"kind": kind}, f)


def _trained(last_k: int) -> str:
    return f"last {last_k} layers + head" if last_k else "the head alone"


def _load(model_dir: str, dtype: str) -> Any:
    from prmkit.models.backends.hf import HFConfig, load_hf_prm

    return load_hf_prm(os.path.join(model_dir, "last"), config=HFConfig(dtype=dtype))


def add_arguments(p: Any) -> None:
    """The demo's options on ``prmkit demo``, from :class:`DemoConfig` (its world's flattened)."""
    _add_fields(p, DemoConfig())


def _add_fields(p: Any, defaults: Any) -> None:
    for f in fields(defaults):
        default = getattr(defaults, f.name)
        flag = f"--{f.name.replace('_', '-')}"
        if is_dataclass(default):
            _add_fields(p, default)
        elif isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                           help=f.metadata["help"])
        elif isinstance(default, list):
            p.add_argument(flag, type=int, nargs="+", default=default, help=f.metadata["help"])
        else:
            p.add_argument(flag, type=type(default), default=default, help=f.metadata["help"])


def config_from(args: Any) -> DemoConfig:
    return _from_args(DemoConfig(), args)


def _from_args(defaults: Any, args: Any) -> Any:
    """The config of ``defaults``' type from the options :func:`_add_fields` added."""
    values = {}
    for f in fields(defaults):
        default = getattr(defaults, f.name)
        values[f.name] = _from_args(default, args) if is_dataclass(default) else \
            getattr(args, f.name)
    return type(defaults)(**values)
