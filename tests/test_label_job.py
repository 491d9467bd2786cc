"""The resumable labeling job: a kill loses at most the records in flight, a rerun finishes the
rest without redoing or duplicating any, and the output equals an uninterrupted run's."""

from __future__ import annotations

import functools
import json

import pytest

from prmkit.errors import PrmkitError
from prmkit.label.job import run_job
from prmkit.label.mc import MCConfig, label_mc
from prmkit.records import Record
from test_label_mc import PROMPTER, record, scripted


class Killed(Exception):
    pass


class Crashing:
    """A generator that dies on its call number ``after + 1``."""

    def __init__(self, inner, after: int):
        self.inner, self.after, self.calls = inner, after, 0

    def generate(self, *args, **kwargs):
        self.calls += 1
        if self.calls > self.after:
            raise Killed()
        return self.inner.generate(*args, **kwargs)


def problem_set(n: int = 10):
    recs = [record(f"r{i}", 6 + i % 5) for i in range(n)]
    profiles = {}
    for i, r in enumerate(recs):
        error = (3 * i) % (len(r.steps) + 1)
        profiles[r.problem] = [1 + (i + j) % 3 if j < error else 0 for j in range(len(r.steps))]
    return recs, profiles


def labeler(generator, config):
    return functools.partial(label_mc, generator=generator, prompter=PROMPTER, config=config)


def fresh(recs):
    return [Record.from_dict(r.to_dict()) for r in recs]


def test_kill_and_resume_loses_nothing_and_duplicates_nothing(tmp_path):
    recs, profiles = problem_set()
    config = MCConfig(rollouts=3, strategy="binary", chunk=3)
    whole, _ = run_job(fresh(recs), labeler(scripted(profiles), config), str(tmp_path / "a.jsonl"),
                       key="mc", settings=config.settings(), progress=False)

    out = tmp_path / "b.jsonl"
    with pytest.raises(Killed):
        run_job(fresh(recs), labeler(Crashing(scripted(profiles), 4), config), str(out),
                key="mc", settings=config.settings(), progress=False)
    partial = [json.loads(line) for line in (tmp_path / "b.jsonl.partial").read_text().splitlines()]
    assert partial.pop(0)["id"] == "__prmkit_partial__"    # the header (prmkit/resume.py)
    finished = {row["id"] for row in partial}
    assert 0 < len(finished) < len(recs) and len(partial) == len(finished)
    assert not out.exists()

    again = scripted(profiles)
    rows, summary = run_job(fresh(recs), labeler(again, config), str(out), key="mc",
                            settings=config.settings(), progress=False)
    assert summary.resumed == len(finished) and summary.labelled == len(recs) - len(finished)
    asked = {p for call in again.calls for p in call["prompts"]}
    for r in recs:                       # finished records are not rolled out again
        assert (r.id in finished) != any(p.startswith(PROMPTER.prompt(r.problem)) for p in asked)
    assert rows == whole
    lines = out.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [r.id for r in recs]
    assert not (tmp_path / "b.jsonl.partial").exists()


def test_a_torn_last_line_is_redone(tmp_path):
    recs, profiles = problem_set(4)
    config = MCConfig(rollouts=2, strategy="per-step", chunk=1)
    out = str(tmp_path / "c.jsonl")
    with pytest.raises(Killed):
        run_job(fresh(recs), labeler(Crashing(scripted(profiles), 2), config), out, key="mc",
                settings=config.settings(), progress=False)
    path = tmp_path / "c.jsonl.partial"
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 3                             # the header, then 2 records
    path.write_text(lines[0] + lines[1] + lines[2][:40])   # killed in the middle of a write
    rows, summary = run_job(fresh(recs), labeler(scripted(profiles), config), out, key="mc",
                            settings=config.settings(), progress=False)
    assert summary.resumed == 1 and len(rows) == 4


def test_resume_refuses_other_settings(tmp_path):
    recs, profiles = problem_set(4)
    config = MCConfig(rollouts=2, strategy="binary", chunk=1)
    out = str(tmp_path / "d.jsonl")
    with pytest.raises(Killed):
        run_job(fresh(recs), labeler(Crashing(scripted(profiles), 6), config), out, key="mc",
                settings=config.settings(), progress=False)
    assert (tmp_path / "d.jsonl.partial").read_text()
    other = MCConfig(rollouts=4, strategy="binary", chunk=1)
    with pytest.raises(PrmkitError, match="rollouts=2"):
        run_job(fresh(recs), labeler(scripted(profiles), other), out, key="mc",
                settings=other.settings(), progress=False)
    rows, _ = run_job(fresh(recs), labeler(scripted(profiles), other), out, key="mc",
                      settings=other.settings(), resume=False, progress=False)
    assert all(r["meta"]["mc"]["rollouts"] == 4 for r in rows)


def test_a_failure_before_the_first_record_leaves_no_partial_file(tmp_path):
    recs, profiles = problem_set(2)
    config = MCConfig(rollouts=2)
    with pytest.raises(Killed):
        run_job(fresh(recs), labeler(Crashing(scripted(profiles), 0), config),
                str(tmp_path / "e.jsonl"), key="mc", settings=config.settings(), progress=False)
    assert list(tmp_path.iterdir()) == []
