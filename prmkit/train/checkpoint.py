"""The checkpoint folders of a training run, written so that a kill at any moment leaves a state
the next run recovers from exactly.

A run's output folder holds ``last/`` (a usable model and what resuming needs, with
``trainer_state.json`` holding the step, the best step and every validation line so far),
``best/`` (a copy of ``last/``'s model files at the best step) and ``metrics.jsonl``. One
checkpoint writes, in this order:

1. ``last.tmp/``, complete (``trainer_state.json`` last);
2. the swap: ``last/`` -> ``last.old/``, ``last.tmp/`` -> ``last/`` (the commit point), then
   ``last.old/`` removed;
3. when the step is the best so far: ``best.tmp/`` copied from ``last/``, then the same swap
   into ``best/``;
4. ``metrics.jsonl``, rewritten (atomically) from the lines in ``last/trainer_state.json``.

:func:`recover` runs at the start: a ``last/`` missing while ``last.old/`` exists (a kill between
the two renames) is put back, every ``*.tmp/`` and ``*.old/`` is removed, ``best/`` is made again
from ``last/`` when the committed state says the best step is the last one and ``best/`` holds
another step, and ``metrics.jsonl`` is made again from the committed lines. So the state on disk
is always the last committed checkpoint, and a resumed run replays the rest exactly.

``PRMKIT_KILL_AT=N`` (tests only) kills the process with SIGKILL at the N-th write step of the
run (:func:`write_step`), so tests can stop a run inside every step of the sequence.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from typing import Any

STATE = "trainer_state.json"
MARK = "checkpoint.json"  # {"step": N}: the step a folder's weights come from
RESUME_FILES = ("optimizer.pt", "trainable.safetensors", STATE)
KILL_ENV = "PRMKIT_KILL_AT"
_steps = {"n": 0}


def write_step(name: str) -> None:
    """One step of the checkpoint writes; with ``PRMKIT_KILL_AT=N`` the N-th one kills the
    process (SIGKILL, as ``kill -9`` would: nothing is flushed or cleaned up)."""
    _steps["n"] += 1
    at = os.environ.get(KILL_ENV)
    if at and at.strip().isdigit() and int(at) == _steps["n"]:
        os.kill(os.getpid(), signal.SIGKILL)


def write_mark(folder: str, step: int) -> None:
    with open(os.path.join(folder, MARK), "w", encoding="utf-8") as f:
        json.dump({"step": step}, f)


def read_mark(folder: str) -> int | None:
    try:
        with open(os.path.join(folder, MARK), encoding="utf-8") as f:
            return int(json.load(f)["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_json(path: str, obj: Any) -> None:
    """``obj`` as JSON at ``path``, atomically (a temporary file renamed)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def swap_in(tmp: str, final: str) -> None:
    """Replace the folder ``final`` by the complete folder ``tmp``: at every moment either
    ``final`` or ``final.old`` is a complete folder (see :func:`recover_folder`)."""
    old = final + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.replace(final, old)
        write_step("moved the old folder aside")
    os.replace(tmp, final)
    write_step("renamed the new folder in")
    shutil.rmtree(old, ignore_errors=True)


def copy_best(last: str, best: str, step: int) -> None:
    """``best/`` made from ``last/``'s model files (not what resuming needs), atomically."""
    tmp = best + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in sorted(os.listdir(last)):
        if name in RESUME_FILES or name == MARK:
            continue
        src = os.path.join(last, name)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(tmp, name))
        write_step(f"copied {name} into best.tmp")
    write_mark(tmp, step)
    write_step("best.tmp complete")
    swap_in(tmp, best)


def write_metrics(path: str, lines: list[dict[str, Any]]) -> None:
    """``metrics.jsonl`` holding exactly ``lines``, written atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(m) + "\n" for m in lines)
        f.flush()
        os.fsync(f.fileno())
    write_step("metrics.jsonl.tmp written")
    os.replace(tmp, path)


def recover_folder(final: str) -> None:
    """Undo a swap a kill cut short, and remove what a cut-short write left."""
    old = final + ".old"
    if not os.path.isdir(final) and os.path.isdir(old):
        os.replace(old, final)
    for leftover in (old, final + ".tmp"):
        shutil.rmtree(leftover, ignore_errors=True)


def read_state(last: str) -> dict[str, Any] | None:
    path = os.path.join(last, STATE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def recover(output: str, resume: bool) -> None:
    """Bring ``output`` back to its last committed checkpoint (see the module's doc)."""
    last, best = os.path.join(output, "last"), os.path.join(output, "best")
    for folder in (last, best):
        recover_folder(folder)
    metrics = os.path.join(output, "metrics.jsonl")
    if os.path.exists(metrics + ".tmp"):
        os.unlink(metrics + ".tmp")
    state = read_state(last) if resume else None
    if state is None or "history" not in state:
        return
    if state.get("best_step") == state["step"] and read_mark(best) != state["step"]:
        copy_best(last, best, state["step"])
    write_metrics(metrics, state["history"])
