"""``prmkit lab compute-optimal``: does choosing the search method by difficulty match
weighted best-of-N with 4x the compute, and beat the best single method? (Snell et al. 2024,
"Scaling LLM Test-Time Compute Optimally can be More Effective than Scaling Model Parameters".)

Lab problems and the lab policy, the library's search methods, and an n-gram PRM trained here
on Monte Carlo labels. Every method's answer, best-of-N's included, is chosen by weighted
voting (answers' last-step PRM scores summed; :mod:`prmkit.select`). Stages, each written whole
into ``--output`` and reused by a rerun with the same settings:

1. problems and their oracle difficulty, 1 - pass@1 over ``--oracle-samples`` samples;
2. the PRM, fitted to Monte Carlo labels of separate training problems;
3. the probe: ``--probe-n`` samples per problem scored by the PRM (predicted difficulty 1 -
   their mean score), charged to the compute-optimal search;
4. best-of-N: a pool of ``--pool`` scored samples per problem, and weighted best-of-n from
   ``--draws`` random n-subsets per n, fixed by the seed;
5. search: every method of ``--methods`` (the choice set, with weighted best-of-n) and of
   ``--beside`` (reported only) at every budget of ``--budgets``;
6. per difficulty bin (predicted, and the oracle's beside) the strategy chosen by
   ``--folds``-fold cross-validation; the claims with bootstrap intervals (the choice redone in
   every resample); ``summary.json`` and ``report.html``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.lab.stages import Printer, begin, stage, stage_json

STAGES_VERSION = 2
METHODS = ("beam", "dvts", "mcts")
CHUNK = 50               # problems per file of the oracle's samples and of the pool


@dataclass
class ComputeOptimalConfig:
    """Sizes and protocol of ``prmkit lab compute-optimal`` (docs/lab-compute-optimal.md); the
    protocol's fields (budgets, choice set, margin, draws, resamples) are fixed before a run."""

    output: str = field(default="compute_optimal_out", metadata={
        "help": "folder for every file the experiment writes (a rerun with the same settings "
                "resumes there)"})
    seed: int = field(default=0, metadata={"help": "seed of the problems, the sampling, the "
                                                   "best-of-N draws and the bootstrap"})
    problems: int = field(default=1000, metadata={"help": "lab problems searched"})
    min_steps: int = field(default=2, metadata={"help": "fewest operations per problem"})
    max_steps: int = field(default=8, metadata={"help": "most operations per problem"})
    lab_policy: str = field(default="lab", metadata={
        "help": "the lab policy: lab, lab:SLIP or lab:SLIP:CONFUSE"})
    oracle_samples: int = field(default=64, metadata={
        "help": "samples per problem for the oracle difficulty (1 - pass@1)"})
    train_problems: int = field(default=200, metadata={"help": "lab problems the PRM trains on"})
    train_n: int = field(default=4, metadata={"help": "candidates per training problem"})
    rollouts: int = field(default=4, metadata={"help": "Monte Carlo rollouts per labelled step"})
    probe_n: int = field(default=4, metadata={
        "help": "samples per problem of the difficulty probe (charged to compute-optimal)"})
    pool: int = field(default=144, metadata={
        "help": "best-of-N samples per problem, the pool every best-of-n draw comes from: at "
                "least 4 x (the largest budget + --probe-n)"})
    draws: int = field(default=200, metadata={
        "help": "random n-subsets of the pool per problem and n for weighted best-of-n"})
    budgets: str = field(default="4,8,16,32", metadata={
        "help": "the budgets n in samples per problem, comma-separated: compute-optimal at n "
                "(the probe charged) is tested against weighted best-of-N at 4 x (n + --probe-n)"})
    single_budgets: str = field(default="4,8,16", metadata={
        "help": "the budgets of the beats-best-single claim, some of --budgets"})
    methods: str = field(default="beam:2,beam:4,beam:8", metadata={
        "help": "the choice set beside weighted best-of-n, as METHOD:M (beam: n/M beams of M "
                "samples; dvts: n/M subtrees of width M; mcts: M samples per expansion); a "
                "method runs at the budgets of at least M that M divides"})
    beside: str = field(default="mcts:4,dvts:4", metadata={
        "help": "searches run at every budget and reported beside, outside the choice set "
                "(METHOD:M as --methods; empty: none)"})
    margin: float = field(default=2.0, metadata={
        "help": "the non-inferiority margin in points of accuracy"})
    bins: int = field(default=5, metadata={"help": "difficulty bins (quantiles)"})
    folds: int = field(default=2, metadata={"help": "cross-validation folds of the per-bin choice"})
    resamples: int = field(default=2000, metadata={"help": "bootstrap resamples of the problems"})
    workers: int = field(default=2, metadata={
        "help": "processes that run the pool's chunks and the searches side by side (one per "
                "core); the results do not depend on it, and a rerun with another count resumes"})

    def __post_init__(self) -> None:
        self.grid()
        self.strategies()
        self.strategies(self.beside)
        if min(self.problems, self.oracle_samples, self.train_problems, self.train_n,
               self.rollouts, self.probe_n, self.bins, self.resamples, self.workers,
               self.draws) < 1:
            raise PrmkitError("--problems, --oracle-samples, --train-problems, --train-n, "
                              "--rollouts, --probe-n, --bins, --resamples, --workers and "
                              "--draws must be positive")
        if self.folds < 2:
            raise PrmkitError(f"--folds must be at least 2, got {self.folds}")
        if self.margin < 0:
            raise PrmkitError(f"--margin must be at least 0, got {self.margin}")
        need = 4 * (max(self.grid()) + self.probe_n)
        if self.pool < need:
            raise PrmkitError(f"--pool ({self.pool}) must be at least 4 x (the largest budget + "
                              f"--probe-n) = {need}")
        if not set(self.single_grid()) <= set(self.grid()):
            raise PrmkitError(f"--single-budgets {self.single_budgets!r} must be some of "
                              f"--budgets {self.budgets!r}")
        if self.problems < self.bins * self.folds:
            raise PrmkitError(f"--problems ({self.problems}) must be at least --bins x --folds")
        if not 1 <= self.min_steps <= self.max_steps:
            raise PrmkitError("need 1 <= --min-steps <= --max-steps")

    def grid(self, text: str | None = None, flag: str = "--budgets") -> list[int]:
        text = self.budgets if text is None else text
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < 1 or values != sorted(set(values)):
            raise PrmkitError(f"{flag} {text!r}: write increasing positive integers "
                              f"separated by commas, such as 4,8,16")
        return values

    def single_grid(self) -> list[int]:
        return self.grid(self.single_budgets, "--single-budgets")

    def curve_grid(self) -> list[int]:
        from prmkit.lab.computeoptimal.stats import curve_grid

        return curve_grid(self.pool, self.grid(), self.probe_n)

    def strategies(self, text: str | None = None) -> list[tuple[str, int]]:
        """The searches of ``--methods`` (or of ``text``) as (method, M)."""
        text = self.methods if text is None else text
        out = []
        for part in (p for p in text.split(",") if p.strip()):
            name, _, m = part.strip().partition(":")
            if name not in METHODS or not m.isdigit() or int(m) < 1:
                raise PrmkitError(f"--methods/--beside: {part!r} is not METHOD:M with METHOD "
                                  f"one of {', '.join(METHODS)} and M a positive integer")
            out.append((name, int(m)))
        return out


