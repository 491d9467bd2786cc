"""`prmkit lab rl` (Math-Shepherd; DeepSeek-R1): the job and its arms (run), the learnable step
policy (policy), its curves and claims (stats) and its report (report)."""
