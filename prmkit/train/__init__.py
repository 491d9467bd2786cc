"""Training process and outcome reward models.

``prm.py`` trains a PRM (cross-entropy on step labels read at the end of each step through the
shared step format), ``orm.py`` an outcome model for comparison, ``implicit.py`` a PRM from
outcome labels only; each owns its objective. ``loop.py`` holds the optimiser loop they share
(trainable parameters, batching, validation, best/last checkpoints, metrics and resume),
``checkpoint.py`` the order of the checkpoint writes that makes a kill at any moment safe, and
``common.py`` their shared config and helpers; ``prmkit/models/folder.py`` writes and reads
trained model folders.
"""
