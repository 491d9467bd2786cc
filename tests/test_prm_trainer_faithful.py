"""PRMTrainer is a ``transformers.Trainer``, so ``TrainingArguments`` fields mean what transformers
documents: each one here is checked against a plain ``transformers.Trainer`` on the same tokenised
rows (checkpoints kept, the best model loaded, label smoothing, logging per epoch); checkpoints are
``checkpoint-N`` folders that ``from_pretrained`` loads; a checkpoint is resumed from only when it
was written whole, and a run stopped inside any write of a checkpoint resumes to the weights and
the log of an unbroken run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import tiny
from prmkit import PRMConfig, PRMTrainer
from prmkit.errors import PrmkitError
from prmkit.train import trlcheckpoint
from prmkit.train.trainer import StepRows
from test_prm_trainer import rows


def config(out, **kw):
    base = dict(output_dir=str(out), max_steps=6, per_device_train_batch_size=4,
                learning_rate=3e-3, logging_steps=1, report_to=[], save_strategy="no",
                bf16=False, seed=0)
    return PRMConfig(**{**base, **kw})


def ours(out, eval_rows=None, **kw):
    torch.manual_seed(0)
    return PRMTrainer(model=tiny.token_classifier(seed=0), args=config(out, **kw),
                      train_dataset=rows(16), eval_dataset=eval_rows,
                      processing_class=tiny.tokenizer())


def plain(out, trainer, **kw):
    """transformers' own Trainer on the rows PRMTrainer tokenised, from the same weights."""
    import dataclasses

    from transformers import Trainer, TrainingArguments

    ours_args = config(out, **kw)
    names = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    given = {n: getattr(ours_args, n) for n in names
             if n not in ("gradient_checkpointing", "gradient_checkpointing_kwargs")}
    torch.manual_seed(0)
    net = tiny.token_classifier(seed=0)
    for m in net.modules():   # PRMConfig's disable_dropout (TRL's), on by default
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return Trainer(model=net, args=TrainingArguments(**given),
                   train_dataset=StepRows(trainer.train_examples), eval_dataset=trainer.eval_dataset,
                   data_collator=trainer.data_collator, compute_metrics=trainer.compute_metrics)


def losses(trainer):
    return [(h["step"], round(h["loss"], 5)) for h in trainer.state.log_history if "loss" in h]


