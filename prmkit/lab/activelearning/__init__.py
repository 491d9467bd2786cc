"""`prmkit lab active-learning` (Lightman et al. 2023): the job (run) and its efficiency ratio with its interval (stats)."""
