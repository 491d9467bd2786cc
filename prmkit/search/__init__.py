"""PRM-guided search: best-of-N, beam search, DVTS and MCTS behind one contract.

    method(problems, generator, prompter, prm, config) -> SearchResult(records, account)

best_of_n.py   whole solutions, the best by the PRM (the baseline)
beam.py        beam search over steps, with optional lookahead (Snell et al. 2024)
dvts.py        diverse verifier tree search: independent greedy subtrees (Beeching et al. 2024)
mcts.py        Monte Carlo tree search, PUCT with the PRM as value
compute_optimal.py   choosing method and width by estimated difficulty (Snell et al. 2024)
base.py        the shared config, compute account, nodes, expansion and records
run.py         the resumable job; cli.py the ``prmkit search`` command

New steps are scored incrementally on top of their prefix's key-value cache
(:mod:`prmkit.models.sharing.incremental`).
"""

from prmkit.search.base import Compute, ComputeAccount, SearchConfig, SearchResult
from prmkit.search.beam import BeamConfig, beam_search
from prmkit.search.best_of_n import best_of_n
from prmkit.search.dvts import dvts
from prmkit.search.mcts import MCTSConfig, mcts
from prmkit.search.run import METHODS, run_search

__all__ = ["BeamConfig", "Compute", "ComputeAccount", "MCTSConfig", "METHODS", "SearchConfig",
           "SearchResult", "beam_search", "best_of_n", "dvts", "mcts", "run_search"]
