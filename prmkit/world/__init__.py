"""The lab world: problems whose every step is checked exactly (problems), the synthetic policy that solves them (policy) and the gold PRM (oracle)."""