def run(config: ComputeOptimalConfig) -> int:
    from prmkit.lab.computeoptimal import summary as cosummary

    out = config.output
    say = begin("lab compute-optimal", config, STAGES_VERSION, f"seed {config.seed}",
                own=("workers",))
    lab = Lab(config)
    chunks = range(0, config.problems, CHUNK)
    parallel(config, [("oracle", k, 0, 0) for k in chunks])
    oracle = {"pass1": {p: v for k in chunks
                        for p, v in read_json(out, f"oracle_{k}.json")["pass1"].items()}}
    say.stage(1, f"{config.problems} problems of {config.min_steps}-{config.max_steps} "
                 f"operations; oracle pass@1 over {config.oracle_samples} samples: mean "
                 f"{100 * sum(oracle['pass1'].values()) / config.problems:.1f}%")
    prm = lab.prm(say)
    quality = stage_json(out, "prm_quality.json", lambda: lab.prm_quality(prm))
    probe = stage_json(out, "probe.json", lambda: lab.probe(prm))
    say.stage(3, f"probe: {config.probe_n} samples per problem, "
                 f"{sum(probe['tokens'].values()) / config.problems:.0f} tokens per problem")
    parallel(config, [("pool", k, 0, 0) for k in chunks])
    pool = merge_pool([read_json(out, f"pool_{k}.json") for k in chunks])
    say.stage(4, f"best-of-N pool: {config.pool} samples per problem, "
                 f"{cosummary.mean_tokens(pool):.1f} tokens per sample; weighted best-of-n "
                 f"from {config.draws} draws at n = {', '.join(map(str, config.curve_grid()))}")
    jobs = [(name, m, n, max(1, round(n * cosummary.mean_tokens(pool))))
            for name, m in config.strategies() + config.strategies(config.beside)
            for n in config.grid() if n % m == 0]
    parallel(config, jobs)
    cells = {f"{name}(m={m})@{n}": read_json(out, cell_file(name, m, n))
             for name, m, n, _ in jobs}
    say.stage(5, f"search: {len(cells)} runs of {config.methods} (the choice set) and "
                 f"{config.beside or 'nothing'} (beside) at budgets {config.budgets}, "
                 f"{config.workers} worker(s)")
    summary = cosummary.finish(config, lab.pids, oracle, probe, pool, cells, out, quality)
    say.stage(6, f"figures and {config.resamples} bootstrap resamples")
    for line in cosummary.lines(summary):
        say(line)
    say(f"total {say.elapsed:.0f} s; summary.json and report.html in {out}/")
    return 0


