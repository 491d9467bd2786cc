"""`prmkit lab compute-optimal` (Snell et al. 2024): the job (run), weighted best-of-N draws, the
per-bin choice and the claims' statistics (stats), figures and `summary.json` (summary) and the
report (report)."""
