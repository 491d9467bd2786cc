"""The trainer runs unchanged under `accelerate launch`: DDP with 2 CPU processes (gloo) takes
the same batches per optimiser step as one process with --grad-accum 2, and ends with the same
weights."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from prmkit.models.backends.hf import HFConfig, load_hf_prm
from prmkit.records import write_records
import tiny
from test_train_prm import records

ACCELERATE = os.path.join(os.path.dirname(sys.executable), "accelerate")


@pytest.mark.skipif(not os.path.exists(ACCELERATE), reason="accelerate launcher not installed")
def test_ddp_two_cpu_processes_equal_one_process_with_accumulation(tmp_path):
    base = tmp_path / "base"
    tiny.causal_lm().save_pretrained(base, safe_serialization=True)
    tiny.tokenizer().save_pretrained(base)
    write_records(str(tmp_path / "train.jsonl"), records(16))
    common = ["train", "prm", "--base", str(base), "--data", str(tmp_path / "train.jsonl"),
              "--max-steps", "4", "--batch-tokens", "256", "--last-k", "1", "--lr", "0.003"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # --multi_gpu selects accelerate's torchrun launcher; with no GPU it runs DDP on the CPU
    # (gloo). (`--cpu` would start a single process.)
    ddp = subprocess.run([ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2",
                          "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                          "-m", "prmkit.cli", *common, "--output", str(tmp_path / "ddp")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    assert ddp.stderr.count("trainable parameters") == 2  # two processes trained
    one = subprocess.run([sys.executable, "-m", "prmkit.cli", *common, "--grad-accum", "2",
                          "--output", str(tmp_path / "one")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    a = load_hf_prm(str(tmp_path / "ddp" / "last"), config=HFConfig(dtype="float32")).model.state_dict()
    b = load_hf_prm(str(tmp_path / "one" / "last"), config=HFConfig(dtype="float32")).model.state_dict()
    start = tiny.causal_lm().state_dict()
    assert not torch.equal(a["model.layers.1.mlp.up_proj.weight"], start["model.layers.1.mlp.up_proj.weight"])
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
