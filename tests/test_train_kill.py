"""A training run killed at every write step of its checkpoints (prmkit/train/checkpoint.py),
then run again, ends exactly as an unbroken run: the same metrics.jsonl lines, the same best/
and last/ weights, no leftover temporary folder; a finished run, rerun, says it is done.

Each write step is hit in process (``write_step`` raises there, which leaves the disk as a kill
would: the checkpoint code cleans nothing up on the way out) for the PRM, the ORM and the
implicit PRM; one test kills a real ``prmkit train prm`` process with SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from prmkit.cli import main
from prmkit.records import Record, write_records
from prmkit.train import checkpoint
from prmkit.train.implicit import ImplicitTrainConfig, train_implicit
from prmkit.train.loop import LoopConfig
from prmkit.train.orm import ORMTrainConfig, train_orm
from prmkit.train.prm import PRMTrainConfig, train_prm

GOOD, BAD = "so the answer is 5.", "then 3 + 3 = 7."


def records(n):
    out = []
    for i in range(n):
        steps = [f"Step {k + 1}: " + (BAD if (i + k) % 3 == 0 else GOOD) for k in range(2)]
        labels = [0.0 if BAD in s else 1.0 for s in steps]
        out.append(Record(id=f"r{i}", problem=f"What is {i} + 3?", steps=steps, labels=labels,
                          is_correct=all(labels), group=f"g{i // 2}"))
    return out


@pytest.fixture
def data(tmp_path):
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), records(8))
    write_records(str(dev), records(4))
    return str(train), str(dev)


TRAINERS = {"prm": (PRMTrainConfig, train_prm), "orm": (ORMTrainConfig, train_orm),
            "implicit-prm": (ImplicitTrainConfig, train_implicit)}


def run(kind, base, data, out):
    """4 steps, a checkpoint every 2: the PRM validates on dev data (its second checkpoint is
    not better), the others on the training loss (each checkpoint is a new best/)."""
    cls, train = TRAINERS[kind]
    loop = LoopConfig(lr=3e-3, batch_tokens=256, last_k=1, warmup=0.0, max_steps=4, eval_every=2)
    cfg = cls(base=base, data=data[0], eval_data=data[1] if kind == "prm" else None,
              output=str(out), max_length=256, loop=loop)
    return train(cfg)


class Killed(BaseException):
    pass


def counting(monkeypatch, kill_at=None):
    """Count the write steps; raise :class:`Killed` at step ``kill_at``."""
    seen = []
    real = checkpoint.write_step

    def step(name):
        seen.append(name)
        if len(seen) == kill_at:
            raise Killed(name)
        real(name)

    monkeypatch.setattr(checkpoint, "write_step", step)
    return seen


def lines(out):
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def tensors(folder):
    from safetensors.torch import load_file

    return {name: load_file(str(folder / name)) for name in sorted(os.listdir(folder))
            if name.endswith(".safetensors")}


def same_weights(a, b):
    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys() and ta
    for name in ta:
        assert ta[name].keys() == tb[name].keys()
        for k in ta[name]:
            assert (ta[name][k] - tb[name][k]).abs().max() <= 1e-6, (a, name, k)


def assert_same_run(full, out):
    # nothing left over (untrained.json: the baselines, written before the first step where
    # the trainer has any)
    assert sorted(os.listdir(out)) == sorted(os.listdir(full))
    assert set(os.listdir(out)) - {"untrained.json"} == {"best", "last", "metrics.jsonl"}
    if (full / "untrained.json").exists():
        assert (out / "untrained.json").read_text() == (full / "untrained.json").read_text()
    assert lines(out) == lines(full)
    for folder in ("best", "last"):
        assert sorted(os.listdir(out / folder)) == sorted(os.listdir(full / folder))
        same_weights(full / folder, out / folder)


@pytest.mark.parametrize("kind", ["prm", "orm", "implicit-prm"])
def test_a_kill_at_every_write_step_resumes_to_the_unbroken_run(kind, tiny_base, data, tmp_path,
                                                                 monkeypatch):
    full = tmp_path / "full"
    steps = counting(monkeypatch)
    run(kind, tiny_base, data, full)
    names = list(steps)
    assert len(names) >= 2 * 8 and "renamed the new folder in" in names
    # the PRM at every step; the others at every step of one checkpoint (the loop is shared)
    points = range(1, len(names) + 1) if kind == "prm" else range(len(names) // 2 + 1,
                                                                    len(names) + 1)
    for at in points:
        out = tmp_path / f"killed{at}"
        counting(monkeypatch, kill_at=at)
        with pytest.raises(Killed):
            run(kind, tiny_base, data, out)
        counting(monkeypatch)
        history = run(kind, tiny_base, data, out)
        assert [h["step"] for h in history] == [2, 4], (at, names[at - 1])
        assert_same_run(full, out)


def test_a_finished_run_rerun_says_it_is_done(tiny_base, data, tmp_path, capsys):
    args = ["train", "orm", "--base", tiny_base, "--data", data[0], "--output",
            str(tmp_path / "run"), "--max-steps", "2", "--batch-tokens", "256", "--last-k", "1"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "already done" in err and "trained 2 steps" in out


def test_sigkill_inside_the_copy_of_best_then_the_same_command(tiny_base, data, tmp_path):
    full, out = tmp_path / "full", tmp_path / "killed"
    args = lambda o: [sys.executable, "-m", "prmkit.cli", "train", "prm", "--base", tiny_base,
                      "--data", data[0], "--eval-data", data[1], "--output", str(o),
                      "--max-steps", "4", "--eval-every", "2", "--batch-tokens", "256",
                      "--last-k", "1", "--lr", "3e-3", "--warmup", "0", "--max-length", "128"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    assert subprocess.run(args(full), env=env, capture_output=True).returncode == 0
    # write step 7 of the first checkpoint is inside the copy of best/ (after last/ is swapped)
    killed = subprocess.run(args(out), env={**env, checkpoint.KILL_ENV: "7"}, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert os.path.isdir(out / "best.tmp") or not os.path.isdir(out / "best")
    again = subprocess.run(args(out), env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert_same_run(full, out)


def test_a_checkpoint_from_before_the_lines_were_kept_resumes_with_its_metrics(tiny_base, data,
                                                                               tmp_path,
                                                                               monkeypatch):
    full, out = tmp_path / "full", tmp_path / "old"
    run("orm", tiny_base, data, full)
    counting(monkeypatch, kill_at=17)  # the second checkpoint starts: step 2 is committed
    with pytest.raises(Killed):
        run("orm", tiny_base, data, out)
    counting(monkeypatch)
    state_path = out / "last" / checkpoint.STATE
    state = json.loads(state_path.read_text())
    for key in ("history", "best_step"):  # as an older prmkit wrote it
        del state[key]
    state_path.write_text(json.dumps(state))
    run("orm", tiny_base, data, out)
    assert lines(out) == lines(full)