class Lab:
    """The experiment's problems, policy and stage makers."""

    def __init__(self, config: ComputeOptimalConfig):
        from prmkit.generate.run import Problem
        from prmkit.lab import LabConfig, load_lab_policy, make_problems

        self.config = config
        self.policy, self.prompter = load_lab_policy(config.lab_policy)
        lab = dict(min_steps=config.min_steps, max_steps=config.max_steps)
        records = make_problems(LabConfig(n=config.problems, seed=config.seed, **lab))
        self.problems = [Problem(r.id, r.problem, r.reference) for r in records]
        self.pids = [p.id for p in self.problems]
        self.train = make_problems(LabConfig(n=config.train_problems, seed=config.seed + 1000,
                                             **lab))
        self.max_depth = config.max_steps + 3
        self.ngram: Any = None          # the trained PRM, once a worker has loaded it

    def oracle(self, at: int) -> dict[str, Any]:
        """Problems ``at`` .. ``at + CHUNK``: the share of right samples (pass@1)."""
        from prmkit.lab.candidates import candidates_of

        mine = self.problems_as_records()[at:at + CHUNK]
        recs = candidates_of(mine, self.config.oracle_samples,
                             self.policy, self.prompter, self.config.lab_policy,
                             self.config.seed + 3)
        right: dict[str, int] = {}
        for r in recs:
            right[r.group] = right.get(r.group, 0) + bool(r.is_correct)
        return {"pass1": {p.id: right.get(p.id, 0) / self.config.oracle_samples for p in mine}}

    def problems_as_records(self) -> list[Any]:
        from prmkit.records import Record

        return [Record(id=p.id, problem=p.problem, steps=[""], reference=p.reference)
                for p in self.problems]

    def prm(self, say: Printer) -> Any:
        from prmkit.lab.candidates import candidates_of
        from prmkit.lab.verifiers.ngramprm import NgramPRM, fit_ngram_prm
        from prmkit.label.mc import MCConfig, label_mc

        path = os.path.join(self.config.output, "prm.json")
        if not os.path.exists(path):
            c = self.config
            cands = stage(c.output, "train_candidates.jsonl", lambda: candidates_of(
                self.train, c.train_n, self.policy, self.prompter, c.lab_policy, c.seed))
            labelled = stage(c.output, "train_mc.jsonl", lambda: list(label_mc(
                cands, self.policy, self.prompter,
                MCConfig(rollouts=c.rollouts, seed=c.seed, chunk=64), c.lab_policy)))
            fit_ngram_prm(labelled).save(path)
        prm = NgramPRM.load(path)
        say.stage(2, f"PRM: n-gram hazard head on {len(prm.vocab)} n-grams, fitted on "
                     f"{prm.fitted_on_steps} steps of {self.config.train_problems} x "
                     f"{self.config.train_n} training candidates (Monte Carlo labels, K="
                     f"{self.config.rollouts})")
        return prm

    def prm_quality(self, prm: Any, problems: int = 100, n: int = 8) -> dict[str, Any]:
        """The PRM on ``n`` candidates of ``problems`` held-out problems (another seed)."""
        from prmkit.lab import LabConfig, make_problems
        from prmkit.lab.computeoptimal.summary import prm_quality
        from prmkit.lab.candidates import candidates_of

        c = self.config
        held = make_problems(LabConfig(n=problems, seed=c.seed + 2000, min_steps=c.min_steps,
                                       max_steps=c.max_steps))
        return prm_quality(prm, candidates_of(held, n, self.policy, self.prompter, c.lab_policy,
                                              c.seed + 4))

    def config_for(self, n: int, seed: int, **more: Any) -> Any:
        from prmkit.search.mcts import MCTSConfig
        from prmkit.search.base import SearchConfig

        cls = MCTSConfig if "budget_tokens" in more else SearchConfig
        return cls(n=n, max_depth=self.max_depth, seed=seed, **more)

    def probe(self, prm: Any) -> dict[str, Any]:
        from prmkit.search.compute_optimal import estimate_difficulty

        values, tokens = estimate_difficulty(self.problems, self.policy, self.prompter, prm,
                                             probe_n=self.config.probe_n,
                                             config=self.config_for(1, self.config.seed + 1))
        return {"difficulty": values, "tokens": tokens}

    def pool(self, prm: Any, at: int) -> dict[str, Any]:
        """Problems ``at`` .. ``at + CHUNK``, in sample order: the PRM's last-step score,
        correctness and tokens of each best-of-N sample; and per problem weighted best-of-n
        accuracy at every n of the curve grid, from draws seeded by the seed and ``at``."""
        import numpy as np

        from prmkit.lab.computeoptimal.stats import weighted_draws
        from prmkit.search.best_of_n import best_of_n

        out: dict[str, Any] = {"score": {}, "correct": {}, "tokens": {}}
        config = self.config_for(self.config.pool, self.config.seed + 2)
        result = best_of_n(self.problems[at:at + CHUNK], self.policy, self.prompter, prm,
                           config)
        records = sorted(result.records, key=lambda r: r.meta["sample"])
        for r in records:
            out["score"].setdefault(r.group, []).append(round(r.meta["value"], 9))
            out["correct"].setdefault(r.group, []).append(int(bool(r.is_correct)))
            out["tokens"].setdefault(r.group, []).append(int(r.meta["completion_tokens"]))
        rng = np.random.default_rng([self.config.seed, 5, at])
        out["weighted"] = weighted_draws(records, self.config.curve_grid(), self.config.draws, rng)
        return out

    def search(self, prm: Any, name: str, m: int, n: int, budget_tokens: int) -> dict[str, Any]:
        """One method at one budget: per problem, whether its final pick (:func:`final_pick`)
        was right and its generated tokens (MCTS stops at ``budget_tokens``, best-of-n's
        expected tokens)."""
        from prmkit.search.run import METHODS as RUN

        fn, cls = RUN[name]
        seed = self.config.seed
        if name == "mcts":
            config = self.config_for(n, seed, m=m, budget_tokens=budget_tokens)
        else:
            config = cls(**{**asdict(self.config_for(n, seed)), "m": m})
        result = fn(self.problems, self.policy, self.prompter, prm, config)
        finals: dict[str, list[Any]] = {}
        for r in result.records:
            finals.setdefault(r.group, []).append(r)
        rows = {pid: [int(bool(final_pick(recs).is_correct)), 0] for pid, recs in finals.items()}
        for pid, compute in result.account.per_problem.items():
            rows.setdefault(pid, [0, 0])[1] = compute.tokens_generated
        return {"method": name, "m": m, "n": n, "rows": rows}


