"""prmkit: process reward models, from labels to RL rewards.

The canonical data is the :class:`prmkit.records.Record` (one JSON object per line).
"""

__version__ = "0.1.0"
