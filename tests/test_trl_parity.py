"""prmkit's PRMTrainer against TRL 1.13's own PRMTrainer (``trl.experimental.prm``), which lives in
``.venv-bench`` (``make test-rl``); skipped where TRL is not installed (``make test``).

The same script with only the import line changed runs under both; per row, the same input ids
and label positions; on the same batch and weights the same loss within 1e-5 in float32, and
the same logged first-step loss; after a short run from the same weights, the same dev metric
within its noise."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest


if os.environ.get("PRMKIT_REQUIRE_TRL") == "1":   # make test-rl, as CI runs it: fail, not skip
    import trl.experimental.prm as trl_prm
else:
    trl_prm = pytest.importorskip("trl.experimental.prm",
                                  reason="TRL 1.13 is in .venv-bench (make test-rl)")
datasets = pytest.importorskip("datasets")
torch = pytest.importorskip("torch")

import tiny  # noqa: E402
from prmkit import PRMConfig, PRMTrainer  # noqa: E402
from test_prm_trainer import rows  # noqa: E402

SCRIPT = textwrap.dedent('''
    import json, sys
    from datasets import Dataset
    from transformers import AutoModelForTokenClassification, AutoTokenizer
    IMPORT_LINE
    base, out = sys.argv[1], sys.argv[2]
    rows = json.load(open(sys.argv[3]))
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForTokenClassification.from_pretrained(base, num_labels=2)
    args = PRMConfig(output_dir=out, max_steps=12, per_device_train_batch_size=4, learning_rate=3e-3,
                     logging_steps=3, report_to=[], save_strategy="no", bf16=False, use_cpu=True,
                     eval_strategy="steps", eval_steps=6, gradient_checkpointing=False, seed=0)
    trainer = PRMTrainer(model=model, args=args, processing_class=tokenizer,
                         train_dataset=Dataset.from_list(rows[:24]),
                         eval_dataset=Dataset.from_list(rows[24:]))
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(out + "/final")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(json.dumps({"losses": losses, "eval_accuracy": metrics["eval_accuracy"]}))
''')


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "base"
    tiny.token_classifier().save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("line", ["from trl.experimental.prm import PRMConfig, PRMTrainer",
                                  "from prmkit import PRMConfig, PRMTrainer"])
def test_the_same_script_runs_with_either_import(base, tmp_path, line):
    from transformers import AutoModelForTokenClassification

    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows(33)))
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.replace("IMPORT_LINE", line))
    out = subprocess.run([sys.executable, str(script), base, str(tmp_path / "out"), str(data)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["losses"]) == 4 and result["losses"][-1] < result["losses"][0]
    assert result["eval_accuracy"] > 0.9
    AutoModelForTokenClassification.from_pretrained(str(tmp_path / "out" / "final"))


@pytest.mark.parametrize("cuts", [dict(max_length=1024, max_completion_length=None),
                                  dict(max_length=30, max_completion_length=None),
                                  dict(max_length=1024, max_completion_length=16),
                                  dict(max_length=1024, max_completion_length=None,
                                       train_on_last_step_only=True)])
def test_ids_and_label_positions_equal_trls_per_row(cuts):
    from real_tokenizers import smollm2

    tok = smollm2()
    ours = PRMTrainer(model=tiny.token_classifier(), processing_class=tok, train_dataset=rows(20),
                      args=PRMConfig(output_dir="unused", bf16=False, report_to=[], **cuts))
    flags = {**dict(max_length=1024, max_completion_length=None, train_on_last_step_only=False), **cuts}
    for row, ex in zip(rows(20), ours.train_examples):
        ref = trl_prm.PRMTrainer.tokenize_row(row, tok, "\n", is_eval=False, **flags)
        reads = [p for p, y in enumerate(ref["labels"]) if y != -100]
        assert ex.input_ids == ref["input_ids"][:reads[-1] + 1]
        assert ex.read_positions == reads and ex.targets == [ref["labels"][p] for p in reads]


def trainers(tmp_path, n_rows=8, **kw):
    """TRL's trainer and prmkit's on the same weights and rows, float32, one batch of all rows."""
    tok = tiny.tokenizer()
    model = tiny.token_classifier()
    kw = dict(max_steps=1, per_device_train_batch_size=n_rows, learning_rate=1e-3, logging_steps=1,
              report_to=[], save_strategy="no", bf16=False, use_cpu=True,
              gradient_checkpointing=False, seed=0, **kw)
    data = datasets.Dataset.from_list(rows(n_rows))
    # both configs first: making TrainingArguments(use_cpu=True) resets accelerate's state,
    # which a trainer made before it still holds
    ours_args = PRMConfig(output_dir=str(tmp_path / "prmkit"), **kw)
    theirs = trl_prm.PRMTrainer(model=copy.deepcopy(model), processing_class=tok, train_dataset=data,
                                args=trl_prm.PRMConfig(output_dir=str(tmp_path / "trl"), **kw))
    ours = PRMTrainer(model=copy.deepcopy(model), processing_class=tok, train_dataset=data,
                      args=ours_args)
    return theirs, ours


def test_the_same_batch_has_the_same_loss_within_1e5(tmp_path):
    theirs, ours = trainers(tmp_path)
    batch = next(iter(theirs.get_train_dataloader()))
    with torch.no_grad():
        trl_loss = float(theirs.compute_loss(theirs.model, batch))
        ours_loss = float(ours.compute_loss(ours.model, batch))
        # and prmkit's own batch of the same rows (in another order: the loss is their mean)
        own = float(ours.compute_loss(ours.model, next(iter(ours.get_train_dataloader()))))
    assert abs(trl_loss - ours_loss) < 1e-5 and abs(trl_loss - own) < 1e-5


def test_the_first_logged_step_loss_is_the_same(tmp_path):
    theirs, ours = trainers(tmp_path)
    theirs.train()
    ours.train()
    first = [[h["loss"] for h in t.state.log_history if "loss" in h][0] for t in (theirs, ours)]
    assert abs(first[0] - first[1]) <= 1e-4   # TRL logs 4 decimals


def test_the_dev_metric_after_a_short_run_is_the_same_within_noise(tmp_path):
    """Both train 6 steps of 4 rows from the same weights (their batches differ: random rows
    against rows of like length), then the same dev set is scored by each trainer's evaluate."""
    results = []
    for trainer_cls, config_cls, name in ((trl_prm.PRMTrainer, trl_prm.PRMConfig, "trl"),
                                          (PRMTrainer, PRMConfig, "prmkit")):
        trainer = trainer_cls(
            model=tiny.token_classifier(), processing_class=tiny.tokenizer(),
            train_dataset=datasets.Dataset.from_list(rows(24)),
            eval_dataset=datasets.Dataset.from_list(rows(30, seed=1)),
            args=config_cls(output_dir=str(tmp_path / name), max_steps=6,
                            per_device_train_batch_size=4, learning_rate=2e-3, report_to=[],
                            save_strategy="no", bf16=False, use_cpu=True,
                            gradient_checkpointing=False, seed=0))
        trainer.train()
        results.append(trainer.evaluate()["eval_accuracy"])
    steps = 30 * 3
    noise = 3 * math.sqrt(2 * 0.25 / steps)   # 3 standard errors of a difference of two shares
    assert abs(results[0] - results[1]) <= noise, results
