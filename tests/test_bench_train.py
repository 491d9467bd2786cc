"""bench/train.py's prmkit side, without TRL: its token budget packs the training set into as
many batches as TRL has steps under prmkit's own batching, and one run trains every sequence
once in that many optimiser steps (the bench's premise: both trainers do the same work)."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib

from prmkit.train.loop import training_batches
from prmkit.train.prm import step_examples, training_format
from test_train_prm import records

ROOT = pathlib.Path(__file__).resolve().parents[1]


def bench():
    spec = importlib.util.spec_from_file_location("bench_train", ROOT / "bench" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_budget_is_the_smallest_that_makes_the_steps_under_the_loops_batching():
    import random

    rng = random.Random(0)
    lengths = [rng.randint(50, 500) for _ in range(96)]   # like the bench's PRM800K records
    b = bench()
    for steps in (6, 12, 24):
        budget = b.budget_for(lengths, steps, seed=3)
        assert len(training_batches(lengths, budget, 3)) <= steps
        assert len(training_batches(lengths, budget - 1, 3)) > steps or budget == max(lengths)


def test_run_prmkit_trains_every_sequence_once(tiny_base, tmp_path):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    b = bench()
    tokenizer = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForTokenClassification.from_pretrained(tiny_base, num_labels=2)
    fmt = training_format("trl", "class")
    examples, _ = step_examples(records(16), fmt.bind(tokenizer), 256, soft=False,
                                until_first_error=False)
    steps = 4
    budget = b.budget_for([len(e.input_ids) for e in examples], steps, seed=0)
    args = argparse.Namespace(train="last-k", last_k=1, steps=steps, lr=1e-3, seed=0,
                              max_length=256, dtype="float32")
    out = b.run_prmkit(model, tokenizer, fmt, examples, args, budget, str(tmp_path / "run"),
                       str(tmp_path / "train.jsonl"))
    assert out["steps"] == steps and out["batches"] == steps
    assert out["sequences"] == len(examples)
    assert out["real_tokens"] == sum(len(e.input_ids) for e in examples)
