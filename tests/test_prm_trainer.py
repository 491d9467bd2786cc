"""prmkit's PRMTrainer, TRL's PRM trainer API, without TRL installed: the ids equal a port of TRL
1.13's ``tokenize_row`` (truncation included) on real tokenizers, the loss equals the model's own
forward with TRL's labels, the loss falls, the log history, callbacks, resume, the saved folder
and every bad argument. The same script under TRL itself: tests/test_trl_parity.py."""

from __future__ import annotations

import math
import os
import random
from itertools import chain

import pytest
import torch

import tiny
from prmkit import PRMConfig, PRMTrainer
from prmkit.errors import PrmkitError
from prmkit.train.stepwise import Cuts, encode_row, examples_of, trl_format
from prmkit.train.trainer import sized_batches
from prmkit.train.trlconfig import PRMConfigError

GOOD, BAD = "so the answer is 5.", "then 3 + 3 = 7."


def tokenize_row(features, tokenizer, step_separator, max_length, max_completion_length,
                 train_on_last_step_only, is_eval):
    """TRL 1.13.0's ``PRMTrainer.tokenize_row`` (trl/experimental/prm/prm_trainer.py), step for
    step: the reference the trainer's ids are held to."""
    prompt_ids = tokenizer(features["prompt"], add_special_tokens=False)["input_ids"]
    completions_ids = [tokenizer(c, add_special_tokens=False)["input_ids"]
                       for c in features["completions"]]
    if train_on_last_step_only and not is_eval:
        labels = [-100] * (len(features["labels"]) - 1) + [int(features["labels"][-1])]
    else:
        labels = [int(label) for label in features["labels"]]
    separator_ids = tokenizer.encode(step_separator, add_special_tokens=False)
    completions_ids = [c + separator_ids for c in completions_ids]
    labels = [[-100] * (len(c) - 1) + [y] for c, y in zip(completions_ids, labels)]
    completion_ids = list(chain(*completions_ids))
    labels = list(chain(*labels))
    if tokenizer.bos_token_id is not None:
        prompt_ids = [tokenizer.bos_token_id] + prompt_ids
    if max_completion_length is not None:
        completion_ids = completion_ids[:max_completion_length]
        labels = labels[:max_completion_length]
    input_ids = prompt_ids + completion_ids
    labels = [-100] * len(prompt_ids) + labels
    if max_length is not None:
        input_ids = input_ids[:max_length]
        labels = labels[:max_length]
    return {"input_ids": input_ids, "labels": labels}


def rows(n=24, seed=0):
    """A learnable toy task: a step is wrong exactly when it holds '7'."""
    out = []
    for i in range(n):
        steps = [f"Step {k + 1}: " + (BAD if (i + k + seed) % 3 == 0 else GOOD) for k in range(3)]
        out.append({"prompt": f"What is {i} + 3?", "completions": steps,
                    "labels": [BAD not in s for s in steps]})
    return out


def model(seed=0):
    torch.manual_seed(seed)
    return tiny.token_classifier(seed=seed).train()


def config(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "run"), max_steps=30, per_device_train_batch_size=4,
                learning_rate=3e-3, logging_steps=5, report_to=[], save_strategy="no",
                bf16=False, seed=0)
    return PRMConfig(**{**base, **kw})


# -- the ids, against TRL's recipe ---------------------------------------------------------------

CUTS = [Cuts(None, None), Cuts(40, None), Cuts(1024, 12), Cuts(25, 9),
        Cuts(1024, None, train_on_last_step_only=True)]


