"""Evaluation of PRMs, each benchmark implemented as its paper defines it.

- :mod:`prmkit.evaluate.processbench`: first-error identification (Zheng et al. 2024,
  arXiv:2412.06559), with the baselines always -1, a random first error and
  :mod:`prmkit.evaluate.heuristic` (step position and length only);
- :mod:`prmkit.evaluate.prmbench`: PRMScore per error category (Song et al. 2025,
  arXiv:2501.03124);
- :mod:`prmkit.evaluate.stepwise`: step-level AUC, accuracy and ECE;
- :mod:`prmkit.evaluate.bestofn`: best-of-N accuracy against N (Lightman et al. 2023).

The metrics are pure functions of labels and predictions. :mod:`prmkit.evaluate.cli` is the
``prmkit eval`` command; :mod:`prmkit.evaluate.common` holds what the commands share.
"""
