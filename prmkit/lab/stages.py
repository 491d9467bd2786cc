"""The lab demo's stages: a folder that a rerun with the same settings resumes, stage files
written whole (a killed stage is redone, a finished one reused), and the stage lines."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, is_dataclass
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError
from prmkit.records import Record, read_records, write_records


class Printer:
    """Prints a stage's line with the seconds since the last one; ``elapsed``: since the
    start."""

    def __init__(self) -> None:
        self.t = self.start = time.time()

    @property
    def elapsed(self) -> float:
        return time.time() - self.start

    def __call__(self, text: str) -> None:
        print(text, flush=True)

    def stage(self, k: int, text: str) -> None:
        now = time.time()
        print(f"{k}. {text} [{now - self.t:.0f} s]", flush=True)
        self.t = now


def begin(command: str, config: Any, version: int, first: str, own: tuple[str, ...] = (),
          free: tuple[str, ...] = ()) -> Printer:
    """A lab run's opening: its folder prepared (:func:`prepare`, ``config.output``), then its
    first line, ``prmkit COMMAND: FIRST; files in OUT/``; the printer of its stage lines."""
    prepare(config.output, config, version, own, free)
    say = Printer()
    say(f"prmkit {command}: {first}; files in {config.output}/")
    return say


def prepare(out: str, config: Any, version: int, own: tuple[str, ...] = (),
            free: tuple[str, ...] = ()) -> None:
    """Reuse ``out`` when it holds a run with the same settings, else start it afresh. The
    settings named in ``own`` belong to a stage that checks them itself; those in ``free`` are
    read only where no stage's file depends on them (the summary written at every run)."""
    settings = os.path.join(out, "settings.json")
    skip = {"output", *own, *free}
    wanted = {**{k: v for k, v in settings_of(config).items() if k not in skip},
              "stages_version": version}
    if os.path.isdir(out):
        if not os.path.isfile(settings):
            if os.listdir(out):   # never delete a folder a lab run did not make
                raise PrmkitError(f"{out} exists and is not a lab run's folder (no "
                                  f"settings.json): choose another --output")
            same = False
        else:
            same = same_settings(settings, wanted)
        if not same:
            if os.path.isfile(settings):
                print(f"{out}/ holds a run with other settings: starting afresh", flush=True)
            shutil.rmtree(out)
        else:
            print(f"resuming the run in {out}/ (same settings): finished stages are reused",
                  flush=True)
    os.makedirs(out, exist_ok=True)
    with open(settings, "w", encoding="utf-8") as f:
        json.dump(wanted, f, indent=2)


def settings_of(config: Any) -> dict[str, Any]:
    """The settings of an experiment's config as one flat mapping, as its command line has them:
    a nested config (the world, :class:`prmkit.world.config.WorldConfig`) gives its own fields."""
    out: dict[str, Any] = {}
    for k, v in asdict(config).items():
        out.update(v if isinstance(v, dict) and is_dataclass(getattr(config, k)) else {k: v})
    return out


def same_settings(path: str, wanted: dict[str, Any]) -> bool:
    """Whether the JSON file ``path`` holds exactly ``wanted`` (False when missing or unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f) == wanted
    except (OSError, ValueError):
        return False


def own_settings(path: str, wanted: dict[str, Any], made: Sequence[str]) -> None:
    """For a stage with settings of its own: when ``path`` does not hold exactly ``wanted``,
    remove what the stage made (the files and folders ``made``) and write ``wanted`` there."""
    if same_settings(path, wanted):
        return
    for p in made:
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.unlink(p)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(wanted, f, indent=2)


def stage(out: str, name: str, make: Callable[[], list[Record]]) -> list[Record]:
    path = os.path.join(out, name)
    if os.path.exists(path):
        return read_records(path)
    records = make()
    write_records(path, records)
    return records


def stage_json(out: str, name: str, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    path = os.path.join(out, name)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    value = make()
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
    os.replace(tmp, path)
    return value


class Lazy:
    """A value made on first use."""

    def __init__(self, make: Callable[[], Any]):
        self.make, self.value = make, None

    def __call__(self) -> Any:
        if self.value is None:
            self.value = self.make()
        return self.value
