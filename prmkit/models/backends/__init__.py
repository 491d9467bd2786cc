"""Scorers: each reads steps and gives one score in [0, 1] per step (the ``PRM`` protocol of
:mod:`prmkit.models.base`).

``hf`` runs a transformers model in this process (the plain one-pass path), ``implicit`` a
policy and its reference (log-ratio rewards, with ``sharedbody``'s shared bottom layers),
``vllm`` vLLM's pooling API, ``remote`` a running ``prmkit serve``. Each reads its inputs
through :mod:`prmkit.stepformat` and, in process, :mod:`prmkit.models.reading`.
"""
