"""Scoring batches (``bucket_batches``) against an exhaustive search over every way to cut the
sorted order, and the padding it saves over the greedy token-budget batches."""

import itertools
import random

import pytest

from prmkit.errors import PrmkitError
from prmkit.models.reading import HFConfig, bucket_batches, token_budget_batches


def cost(lengths, batches, overhead):
    return sum(len(b) * max(lengths[i] for i in b) + overhead for b in batches)


def fits(lengths, batches, budget):
    return all(len(b) == 1 or len(b) * max(lengths[i] for i in b) <= budget for b in batches)


def brute_force(lengths, budget, overhead):
    """The least cost over every cut of the longest-first order (2^(n-1) of them)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = None
    for cuts in itertools.product((0, 1), repeat=len(order) - 1):
        batches, current = [], [order[0]]
        for i, cut in zip(order[1:], cuts):
            if cut:
                batches.append(current)
                current = []
            current.append(i)
        batches.append(current)
        if fits(lengths, batches, budget):
            c = cost(lengths, batches, overhead)
            best = c if best is None else min(best, c)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_least_cost_cut_equals_exhaustive_search(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 10))]
    budget = rng.choice((50, 100, 200))          # some lengths alone exceed 50
    overhead = rng.choice((0, 5, 40, 1000))
    batches = bucket_batches(lengths, budget, overhead)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert [lengths[i] for b in batches for i in b] == sorted(lengths, reverse=True)
    assert fits(lengths, batches, budget)
    assert cost(lengths, batches, overhead) == brute_force(lengths, budget, overhead)


def test_hand_worked_cut():
    # lengths 10 and 8 together and the 2s together: padded 20 + 6 plus 2 passes x 3 = 32;
    # each apart 24 + 3 x 3 = 33; all in one 50 + 3
    assert bucket_batches([2, 10, 2, 8, 2], 30, 3) == [[1, 3], [0, 2, 4]]
    # a pass costing 1: apart 24 + 3 = 27 beats together 26 + 2 = 28
    assert bucket_batches([2, 10, 2, 8, 2], 30, 1) == [[1], [3], [0, 2, 4]]
    # the budget: 10 x 3 > 30, so the 2s cannot join the 10
    assert bucket_batches([2, 10, 2, 8, 2], 20, 1000) == [[1, 3], [0, 2, 4]]


def test_wastes_less_padding_than_greedy_batches():
    rng = random.Random(0)
    lengths = [int(rng.lognormvariate(6.5, 0.5)) for _ in range(300)]
    greedy = token_budget_batches(lengths, 16384)
    ours = bucket_batches(lengths, 16384, 128)
    real = sum(lengths)
    assert real / cost(lengths, ours, 0) > real / cost(lengths, greedy, 0)
    assert cost(lengths, ours, 128) <= cost(lengths, greedy, 128)


def test_negative_overhead_is_refused():
    with pytest.raises(PrmkitError, match="batch_overhead"):
        HFConfig(batch_overhead=-1)
