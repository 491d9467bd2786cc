"""`prmkit lab trace-error` (Uesato et al. 2022): the job (run), its picks and intervals (stats), its figures, claims and report (report)."""
