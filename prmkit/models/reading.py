"""Reading a model's outputs at step positions: dtypes, padding, token-budget batching, Reader.

The one place both the scorers (:mod:`prmkit.models.hf`, :mod:`prmkit.models.incremental`) and
the trainers (:mod:`prmkit.train`) get step logits from, so the positions a trainer labels are the
positions a scorer reads (ARCHITECTURE.md, "The step format's contract").
"""

from __future__ import annotations

DTYPES = ("auto", "float32", "bfloat16", "float16")
# what ``auto`` means, and the torch dtype of each name
TORCH_DTYPES = {"auto": "bfloat16", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
# a trainer's compute dtype: float32 weights, optionally bfloat16 autocast
TRAIN_DTYPES = ("float32", "bfloat16")