@pytest.mark.parametrize("name", ["smollm2", "qwen", "mistral", "gemma3"])
@pytest.mark.parametrize("separator", ["\n", " ки\n"])
def test_ids_and_labels_equal_trls_tokenize_row_on_real_tokenizers(name, separator):
    from real_tokenizers import GETTERS

    tok = GETTERS[name]()
    bound = trl_format(separator).bind(tok)
    data = rows(8) + [{"prompt": "A long prompt " * 30, "completions": ["x " * 20, "y", "z z"],
                       "labels": [True, False, True]}]
    for cuts in CUTS:
        for is_eval in (False, True):
            for row in data:
                ref = tokenize_row(row, tok, separator, cuts.max_length, cuts.max_completion_length,
                                   cuts.train_on_last_step_only, is_eval)
                ids, reads, ys = encode_row(bound, row["prompt"], row["completions"],
                                            [int(y) for y in row["labels"]], cuts, is_eval)
                want = [p for p, y in enumerate(ref["labels"]) if y != -100]
                assert reads == want and ys == [ref["labels"][p] for p in want], (cuts, is_eval)
                assert ids == ref["input_ids"]


def test_max_prompt_length_keeps_the_prompts_last_tokens_bos_included():
    import copy

    tok = copy.deepcopy(tiny.tokenizer())   # the cached one is shared with other tests
    tok.bos_token = "<|im_start|>"
    bound = trl_format().bind(tok)
    full, _, _ = encode_row(bound, "What is 2 + 3?", ["2 + 3 = 5."], [1], Cuts(None), False)
    cut, reads, _ = encode_row(bound, "What is 2 + 3?", ["2 + 3 = 5."], [1],
                               Cuts(None, max_prompt_length=3), False)
    head = len(tok("What is 2 + 3?", add_special_tokens=False)["input_ids"]) + 1
    assert cut == full[head - 3:] and reads == [len(cut) - 1]


# -- batches and the loss -----------------------------------------------------------------------

def test_batches_hold_every_sequence_once_in_as_many_batches_as_a_data_loader():
    lengths = [(i * 37) % 101 + 1 for i in range(103)]
    for size in (1, 3, 4, 8, 40):
        batches = sized_batches(lengths, size, seed=1)
        assert sorted(i for b in batches for i in b) == list(range(103))
        assert len(batches) == math.ceil(103 / size)
        assert all(len(b) == size for b in batches[:-1]) and len(batches[-1]) <= size
        assert all(lengths[b[0]] <= lengths[b[-1]] for b in batches)
    # like length: far less padding than batches in a random order
    batches = sized_batches(lengths, 8, seed=1)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    shuffled = list(range(103))
    random.Random(1).shuffle(shuffled)
    plain = sum(len(shuffled[j:j + 8]) * max(lengths[i] for i in shuffled[j:j + 8])
                for j in range(0, 103, 8))
    assert padded < 0.7 * plain


