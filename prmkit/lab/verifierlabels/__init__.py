"""`prmkit lab verifier-labels` (ThinkPRM, Khalifa et al. 2025): the job (run), its AUC
intervals (stats), its figures, claims and report (report)."""
