"""Prefix sharing: many solutions that begin alike, read at the cost of their shared tokens.

A fast path beside the plain one (:mod:`prmkit.models.backends.hf`), equal to it within float
rounding, and taken only where that is proven: an architecture on the allowlist of
:mod:`prmkit.models.architectures`, and groups that fit any local attention span. ``prefix``
scores groups of candidates (``prmkit score``, ``eval bestofn``, the server) over
``tokentrees`` and ``treepass`` (tree attention, one pass) or ``cachedpass`` (key-value
caches, a depth at a time); ``incremental`` grows a search's prefixes on their caches;
``stats`` keeps the accounting.
"""
