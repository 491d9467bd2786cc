"""Labeling on Ray workers, with a local Ray instance on CPU: the same labels as a local run,
records streamed back and written as they finish, kill and resume, user errors from a worker.
Skipped when Ray is not installed (``pip install 'prmkit[ray]'``; ``make test`` installs it)."""

from __future__ import annotations

import functools
import json
import sys

import pytest

from prmkit.errors import PrmkitError
from prmkit.label.distributed import ray_labeler
from prmkit.label.job import run_job
from prmkit.label.mc import MCConfig, label_mc
from prmkit.records import Record

ray = pytest.importorskip("ray")

import test_label_job  # noqa: E402
import test_label_mc  # noqa: E402
from test_label_job import Crashing, fresh, problem_set  # noqa: E402
from test_label_mc import PROMPTER, record, scripted  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    # The workers get the scripted policy by value: they cannot import the test modules.
    for module in (test_label_mc, test_label_job, sys.modules[__name__]):
        ray.cloudpickle.register_pickle_by_value(module)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def scripted_policy(profiles, crash_after=None):
    gen = scripted(profiles)
    return (gen if crash_after is None else Crashing(gen, crash_after)), PROMPTER


def test_ray_labels_equal_local_labels(local_ray, tmp_path):
    recs, profiles = problem_set(12)
    config = MCConfig(rollouts=3, strategy="binary", chunk=2)
    local, _ = run_job(fresh(recs), functools.partial(label_mc, generator=scripted(profiles),
                                                      prompter=PROMPTER, config=config),
                       str(tmp_path / "local.jsonl"), key="mc", settings=config.settings(),
                       progress=False)
    label_fn = functools.partial(label_mc, config=config)
    on_ray = ray_labeler(functools.partial(scripted_policy, profiles), label_fn, workers=2,
                         chunk=2)
    rows, summary = run_job(fresh(recs), on_ray, str(tmp_path / "ray.jsonl"), key="mc",
                            settings=config.settings(), progress=False)
    assert rows == local and summary.labelled == 12


def test_ray_kill_and_resume(local_ray, tmp_path):
    recs, profiles = problem_set(12)
    config = MCConfig(rollouts=2, strategy="per-step", chunk=2)
    label_fn = functools.partial(label_mc, config=config)
    out = str(tmp_path / "out.jsonl")
    dying = ray_labeler(functools.partial(scripted_policy, profiles, crash_after=2), label_fn,
                        workers=2, chunk=2)
    with pytest.raises(Exception, match="Killed"):
        run_job(fresh(recs), dying, out, key="mc", settings=config.settings(), progress=False)
    with open(out + ".partial", encoding="utf-8") as f:
        finished = [json.loads(line)["id"] for line in f][1:]   # after the header (resume.py)
    assert 0 < len(finished) < 12 and len(set(finished)) == len(finished)
    healthy = ray_labeler(functools.partial(scripted_policy, profiles), label_fn, workers=2, chunk=2)
    rows, summary = run_job(fresh(recs), healthy, out, key="mc", settings=config.settings(),
                            progress=False)
    assert summary.resumed == len(finished) and summary.labelled == 12 - len(finished)
    assert [r["id"] for r in rows] == [r.id for r in recs]
    local = {r.id: r.to_dict() for r in label_mc(fresh(recs), scripted(profiles), PROMPTER, config)}
    assert rows == [local[r.id] for r in recs]


def test_a_user_error_in_a_worker_is_a_user_error(local_ray, tmp_path):
    bad = Record(id="x", problem="Problem x: what is the number?", steps=["a"])   # no reference
    profiles = {record("ok", 2).problem: [1, 1]}
    on_ray = ray_labeler(functools.partial(scripted_policy, profiles), functools.partial(label_mc),
                         workers=1, chunk=1)
    with pytest.raises(PrmkitError, match="no reference answer"):
        list(on_ray([record("ok", 2), bad]))
