"""The lab demo's implicit PRM (``prmkit demo --implicit``): its own rows in the summary.

Yuan et al. 2024, "Free Process Rewards without Process Labels" (arXiv 2412.01981): a language
model trained as an outcome reward model on r = beta * log(pi/pi_ref) gives step rewards, the
token log ratios summed over each step (:mod:`prmkit.models.backends.implicit`). It learns from
the ORM's data and is reported beside the PRM and the ORM, never in the claims (docs/lab.md).
Its settings are kept in ``implicit/settings.json``: changing them redoes only this stage.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from prmkit.lab.stages import own_settings, stage
from prmkit.evaluate.stepwise import step_auc
from prmkit.lab.demo.report import PRM_METHODS
from prmkit.records import Record

# The DemoConfig fields that only this stage reads: they are not part of the demo's own settings.
FIELDS = ("implicit", "implicit_last_k", "implicit_epochs", "implicit_lr")
SCORED = "implicit_scored.jsonl"


def implicit_stage(config: Any, train_data: str, test: Sequence[Record], out: str,
                   dtype: str) -> list[Record] | None:
    """The test candidates scored by the implicit PRM (trained first), or None when off."""
    if not config.implicit:
        return None
    folder = os.path.join(out, "implicit")
    own_settings(os.path.join(folder, "settings.json"), {k: getattr(config, k) for k in FIELDS},
                 [folder, os.path.join(out, SCORED)])
    _train(config, train_data, folder)
    return stage(out, SCORED, lambda: _score(os.path.join(folder, "last"), test, dtype))


def _train(config: Any, train_data: str, folder: str) -> None:
    from prmkit.models.reading import fast_dtype
    from prmkit.train.implicit import ImplicitTrainConfig, train_implicit
    from prmkit.train.loop import LoopConfig

    if os.path.isfile(os.path.join(folder, "done.json")):
        return
    loop = LoopConfig(last_k=config.implicit_last_k, lr=config.implicit_lr,
                      epochs=config.implicit_epochs, batch_tokens=2048, seed=config.world.seed,
                      resume=True)
    # plain text ("lines"): the problem, then one step per line, as a base model reads it
    train_implicit(ImplicitTrainConfig(base=config.base, data=train_data, output=folder,
                                       format="lines", dtype=fast_dtype(), loop=loop,
                                       calculator=config.calculator, command="prmkit demo"))
    with open(os.path.join(folder, "done.json"), "w", encoding="utf-8") as f:
        json.dump({"kind": "implicit-prm"}, f)


def _score(path: str, test: Sequence[Record], dtype: str) -> list[Record]:
    from prmkit.models.backends.implicit import load_implicit_prm
    from prmkit.models.reading import HFConfig
    from prmkit.progress import progress

    prm = load_implicit_prm(path, config=HFConfig(dtype=dtype))
    scored: list[Record] = []
    with progress(total=len(test), desc="demo: scoring with the implicit PRM", unit="rec") as bar:
        for start in range(0, len(test), 64):
            part = test[start:start + 64]
            for r, s in zip(part, prm.score([r.problem for r in part], [r.steps for r in part])):
                scored.append(Record(**{**r.to_dict(), "step_scores": s}))
            bar.update(len(part))
    return scored


def implicit_figures(config: Any, scored: Sequence[Record], gold: dict[str, Record],
                     ns: Sequence[int]) -> dict[str, Any]:
    """Its best-of-N at ``ns`` (by prod, min and last, the PRM's protocol and draws) and its
    step AUC against the gold labels."""
    from prmkit.evaluate import bestofn

    curve = bestofn.curve(list(scored), bestofn.BestOfNConfig(n=list(ns), draws=200,
                                                              seed=config.world.seed,
                                                              methods=list(PRM_METHODS)))
    labelled = [Record(**{**r.to_dict(), "labels": gold[r.id].labels}) for r in scored]
    return {"best_of_n": {m: curve["methods"][m][-1]["accuracy"] for m in PRM_METHODS},
            "n": curve["n"][-1], "curve": curve["methods"],
            "step_auc": step_auc(labelled),
            "trained": f"the last {config.implicit_last_k} layers, {config.implicit_epochs} "
                       f"epoch(s) at lr {config.implicit_lr}"}