def test_a_training_batch_holds_trls_ids_and_its_loss_is_the_step_cross_entropy(tmp_path):
    """The Trainer's batch holds each row's TRL ids and labels (padded on the right, -100 where
    no step is read), and ``compute_loss`` equals the cross-entropy at the labelled tokens worked
    out by hand from the model's logits."""
    tok = tiny.tokenizer()
    net = model()
    data = rows(8)
    trainer = PRMTrainer(model=net, args=config(tmp_path, per_device_train_batch_size=8),
                         train_dataset=data, processing_class=tok)
    batch = next(iter(trainer.get_train_dataloader()))
    want = {}
    for row in data:
        ref = tokenize_row(row, tok, "\n", 1024, None, False, False)
        want[tuple(ref["input_ids"])] = ref["labels"]
    for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
        n = int(mask.sum())
        assert mask[:n].all() and (labels[n:] == -100).all()
        assert want[tuple(ids[:n].tolist())] == labels[:n].tolist()
    with torch.no_grad():
        loss = float(trainer.compute_loss(net, dict(batch)))
        logits = net(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    terms = [-float(torch.log_softmax(logits[b, p].double(), -1)[int(batch["labels"][b, p])])
             for b in range(8) for p in range(logits.shape[1]) if batch["labels"][b, p] != -100]
    assert len(terms) == 24
    assert abs(loss - sum(terms) / len(terms)) < 1e-5


# -- training, logs, callbacks, saving ----------------------------------------------------------

def test_loss_falls_logs_and_the_saved_folder_loads_and_scores(tmp_path):
    from transformers import AutoModelForTokenClassification

    from prmkit.models.load import load_prm

    tok = tiny.tokenizer()
    trainer = PRMTrainer(model=model(), args=config(tmp_path, eval_strategy="steps", eval_steps=15),
                         train_dataset=rows(24), eval_dataset=rows(9, seed=1), processing_class=tok)
    before = trainer.evaluate()
    out = trainer.train()
    after = trainer.evaluate()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [5, 10, 15, 20, 25, 30]
    assert losses[-1] < losses[0] and out.global_step == 30
    assert after["eval_loss"] < before["eval_loss"] and after["eval_accuracy"] == 1.0
    # train() starts a new state, as transformers' does: 2 in training, then the one after
    assert sum(1 for h in trainer.state.log_history if "eval_loss" in h) == 3
    assert trainer.state.log_history[-2]["train_runtime"] > 0   # then the last evaluate
    folder = str(tmp_path / "saved")
    trainer.save_model(folder)
    tok.save_pretrained(folder)
    assert AutoModelForTokenClassification.from_pretrained(folder).config.num_labels == 2
    prm = load_prm(folder)   # no format given: the folder says trl with its separator
    r = rows(3, seed=2)
    scores = prm.score([x["prompt"] for x in r], [x["completions"] for x in r])
    for x, s in zip(r, scores):
        assert [p > 0.5 for p in s] == x["labels"]


def test_callbacks_are_told_and_can_stop_training(tmp_path):
    from transformers import TrainerCallback

    seen = []

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            seen.append(state.global_step)
            if state.global_step == 3:
                control.should_training_stop = True
            return control

        def on_log(self, args, state, control, logs=None, **kw):
            if "loss" in logs:   # the last log line is the run's summary
                seen.append(("log", logs["loss"]))

    trainer = PRMTrainer(model=model(), args=config(tmp_path, logging_steps=1),
                         train_dataset=rows(12), processing_class=tiny.tokenizer(),
                         callbacks=[Stop()])
    trainer.train()
    assert trainer.state.global_step == 3 and [s for s in seen if isinstance(s, int)] == [1, 2, 3]
    assert sum(1 for s in seen if isinstance(s, tuple)) == 3


def test_a_stopped_run_resumes_to_the_weights_of_an_unbroken_one(tmp_path):
    def run(out, stop_at=None, resume=None):
        from transformers import TrainerCallback

        class Stop(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                control.should_training_stop = state.global_step == stop_at
                return control

        t = PRMTrainer(model=model(), args=config(tmp_path, output_dir=str(out), max_steps=8,
                                                  save_strategy="steps", save_steps=4),
                       train_dataset=rows(16), processing_class=tiny.tokenizer(),
                       callbacks=[Stop()])
        t.train(resume_from_checkpoint=resume)
        return t.model.state_dict()

    whole = run(tmp_path / "a")
    run(tmp_path / "b", stop_at=4)
    resumed = run(tmp_path / "b", resume=True)
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert os.path.isfile(tmp_path / "b" / "checkpoint-8" / "prmkit_format.json")


def test_lora_through_peft_config_trains_and_saves_a_merged_folder(tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForTokenClassification

    cfg = peft.LoraConfig(task_type="TOKEN_CLS", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    trainer = PRMTrainer(model=model(), args=config(tmp_path, max_steps=4), train_dataset=rows(8),
                         processing_class=tiny.tokenizer(), peft_config=cfg)
    trainer.train()
    trainer.save_model(str(tmp_path / "lora"))
    loaded = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "lora"))
    assert not any("lora" in k for k in loaded.state_dict())


# -- bad arguments: one line each ---------------------------------------------------------------

def test_an_unknown_config_field_is_named_with_the_closest_one(tmp_path):
    with pytest.raises(PRMConfigError, match="no field 'step_seperator'; did you mean 'step_separator'"):
        PRMConfig(output_dir=str(tmp_path), step_seperator="\n")
    with pytest.raises(TypeError):   # as an unknown keyword is, in Python
        PRMConfig(output_dir=str(tmp_path), not_a_field=1)
    with pytest.raises(PRMConfigError, match="dataset_num_proc"):
        PRMConfig(output_dir=str(tmp_path), dataset_num_proc=0)


@pytest.mark.parametrize("bad, message", [
    ({"labels": None}, "no 'labels' column"),
    ({"labels": [True]}, "row 0: field 'labels': 1 labels for 3 completions"),
    ({"labels": ["yes", True, True]}, "row 0: field 'labels': label 0 is 'yes'"),
    ({"completions": "one step"}, "row 0: field 'completions': expected a list of strings"),
])
def test_a_bad_dataset_gets_one_line_naming_the_row_and_field(tmp_path, bad, message):
    row = {**rows(1)[0], **bad}
    data = [{k: v for k, v in row.items() if v is not None}]
    with pytest.raises(PrmkitError, match=message):
        PRMTrainer(model=model(), args=config(tmp_path), train_dataset=data,
                   processing_class=tiny.tokenizer())


def test_a_model_without_a_two_class_token_head_is_refused(tmp_path):
    with pytest.raises(PrmkitError, match="token-classification model with 2 labels"):
        PRMTrainer(model=tiny.causal_lm(), args=config(tmp_path), train_dataset=rows(2),
                   processing_class=tiny.tokenizer())


def test_push_to_hub_without_the_hub_says_where_the_model_is(tmp_path, monkeypatch):
    import huggingface_hub

    def offline(*a, **k):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", offline)
    trainer = PRMTrainer(model=model(), args=config(tmp_path, max_steps=1), train_dataset=rows(4),
                         processing_class=tiny.tokenizer())
    with pytest.raises(PrmkitError, match="saved in .*run: upload it .* with `hf upload"):
        trainer.push_to_hub()
    assert os.path.isfile(tmp_path / "run" / "prmkit_format.json")


def test_a_datasets_dataset_is_read_by_its_columns(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(rows(6))
    exs, dropped = examples_of(ds, trl_format().bind(tiny.tokenizer()), Cuts(), False, "train")
    assert len(exs) == 6 and dropped == 0
    with pytest.raises(PrmkitError, match="no 'completions' column"):
        examples_of(ds.remove_columns("completions"), trl_format().bind(tiny.tokenizer()), Cuts(),
                    False, "train_dataset")


# -- TRL's datasets: by name where the hub is, else from a local copy ---------------------------

def test_trls_stepwise_data_reads_from_parquet_arrow_and_a_datasets_folder(tmp_path):
    import glob

    datasets = pytest.importorskip("datasets")
    from prmkit.formats.detect import read_records

    ds = datasets.Dataset.from_list(rows(5))
    ds.to_parquet(str(tmp_path / "ms.parquet"))
    ds.save_to_disk(str(tmp_path / "folder"))
    arrow = glob.glob(str(tmp_path / "folder" / "*.arrow"))[0]
    want = [[float(y) for y in r["labels"]] for r in rows(5)]
    for source in (str(tmp_path / "ms.parquet"), str(tmp_path / "folder"), arrow):
        records = read_records(source)
        assert [r.labels for r in records] == want and records[0].steps == rows(5)[0]["completions"]
    loaded = datasets.load_from_disk(str(tmp_path / "folder"))
    exs, _ = examples_of(loaded, trl_format().bind(tiny.tokenizer()), Cuts(), False, "train")
    assert len(exs) == 5


def test_a_trl_dataset_by_name_without_the_hub_is_one_line_with_the_way_round(tmp_path):
    import subprocess
    import sys

    pytest.importorskip("datasets")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-m", "prmkit.cli", "convert", "--from", "trl", "--to",
                          "prmkit", "hf:trl-lib/math_shepherd", str(tmp_path / "o.jsonl")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "hf download trl-lib/math_shepherd --repo-type dataset --local-dir DIR" in out.stderr
