"""``checkpoint-N`` folders of :class:`prmkit.train.trainer.PRMTrainer` that a kill cannot tear.

transformers' ``Trainer`` writes a checkpoint straight into ``OUTPUT/checkpoint-N`` (the model,
the optimizer, the scheduler, the RNG states, ``trainer_state.json`` last), then deletes the
oldest ones beyond ``save_total_limit``. A ``kill -9`` in the middle leaves a folder that has the
name of a checkpoint and only part of one, and ``resume_from_checkpoint=True`` would take it.

Here a checkpoint is committed by one more file written after everything else,
``prmkit_checkpoint.json`` (the step, and every file of the folder with its size; written to a
temporary name and renamed). A folder is whole when it holds the mark and every file the mark
lists at its size, so one that lost files later (a deletion cut short) is not whole either:

* ``resume_from_checkpoint=True`` takes the newest committed checkpoint (:func:`last_committed`);
  a folder without the mark (a torn write) is never resumed from;
* an old checkpoint is removed by renaming it out of the ``checkpoint-N`` pattern first
  (``checkpoint-N.deleting``), then deleting it, so a kill during the deletion leaves nothing a
  resume could take (:func:`rotate`); leftovers are removed by the next rotation.

A folder written by another trainer (transformers', TRL's) has no mark; it is accepted when it is
named explicitly and its ``trainer_state.json`` reads (:func:`check_resumable`).
"""

from __future__ import annotations

import json
import os
import re
import shutil

from prmkit.errors import PrmkitError

MARK = "prmkit_checkpoint.json"
STATE = "trainer_state.json"
DELETING = ".deleting"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def commit(folder: str, step: int) -> None:
    """Mark ``folder`` as a whole checkpoint of ``step`` (the last write of a checkpoint): the
    mark lists every file with its size, so a folder that lost a file since is no longer whole."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if name != MARK:
                files[os.path.relpath(path, folder)] = os.path.getsize(path)
    path = os.path.join(folder, MARK)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step, "files": files}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def committed(folder: str) -> bool:
    """Whether ``folder`` holds its mark and every file the mark lists, at its size."""
    try:
        with open(os.path.join(folder, MARK), encoding="utf-8") as f:
            mark = json.load(f)
        files = mark["files"]
        return isinstance(mark.get("step"), int) and all(
            os.path.getsize(os.path.join(folder, name)) == size for name, size in files.items())
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return False


def checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every ``checkpoint-N`` folder in ``run_dir``, oldest first."""
    if not os.path.isdir(run_dir):
        return []
    found = [(int(m.group(1)), os.path.join(run_dir, n)) for n in os.listdir(run_dir)
             if (m := _NAME.match(n)) and os.path.isdir(os.path.join(run_dir, n))]
    return sorted(found)


def last_committed(run_dir: str) -> str | None:
    """The newest committed checkpoint of ``run_dir``, or None."""
    done = [path for _, path in checkpoints(run_dir) if committed(path)]
    return done[-1] if done else None


def _readable_state(folder: str) -> bool:
    try:
        with open(os.path.join(folder, STATE), encoding="utf-8") as f:
            return isinstance(json.load(f), dict)
    except (OSError, ValueError):
        return False


def check_resumable(folder: str) -> None:
    """Refuse, in one line, a folder that is not a whole checkpoint."""
    if not os.path.isdir(folder):
        raise PrmkitError(f"resume_from_checkpoint={folder!r}: no such folder")
    if committed(folder):
        return
    if os.path.exists(os.path.join(folder, MARK)) or not _readable_state(folder):
        raise PrmkitError(f"resume_from_checkpoint={folder!r}: not a whole checkpoint (a run "
                          f"stopped while writing it, or a file of it is gone); "
                          f"resume_from_checkpoint=True takes the newest whole one")


def rotate(run_dir: str, limit: int | None, best: str | None) -> None:
    """Keep at most ``limit`` committed checkpoints, as transformers' ``save_total_limit``
    (the newest and the best are always kept); each one removed is first renamed out of the
    ``checkpoint-N`` pattern. Leftovers of an earlier removal go too."""
    for name in os.listdir(run_dir):
        if name.endswith(DELETING):
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
    if limit is None or limit <= 0:
        return
    done = [os.path.normpath(path) for _, path in checkpoints(run_dir) if committed(path)]
    if len(done) <= limit:
        return
    keep = {done[-1]} | ({os.path.normpath(best)} if best else set())
    room = len(done) - max(limit, len(keep & set(done)))
    for path in done:
        if room <= 0:
            break
        if path in keep:
            continue
        gone = path + DELETING
        os.replace(path, gone)
        shutil.rmtree(gone, ignore_errors=True)
        room -= 1
