"""Training process and outcome reward models.

``prm.py`` trains a PRM (cross-entropy on step labels read at the end of each step through the
shared step format); ``orm.py`` trains an outcome model for comparison; ``loop.py`` holds what
both share: choosing the trainable parameters, batching, the optimiser loop with validation,
best/last checkpoints, metrics and resume; ``modeldir.py`` writes and reads trained model
folders.
"""
