"""Models that score steps: each has ``score(problems, steps) -> list[list[float | None]]``, one
score in [0, 1] per step (:class:`prmkit.models.base.PRM`).

Grouped by concept, bottom up: what an architecture is and where models come from
(``architectures``, ``body``, ``pypi``, ``names``); reading a model's outputs at step positions
(``reading``, ``surprisal``, ``folder``); the scorers (``backends``); the fast paths beside the
plain one, taken only where proven exact (``sharing``); opening a PRM by name, folder or URL
(``load``) and exporting one (``export``). ARCHITECTURE.md walks ``prmkit score`` through them.
"""
