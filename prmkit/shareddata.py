"""Where the shared public data lives: ``$PRMKIT_SHARED_DATA``, else ``../shared/data`` beside
the repository. The real-data demo, the benchmarks, the scripts and the tests that read real
files all ask here."""

from __future__ import annotations

import os

ENV = "PRMKIT_SHARED_DATA"


def shared_data_dir() -> str:
    """The shared data folder (it may not exist: callers say what they need from it)."""
    env = os.environ.get(ENV)
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(os.path.dirname(repo), "shared", "data")
