"""docs/commands.md's tour runs as written, the way tests/test_readme.py runs the quick start:
command by command in an empty folder, the venv's ``prmkit`` first on PATH,
``PRMKIT_AUTO_DTYPE=float32``, ``../shared/data`` pointed at the shared data (the commands that
read it, and those that read what they write, are skipped when it is missing).

Each command must exit 0, but for the four the page names: ``label judge`` asks a served model
that is not here and must stop with exit status 2 and one line (the lines that read its output
are skipped), and ``rl`` and ``demo`` train for minutes (tests/test_rl_grpo.py and
tests/test_demo.py run them). ``prmkit serve ... &`` is started, polled on ``/health`` and
stopped.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from prmkit.shareddata import shared_data_dir
from tests.test_readme import commands, free_port, stop, wait_for_health

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "commands.md").read_text()
TOUR = re.search(r"```sh\n(.*?)```", PAGE, re.S)
# commands the page says the test does not run, and why
NOT_RUN = {"prmkit rl ": "trains for minutes", "prmkit demo": "the main job, minutes"}
NO_SERVER = "prmkit label judge"   # its model is served elsewhere: exit 2, one line


def test_the_page_says_which_commands_its_test_does_not_run():
    assert "tests/test_commands_tour.py" in PAGE
    for name in ("`label judge`", "`rl`", "`demo`"):
        assert name in PAGE


@pytest.mark.slow
def test_the_commands_tour_runs_as_written(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("fastapi")
    data = Path(shared_data_dir())
    work = tmp_path / "work"
    work.mkdir()
    if data.is_dir():
        (tmp_path / "shared").mkdir()
        os.symlink(data, tmp_path / "shared" / "data")
    port = free_port()
    env = dict(os.environ, PRMKIT_AUTO_DTYPE="float32", PYTHONUNBUFFERED="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for name in ("PRMKIT_TOKEN", "PRMKIT_SERVE_TOKEN"):
        env.pop(name, None)
    skipped: set[str] = set()
    ran = []
    for command in commands(TOUR.group(1)):
        words = shlex.split(command.rstrip("&"))
        outputs = {words[words.index("--output") + 1]} if "--output" in words else {words[-1]}
        reads_skipped = any(w == s or w.startswith(s + "/") for w in words for s in skipped)
        if "../shared/data" in command and not data.is_dir() or reads_skipped or \
                any(command.startswith(k) for k in NOT_RUN):
            skipped |= outputs
            continue
        if command.startswith("prmkit serve"):
            command = command.replace("--port 8000", f"--port {port}")
            server = subprocess.Popen(shlex.split(command.rstrip("& ")), cwd=work, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                assert wait_for_health(f"http://127.0.0.1:{port}", server)["status"] == "ok"
            finally:
                stop(server)
            ran.append(command)
            continue
        done = subprocess.run(command, shell=True, executable="/bin/bash", cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        out = (done.stdout + done.stderr).strip()
        if command.startswith(NO_SERVER):
            assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, out
            assert "Traceback" not in out
            skipped |= outputs
        else:
            assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{out}"
        ran.append(command)
    assert len(ran) >= 24 if data.is_dir() else len(ran) >= 15
    # what the page's fix was about: eval steps reads the gold labels of the scored file
    assert (work / "steps.json").is_file() and (work / "lab_scored.jsonl").is_file()
