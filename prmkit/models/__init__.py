"""PRM backends. Each has ``score(problems, steps) -> list[list[float | None]]``.

See :class:`prmkit.models.base.PRM` for the protocol.
"""