def test_a_config_prints_no_warning_the_user_cannot_act_on(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PRMConfig(output_dir=str(tmp_path))


def test_every_run_setting_is_as_transformers_sets_it(tmp_path):
    t = ours(tmp_path / "a", max_steps=-1, num_train_epochs=2, warmup_steps=0.25,
             lr_scheduler_type="cosine", train_sampling_strategy="sequential")
    t.train()
    ref = plain(tmp_path / "b", t, max_steps=-1, num_train_epochs=2, warmup_steps=0.25,
                lr_scheduler_type="cosine", train_sampling_strategy="sequential")
    ref.train()
    assert t.state.num_train_epochs == 2 and t.state.max_steps == ref.state.max_steps == 8
    lr = [[h["learning_rate"] for h in x.state.log_history if "loss" in h] for x in (t, ref)]
    assert lr[0] == lr[1] and lr[0][0] < lr[0][1]   # warm-up over the first two steps
    assert losses(t) == losses(ref)


@pytest.mark.parametrize("setting", [dict(label_smoothing_factor=0.3),
                                     dict(logging_strategy="epoch", max_steps=-1,
                                          num_train_epochs=2),
                                     dict(optim="sgd", learning_rate=0.05),
                                     dict(neftune_noise_alpha=5.0),
                                     dict(gradient_accumulation_steps=2, max_steps=3)])
def test_a_field_does_what_it_does_in_transformers(tmp_path, setting):
    kw = dict(train_sampling_strategy="sequential", **setting)
    t = ours(tmp_path / "a", **kw)
    t.train()
    ref = plain(tmp_path / "b", t, **kw)
    ref.train()
    assert losses(t) == losses(ref) and losses(t)
    if "logging_strategy" in setting:
        assert [s for s, _ in losses(t)] == [4, 8]
    if "label_smoothing_factor" in setting:
        base = ours(tmp_path / "c", train_sampling_strategy="sequential")
        base.train()
        assert abs(losses(t)[0][1] - losses(base)[0][1]) > 1e-3


def test_save_total_limit_and_the_best_model_at_end(tmp_path):
    from transformers import AutoModelForTokenClassification

    kw = dict(eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2,
              save_total_limit=1, load_best_model_at_end=True, metric_for_best_model="eval_loss",
              greater_is_better=False, learning_rate=3e-2, max_steps=8,
              train_sampling_strategy="sequential")   # the same batches on both sides
    t = ours(tmp_path / "a", eval_rows=rows(6, seed=1), **kw)
    t.train()
    ref = plain(tmp_path / "b", t, **kw)
    ref.train()
    names = sorted(n for n in os.listdir(tmp_path / "a") if n.startswith("checkpoint-"))
    assert names == sorted(n for n in os.listdir(tmp_path / "b") if n.startswith("checkpoint-"))
    assert os.path.basename(t.state.best_model_checkpoint) == \
        os.path.basename(ref.state.best_model_checkpoint)
    best = AutoModelForTokenClassification.from_pretrained(t.state.best_model_checkpoint)
    for k, v in best.state_dict().items():
        assert torch.equal(v, t.model.state_dict()[k]), k
    assert os.path.isfile(os.path.join(t.state.best_model_checkpoint, "prmkit_format.json"))


def test_dataset_num_proc_gives_the_same_rows(tmp_path):
    one = ours(tmp_path / "a")
    two = PRMTrainer(model=tiny.token_classifier(seed=0), args=config(tmp_path / "b",
                                                                      dataset_num_proc=3),
                     train_dataset=rows(16), processing_class=tiny.tokenizer())
    assert one.train_examples == two.train_examples


# -- checkpoints a kill cannot tear --------------------------------------------------------------

class Killed(BaseException):
    pass


WRITES = [("torch", "save"), ("safetensors.torch", "save_file"),
          ("transformers.trainer_callback", "TrainerState.save_to_json"),
          ("prmkit.train.trlcheckpoint", "commit"), ("os", "replace"), ("shutil", "rmtree")]


def kill_at(monkeypatch, n):
    """Raise :class:`Killed` at the n-th write of a checkpoint (the disk as a kill leaves it:
    nothing is cleaned up); returns the list of writes seen."""
    import importlib

    seen = []
    for module, name in WRITES:
        owner = importlib.import_module(module)
        attr = name
        if "." in name:
            cls, attr = name.split(".")
            owner = getattr(owner, cls)
        real = getattr(owner, attr)

        def wrapped(*a, _real=real, _name=name, **k):
            seen.append(_name)
            if len(seen) == n:
                raise Killed(_name)
            return _real(*a, **k)

        monkeypatch.setattr(owner, attr, wrapped)
    return seen


KILL = dict(save_strategy="steps", save_steps=2, save_total_limit=1, max_steps=6)


def final(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_a_run_stopped_inside_any_checkpoint_write_resumes_to_the_unbroken_run(tmp_path,
                                                                              monkeypatch):
    whole = ours(tmp_path / "whole", **KILL)
    with monkeypatch.context() as m:
        seen = kill_at(m, 0)
        whole.train()
    want, log = final(whole), losses(whole)
    assert len(seen) > 10
    for n in range(1, len(seen) + 1, 2):
        out = tmp_path / f"k{n}"
        with monkeypatch.context() as m:
            kill_at(m, n)
            with pytest.raises(Killed):
                ours(out, **KILL).train()
        t = ours(out, **KILL)
        if trlcheckpoint.last_committed(str(out)) is None:
            t.train()
        else:
            t.train(resume_from_checkpoint=True)
        got = final(t)
        assert all(torch.equal(want[k], got[k]) for k in want), n
        assert losses(t) == log, n
        assert [c for _, c in trlcheckpoint.checkpoints(str(out))][-1:] == \
            [str(out / "checkpoint-6")]


def test_a_torn_checkpoint_is_never_resumed_from(tmp_path):
    t = ours(tmp_path / "a", **KILL)
    t.train()
    torn = tmp_path / "a" / "checkpoint-8"
    torn.mkdir()
    (torn / "model.safetensors").write_bytes(b"")
    assert trlcheckpoint.last_committed(str(tmp_path / "a")).endswith("checkpoint-6")
    with pytest.raises(PrmkitError, match="not a whole checkpoint"):
        ours(tmp_path / "a", **KILL).train(resume_from_checkpoint=str(torn))
    with pytest.raises(PrmkitError, match="holds no whole checkpoint"):
        ours(tmp_path / "new", **KILL).train(resume_from_checkpoint=True)
    # a whole checkpoint that lost a file since (a deletion cut short) is whole no more
    (tmp_path / "a" / "checkpoint-6" / "optimizer.pt").unlink()
    assert trlcheckpoint.last_committed(str(tmp_path / "a")) is None
    with pytest.raises(PrmkitError, match="not a whole checkpoint"):
        ours(tmp_path / "a", **KILL).train(resume_from_checkpoint=str(tmp_path / "a" /
                                                                      "checkpoint-6"))


SCRIPT = textwrap.dedent('''
    import sys, json
    sys.path.insert(0, sys.argv[2])
    import torch, tiny
    from prmkit import PRMConfig, PRMTrainer
    from test_prm_trainer import rows
    torch.manual_seed(0)
    args = PRMConfig(output_dir=sys.argv[1], max_steps=20, per_device_train_batch_size=4,
                     learning_rate=3e-3, logging_steps=1, report_to=[], save_strategy="steps",
                     save_steps=1, save_total_limit=2, bf16=False, seed=0, disable_tqdm=True)
    t = PRMTrainer(model=tiny.token_classifier(seed=0), args=args, train_dataset=rows(16),
                   processing_class=tiny.tokenizer())
    from prmkit.train.trlcheckpoint import last_committed
    t.train(resume_from_checkpoint=bool(len(sys.argv) > 3 and last_committed(sys.argv[1])) or None)
    print(json.dumps([round(h["loss"], 5) for h in t.state.log_history if "loss" in h]))
    t.save_model(sys.argv[1] + "/final")
''')


def test_sigkill_at_a_random_moment_then_resume(tmp_path):
    """A real ``kill -9`` while the process writes a checkpoint every step."""
    import random
    import time

    from safetensors.torch import load_file

    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    here = os.path.dirname(__file__)
    whole = subprocess.run([sys.executable, str(script), str(tmp_path / "w"), here],
                           capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr[-2000:]
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "k"), here],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not trlcheckpoint.checkpoints(str(tmp_path / "k")) and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(random.Random().uniform(0.0, 1.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    again = subprocess.run([sys.executable, str(script), str(tmp_path / "k"), here, "resume"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.splitlines()[-1] == whole.stdout.splitlines()[-1]
    a = load_file(str(tmp_path / "w" / "final" / "model.safetensors"))
    b = load_file(str(tmp_path / "k" / "final" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
