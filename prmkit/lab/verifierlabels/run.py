"""``prmkit lab verifier-labels``: does a generative verifier need fewer labels than a PRM?

Khalifa et al. 2025, "Process Reward Models That Think" (ThinkPRM, arXiv:2504.16828): a
verifier fine-tuned on verification chains of about 1K labelled solutions matches or beats
discriminative PRMs trained on about 100 times the labels. Here, on the lab world, with the same
base model (SmolLM2-135M) for every arm, trained on the exact step labels:

* ``verifier``: ``prmkit train verifier --chains lab`` at its defaults (each step copied, then
  set against what its problem calls for, ending in the verdict; the calculator's notes read)
  on the candidates of the first ``--train-problems`` (k) training problems, then scored on the
  test candidates as ``prmkit score --backend generative`` scores (one verification each);
* ``prm-same``: a discriminative PRM, a surprisal head on the frozen body reading the same
  calculator notes (``prmkit train prm --last-k 0 --cache-frozen --calculator``, the lab's
  :class:`prmkit.lab.verifiers.heads.HeadSpec`), on the same k problems' candidates;
* ``prm-more``: the same PRM on ``--more`` times as many problems (the first k among them).

The protocol, fixed before any run (docs/lab.md, "Generative verifier against PRMs"): a step
the verifier leaves unscored (no verdict parsed) counts as 0.5, an abstention. Each arm's step
AUC against the exact labels is pooled over the test candidates' steps; a claim's 95% interval
is the percentile bootstrap over the test problems, each resample scoring every arm on the same
problems (:mod:`prmkit.lab.verifierlabels.stats`). Claims: ``verifier_matches_more_labels``
(ThinkPRM's: AUC(verifier) - AUC(prm-more) above ``-margin`` at the interval's lower end) and
``verifier_beats_same_labels`` (AUC(verifier) - AUC(prm-same) above 0). Best-of-N accuracy
(N = ``--n``, prm-prod for every arm) is reported with paired intervals, and claims nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.lab.candidates import SplitConfig
from prmkit.lab.stages import begin, stage, stage_json
from prmkit.lab.verifierlabels import report
from prmkit.records import Record
from prmkit.world.config import WorldConfig

STAGES_VERSION = 1


@dataclass
class VerifierLabelsConfig:
    """Sizes and protocol of ``prmkit lab verifier-labels``."""

    output: str = field(default="verifier_labels_out", metadata={
        "help": "folder for every file it writes (a rerun with the same settings resumes there)"})
    world: WorldConfig = field(default_factory=WorldConfig)
    split: SplitConfig = field(default_factory=lambda: SplitConfig(
        train_problems=80, train_n=4, test_problems=20, n=4))
    more: int = field(default=8, metadata={
        "help": "prm-more trains on this many times --train-problems problems"})
    base: str = field(default="smollm2-135m", metadata={"help": "base model of every arm"})
    margin: float = field(default=0.03, metadata={
        "help": "verifier_matches_more_labels holds when the 95%% interval of AUC(verifier) - "
                "AUC(prm-more) lies above -MARGIN"})
    bootstrap: int = field(default=2000, metadata={"help": "bootstrap resamples of the problems"})

    def __post_init__(self) -> None:
        s = self.split
        if min(s.train_problems, s.train_n, s.test_problems, s.n, self.more, self.bootstrap) < 1:
            raise PrmkitError("--train-problems, --train-n, --test-problems, --n, --more and "
                              "--bootstrap must be at least 1")
        if not 0 <= self.margin < 1:
            raise PrmkitError(f"--margin is an AUC difference in [0, 1), got {self.margin}")


def run(config: VerifierLabelsConfig) -> int:
    out = config.output
    say = begin("lab verifier-labels", config, STAGES_VERSION,
                f"seed {config.world.seed}, policy {config.world.policy}")
    more, test = world_stage(config, out, say)
    k = config.split.train_problems * config.split.train_n
    same = more[:k]
    scores = {}
    for name, train in (("prm-same", same), ("prm-more", more)):
        scores[name] = stage_json(out, f"scores_{name}.json", lambda: prm_stage(
            config, name, train, test))
        say.stage(2 if name == "prm-same" else 3, f"{name}: trained on {len(train)} candidates "
                                                  f"and scored")
    scores["verifier"] = stage_json(out, "scores_verifier.json", lambda: verifier_stage(
        config, same, test, say))
    say.stage(5, "the verifier scored the test candidates")
    doc = report.figures(config, test, scores)
    report.finish(config, doc, out, say, say.elapsed)
    return 0


def world_stage(config: VerifierLabelsConfig, out: str, say: Any) -> tuple[list, list]:
    """1. the training candidates of --more x k problems (the first k's first) and the test
    candidates, with their gold labels."""
    from prmkit.lab.candidates import split_of
    from prmkit.world.problems import gold_record

    s = config.split
    split = split_of(config.world, s.train_problems * config.more, s.test_problems)
    train = stage(out, "train_candidates.jsonl",
                  lambda: [gold_record(r) for r in split.train(s.train_n)])
    test = stage(out, "test_candidates.jsonl", lambda: [gold_record(r) for r in split.test(s.n)])
    right = sum(bool(r.is_correct) for r in test) / len(test)
    say.stage(1, f"{len(train)} training candidates ({s.train_problems} x {config.more} "
                 f"problems x {s.train_n}), {len(test)} test candidates; policy "
                 f"{config.world.policy}: {100 * right:.1f}% of the test ones right")
    return train, test


def prm_stage(config: VerifierLabelsConfig, name: str, train: Sequence[Record],
              test: Sequence[Record]) -> dict[str, Any]:
    """2-3. a discriminative PRM trained on ``train``'s exact labels, its test step scores."""
    from prmkit.lab.verifiers.heads import HeadSpec, train_and_score

    spec = HeadSpec(base=config.base, calculator=True, seed=config.world.seed)
    store = os.path.join(config.output, "frozen")
    scores = train_and_score(train, test, os.path.join(config.output, name), spec, store)
    return {"scores": {r.id: s for r, s in zip(test, scores)}}


def verifier_stage(config: VerifierLabelsConfig, train: Sequence[Record], test: Sequence[Record],
                   say: Any) -> dict[str, Any]:
    """4. the verifier trained on ``train`` (prmkit train verifier --chains lab, its defaults
    when the protocol was fixed: the plain token loss, verdict weight 1),
    5. its verifications of the test candidates (resumable, as prmkit score writes them)."""
    from prmkit.records import write_records
    from prmkit.resume import Header
    from prmkit.scoring import score_records
    from prmkit.train.verifier import VerifierTrainConfig, train_verifier
    from prmkit.verify.load import open_generative
    from prmkit.verify.prm import GenConfig

    data = os.path.join(config.output, "verifier_train.jsonl")
    write_records(data, list(train))
    folder = os.path.join(config.output, "verifier")
    cfg = VerifierTrainConfig(base=config.base, data=data, output=folder, chains="lab",
                              verdict_weight=1.0,   # the plain token loss the protocol fixed
                              command="prmkit lab verifier-labels")
    cfg.loop.seed = config.world.seed
    if not os.path.isfile(os.path.join(folder, "done")):
        train_verifier(cfg)
        open(os.path.join(folder, "done"), "w").close()
    say.stage(4, f"the verifier trained on {len(train)} candidates' chains")
    records = [Record(**{**r.to_dict(), "step_scores": None}) for r in test]
    # the verifier samples its step copies itself, as when the protocol was fixed
    result = score_records(records, lambda: open_generative(folder, None,
                                                            GenConfig(copy_steps=False)),
                           os.path.join(config.output, "verifier_scored.jsonl"),
                           header=Header("lab verifier-labels", {"model": folder}))
    stats = result.prm.stats if result.prm is not None else None
    return {"scores": {r.id: r.step_scores for r in records},
            "parse": None if stats is None else {"samples": stats.samples,
                                                 "parsed": stats.parsed,
                                                 "seconds": round(stats.seconds, 1)}}
