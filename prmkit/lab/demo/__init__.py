"""`prmkit demo`, the lab's main experiment: its stages (run), scoring (scoring), the optional implicit PRM (implicit), its claims (claims) and its summary and report (summary)."""
