"""Automatic step labels: Monte Carlo rollouts (:mod:`.mc`), an LLM judge (:mod:`.judge`), the
consensus of the two (:mod:`.consensus`), a quality report against gold labels
(:mod:`.quality`) and labeling spread over Ray workers (:mod:`.distributed`). The command line
is :mod:`.cli` (``prmkit label mc|judge|consensus|quality``)."""
