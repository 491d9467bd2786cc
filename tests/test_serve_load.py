"""Load test on loopback: 32 concurrent clients, a bounded number of requests; every answer
equals offline scoring and none is lost (issue 9's acceptance)."""

from __future__ import annotations

import random
import threading

from prmkit.models.backends.remote import RemotePRM
from prmkit.serve.batcher import BatcherConfig
from prmkit.serve.client import PrmClient
from test_serve import TOL, close, serving, tiny_prm

CLIENTS = 32
REQUESTS_PER_CLIENT = 4


def solutions(n: int, seed: int = 0) -> tuple[list[str], list[list[str]]]:
    """GSM8K-like arithmetic solutions of 1 to 6 steps, of varied lengths."""
    rng = random.Random(seed)
    problems, steps = [], []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        problems.append(f"Natalia sold {a} clips in April and {b} in May. How many in all? ({i})")
        k = rng.randint(1, 6)
        steps.append([f"Step {j + 1}: {a} + {b * j} = {a + b * j}." for j in range(k - 1)]
                     + [f"The answer is {a + b}."])
    return problems, steps


def test_32_concurrent_clients_get_exact_answers_and_none_is_lost():
    prm = tiny_prm()
    problems, steps = solutions(200)
    offline = prm.score(problems, steps)
    rng = random.Random(1)
    # each request: 1 to 3 solutions, on /v1/score or /get_reward
    plan = [[(rng.sample(range(len(problems)), rng.randint(1, 3)), rng.random() < 0.3)
             for _ in range(REQUESTS_PER_CLIENT)] for _ in range(CLIENTS)]
    answers: dict[tuple[int, int], object] = {}
    errors: list[BaseException] = []
    with serving(prm, batching=BatcherConfig(max_wait_ms=20, max_queue=4096),
                 step_rule="blank-lines") as server:  # "auto" would see the Step markers
        start = threading.Barrier(CLIENTS)

        def client(c: int) -> None:
            remote = RemotePRM(server.url, retries=5, batch_size=8)
            rewards = PrmClient(server.url, retries=5)
            start.wait()
            try:
                for r, (idx, as_reward) in enumerate(plan[c]):
                    if as_reward:
                        queries = [problems[i] + "\n\n" + "\n\n".join(steps[i]) for i in idx]
                        answers[c, r] = rewards.get_reward(queries)
                    else:
                        answers[c, r] = remote.score([problems[i] for i in idx], [steps[i] for i in idx])
            except BaseException as e:  # reported below, with the others
                errors.append(e)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        stats = server.scorer.batcher.stats
    assert not errors, errors[:3]
    assert len(answers) == CLIENTS * REQUESTS_PER_CLIENT            # none lost
    for (c, r), got in answers.items():
        idx, as_reward = plan[c][r]
        want = [offline[i] for i in idx]
        if as_reward:
            assert close(got["step_scores"], want)
            assert all(abs(x - min(w)) <= TOL for x, w in zip(got["rewards"], want))
        else:
            assert close(got, want)
    assert stats.jobs == CLIENTS * REQUESTS_PER_CLIENT
    assert stats.solutions == sum(len(idx) for p in plan for idx, _ in p)
    # requests shared forward passes
    assert stats.max_group_jobs > 1 and stats.groups < stats.jobs
