"""Progress in logs: with stderr not a terminal, long jobs print a progress line (done/total,
rate, time left) every PRMKIT_PROGRESS_EVERY seconds; on a terminal the tqdm bar stays."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prmkit import cli
from prmkit.progress import LogProgress, progress
from prmkit.records import Record, write_records

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^prmkit: (?P<desc>[^:]+): (?P<n>\d+)/(?P<total>\d+) \w+ \(\d+%\)"
                  r"(, [\d.e+-]+ \w+/s)?, elapsed \d:\d\d:\d\d(, left \d:\d\d:\d\d)?")


def progress_lines(text: str, desc: str) -> list[re.Match]:
    return [m for m in map(LINE.match, text.splitlines()) if m and m["desc"].startswith(desc)]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_lines_and_a_terminal_gets_the_bar(monkeypatch):
    monkeypatch.setenv("PRMKIT_PROGRESS_EVERY", "0")
    out = io.StringIO()
    with progress(total=4, desc="job", unit="rec", file=out) as bar:
        assert isinstance(bar, LogProgress)
        for _ in range(4):
            bar.update(1)
        bar.set_postfix(loss="0.5")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and all(LINE.match(line) for line in lines)
    assert lines[-1].startswith("prmkit: job: 4/4 rec (100%)")
    assert list(progress(range(3), desc="it", file=out)) == [0, 1, 2]
    from tqdm import tqdm

    assert isinstance(progress(total=2, file=Terminal()), tqdm)
    silent = io.StringIO()
    with progress(total=2, disable=True, file=silent) as bar:
        bar.update(2)
    assert silent.getvalue() == ""


def test_the_rate_and_time_left_start_at_the_first_item_not_at_the_model_load(monkeypatch):
    """100 s of loading, then an item a second: no rate nor time left after the first item;
    then 1 item/s and the exact time left, not a rate diluted by the load."""
    clock = [0.0]
    monkeypatch.setattr("prmkit.progress.time.monotonic", lambda: clock[0])
    out = io.StringIO()
    bar = LogProgress(total=10, desc="score", unit="rec", file=out, every=0)
    clock[0] = 100.0
    bar.update(1)
    for _ in range(3):
        clock[0] += 1
        bar.update(1)
    lines = out.getvalue().splitlines()
    assert lines[0] == "prmkit: score: 1/10 rec (10%), elapsed 0:01:40"
    assert lines[-1] == "prmkit: score: 4/10 rec (40%), 1 rec/s, elapsed 0:01:43, left 0:00:06"
    assert all(LINE.match(line) for line in lines)


def test_a_log_gets_no_loading_bars_from_transformers(tmp_path):
    """Off a terminal, prmkit turns off the hub's and transformers' tqdm bars (their "Loading
    weights" lines would fill a log)."""
    code = ("import os, sys; from prmkit import cli; "
            "cli.main(['lab', 'problems', '--n', '1', '--output', sys.argv[1]]); "
            "print('BARS-OFF' if os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS') == '1' else 'ON')")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.jsonl")], env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "BARS-OFF" in done.stdout, done.stdout + done.stderr


def test_the_interval_is_steady(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("prmkit.progress.time.monotonic", lambda: clock[0])
    out = io.StringIO()
    bar = LogProgress(total=100, desc="x", file=out, every=10)
    for _ in range(100):
        clock[0] += 1
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10  # at 10, 20, ... 100 seconds; the last one is 100/100
    assert "left 0:00:50" in lines[4] and "1 it/s" in lines[4]
    short = io.StringIO()
    with LogProgress(total=3, file=short, every=30) as bar:  # done in 3 s: nothing to report
        for _ in range(3):
            clock[0] += 1
            bar.update(1)
    assert short.getvalue() == ""


def test_score_to_a_file_prints_progress_lines(tiny_base, tmp_path):
    src = tmp_path / "in.jsonl"
    write_records(str(src), [Record(id=f"r{i}", problem=f"What is {i} + 3?",
                                    steps=["Step 1: 2 + 3 = 5.", "Step 2: The answer is 5."])
                             for i in range(6)])
    log = tmp_path / "log.txt"
    env = {**os.environ, "PRMKIT_PROGRESS_EVERY": "0", "PYTHONPATH": str(ROOT)}
    with open(log, "w") as err:
        rc = subprocess.call([sys.executable, "-m", "prmkit.cli", "score", "--model", tiny_base,
                              "--format", "math-shepherd", "--input", str(src), "--output",
                              str(tmp_path / "out.jsonl"), "--dtype", "float32", "--chunk", "2"],
                             stderr=err, env=env)
    text = log.read_text()
    assert rc == 0, text
    lines = progress_lines(text, "score")
    assert len(lines) >= 2 and lines[-1]["n"] == "6", text
    assert text.rstrip().splitlines()[-1].startswith("scored 6 records")


def test_label_mc_prints_progress_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PRMKIT_PROGRESS_EVERY", "0")
    assert cli.main(["lab", "problems", "--n", "3", "--min-steps", "4", "--max-steps", "5",
                     "--seed", "3", "--output", str(tmp_path / "p.jsonl")]) == 0
    assert cli.main(["generate", "--policy", "lab", "--input", str(tmp_path / "p.jsonl"),
                     "-n", "2", "--output", str(tmp_path / "s.jsonl")]) == 0
    assert len(progress_lines(capsys.readouterr().err, "generate")) >= 2
    assert cli.main(["label", "mc", "--policy", "lab", "--input", str(tmp_path / "s.jsonl"),
                     "--rollouts", "4", "--output", str(tmp_path / "mc.jsonl")]) == 0
    err = capsys.readouterr().err
    lines = progress_lines(err, "label")
    assert len(lines) >= 2 and lines[-1]["n"] == "6", err
    assert "labelled 6 records" in err.rstrip().splitlines()[-1]


LOOP_USES_PROGRESS = "prmkit.progress" in (ROOT / "prmkit" / "train" / "loop.py").read_text()


@pytest.mark.skipif(not LOOP_USES_PROGRESS,
                    reason="prmkit/train/loop.py builds its bar with tqdm, not prmkit.progress")
def test_train_prm_prints_progress_lines(tiny_base, tmp_path, capsys, monkeypatch):
    from test_train_prm import records

    monkeypatch.setenv("PRMKIT_PROGRESS_EVERY", "0")
    write_records(str(tmp_path / "train.jsonl"), records(6))
    assert cli.main(["train", "prm", "--base", tiny_base, "--data", str(tmp_path / "train.jsonl"),
                     "--output", str(tmp_path / "run"), "--max-steps", "4", "--last-k", "1",
                     "--batch-tokens", "256", "--max-length", "128"]) == 0
    err = capsys.readouterr().err
    assert len(progress_lines(err, "train")) >= 2, err


def test_note_reports_work_inside_a_long_item_on_the_open_bar(monkeypatch):
    from prmkit.progress import note

    monkeypatch.setenv("PRMKIT_PROGRESS_EVERY", "0")
    out = io.StringIO()
    note(rollouts=1)                                   # no bar open: nothing happens
    with progress(total=2, desc="label", unit="rec", file=out) as bar:
        note(rollouts=8, in_flight=2)
        bar.update(1)
        note(rollouts=16, in_flight=1)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("rollouts=8, in_flight=2") and "0/2 rec" in lines[0]
    assert lines[-1].endswith("rollouts=16, in_flight=1")
    note(rollouts=99)                                  # the bar is closed: nothing more
    assert out.getvalue().splitlines() == lines
