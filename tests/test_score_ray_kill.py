"""``prmkit score --ray local --workers 2`` killed for real, in subprocesses (slow): a kill -9 of
the driver mid-run, then the same command, gives the output of an uninterrupted run with no
duplicates; a kill -9 of one worker's process mid-run still gives the full, equal output.
Only the processes this test started are killed (the driver, and a worker found among the
driver's own descendants)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import tiny
from prmkit.records import Record, write_records

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def grouped(path, groups=60, per=6):
    """Candidates sharing their first steps within each group."""
    recs = [Record(id=f"g{g}-{k}", group=f"g{g}", problem=f"Problem {g}: what is {g} + {k}?",
                   steps=[f"{g} + 1 = {g + 1}.", f"Then {k} more: {g + 1 + k}.", f"So {g + k}."])
            for g in range(groups) for k in range(per)]
    write_records(str(path), recs)
    return [r.id for r in recs]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kill")
    tiny.token_classifier().save_pretrained(folder / "m", safe_serialization=True)
    tiny.tokenizer().save_pretrained(folder / "m")
    ids = grouped(folder / "in.jsonl")
    return folder, ids


def command(folder, out, *extra):
    return [sys.executable, "-m", "prmkit.cli", "score", "--model", str(folder / "m"), "--format",
            "trl", "--dtype", "float32", "--input", str(folder / "in.jsonl"), "--output", str(out),
            "--chunk", "6", *extra]


def env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}


def lines(path):
    return open(path, encoding="utf-8").read().splitlines() if os.path.exists(path) else []


def descendants(pid):
    """The processes below ``pid`` (from /proc), with their command lines."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
                cmd = open(f"/proc/{entry}/cmdline").read().replace("\0", " ")
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append((int(entry), cmd))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def wait_for(partial, n, proc, limit=600):
    end = time.monotonic() + limit
    while len(lines(partial)) < n:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < end
        time.sleep(0.02)


def same(a, b):
    ra, rb = [json.loads(x) for x in lines(a)], [json.loads(x) for x in lines(b)]
    assert [r["id"] for r in ra] == [r["id"] for r in rb]
    for x, y in zip(ra, rb):
        assert x["step_scores"] == pytest.approx(y["step_scores"], abs=1e-5)


def test_kill_the_driver_then_rerun(setup):
    folder, ids = setup
    subprocess.run(command(folder, folder / "local.jsonl"), env=env(), check=True)
    out = folder / "ray.jsonl"
    proc = subprocess.Popen(command(folder, out, "--ray", "local", "--workers", "2"), env=env(),
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(f"{out}.partial", 1 + 12, proc)                  # the header, 12 records
    os.killpg(proc.pid, signal.SIGKILL)                        # the driver and its Ray
    proc.wait()
    done = [json.loads(x)["id"] for x in lines(f"{out}.partial")[1:] if x.endswith("}")]
    assert 12 <= len(done) < len(ids) and len(set(done)) == len(done)
    rerun = subprocess.run(command(folder, out, "--ray", "local", "--workers", "2"), env=env(),
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming:" in rerun.stderr
    assert len(lines(out)) == len(ids)
    same(out, folder / "local.jsonl")


def test_kill_one_worker(setup):
    folder, ids = setup
    if not os.path.exists(folder / "local.jsonl"):
        subprocess.run(command(folder, folder / "local.jsonl"), env=env(), check=True)
    out = folder / "w.jsonl"
    proc = subprocess.Popen(command(folder, out, "--ray", "local", "--workers", "2"), env=env(),
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for(f"{out}.partial", 1 + 6, proc)
    workers = [pid for pid, cmd in descendants(proc.pid) if cmd.startswith("ray::_Worker")]
    assert workers, descendants(proc.pid)
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "a Ray worker died" in err and "sent again" in err
    assert len(lines(out)) == len(ids)
    same(out, folder / "local.jsonl")