def final_pick(records: list[Any]) -> Any:
    """A search's answer among its final candidates: weighted voting (:mod:`prmkit.select`,
    ``weighted-majority``, each answer scoring the sum of its candidates' last-step PRM scores)
    over the finished candidates with a scored step, as :func:`prmkit.search.base.choose`
    filters them (all candidates when none finished, the first when none is scored)."""
    from prmkit import select
    from prmkit.lab.computeoptimal.stats import WEIGHT_BY

    pool = [r for r in records if r.meta.get("complete")] or records
    scored = [r for r in pool if any(s is not None for s in r.step_scores or [])]
    if not scored:
        return pool[0]
    return select.select(scored, "weighted-majority", weight_by=WEIGHT_BY)[0]


# ---------------------------------------------------------------------------------------------
# the pool's chunks and the searches, side by side


def cell_file(name: str, m: int, n: int) -> str:
    return f"search_{name}_m{m}_n{n}.json"


def job_file(job: tuple[str, int, int, int]) -> str:
    return f"{job[0]}_{job[1]}.json" if job[0] in ("oracle", "pool") else cell_file(*job[:3])


def parallel(config: ComputeOptimalConfig, jobs: list[tuple[str, int, int, int]]) -> None:
    """Run the jobs whose files are missing, in ``config.workers`` processes; each writes its
    own file whole, so a killed run redoes only the jobs it had not finished."""
    todo = [j for j in jobs if not os.path.exists(os.path.join(config.output, job_file(j)))]
    if config.workers == 1 or len(todo) < 2:
        for job in todo:
            run_job(config, job)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")    # no fork of a process holding threads
    with ProcessPoolExecutor(min(config.workers, len(todo)), mp_context=context) as pool:
        for _ in pool.map(run_job, [config] * len(todo), todo):
            pass


