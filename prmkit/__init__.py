"""prmkit: process reward models, from labels to RL rewards.

The canonical data is the :class:`prmkit.records.Record` (one JSON object per line).
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["PRMConfig", "PRMTrainer", "__version__"]


def __getattr__(name: str) -> Any:
    """``PRMConfig`` and ``PRMTrainer`` (TRL's PRM trainer API, :mod:`prmkit.train.trainer`),
    imported on first use: they need transformers, which the light commands never load."""
    if name == "PRMConfig":
        from prmkit.train.trlconfig import PRMConfig

        return PRMConfig
    if name == "PRMTrainer":
        from prmkit.train.trainer import PRMTrainer

        return PRMTrainer
    raise AttributeError(f"module 'prmkit' has no attribute {name!r}")