_LABS: dict[str, Lab] = {}


def run_job(config: ComputeOptimalConfig, job: tuple[str, int, int, int]) -> None:
    """One chunk of the oracle's samples (``("oracle", at, 0, 0)``) or of the pool
    (``("pool", at, 0, 0)``), or one search cell (``(method, m, n, budget_tokens)``)."""
    from prmkit.lab.verifiers.ngramprm import NgramPRM

    key = repr(asdict(config))
    if key not in _LABS:
        _LABS.clear()
        _LABS[key] = Lab(config)
    lab = _LABS[key]
    if job[0] == "oracle":
        stage_json(config.output, job_file(job), lambda: lab.oracle(job[1]))
        return
    if lab.ngram is None:
        lab.ngram = NgramPRM.load(os.path.join(config.output, "prm.json"))
    if job[0] == "pool":
        stage_json(config.output, job_file(job), lambda: lab.pool(lab.ngram, job[1]))
    else:
        stage_json(config.output, job_file(job), lambda: lab.search(lab.ngram, *job))


def read_json(out: str, name: str) -> dict[str, Any]:
    import json

    with open(os.path.join(out, name), encoding="utf-8") as f:
        return json.load(f)


def merge_pool(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: {pid: v for part in parts for pid, v in part[key].items()}
            for key in ("score", "correct", "tokens", "weighted")}
