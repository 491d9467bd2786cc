"""Reward-server throughput: dynamic batching against one request per forward pass, in one run.

Both sides serve the same PRM from the same process through the real server
(:mod:`prmkit.serve.app`, uvicorn on loopback) and the real client (``RemotePRM``, one
``POST /v1/score`` per solution, as an RL worker scoring its rollouts would send them):

* **batch size 1**: ``token_budget=1, max_wait_ms=0``, so every request gets its own forward
  pass, however many are waiting;
* **dynamic batching**: the server's defaults (``token_budget=16384``, ``max_wait_ms=10``):
  concurrent requests share forward passes.

``--concurrency`` clients (default 32) send ``--requests`` requests in all, each one solution.
Data (``--data``): ``lab`` (default), short GSM8K-like word problems of the lab world
(:mod:`prmkit.lab`, 2 to 4 operations, one step per line, about 120 tokens each), or
``gsm8k``, the four model solutions of the GSM8K paper per test problem
(``../shared/data/gsm8k/example_model_solutions.jsonl``, about 200 tokens, some far longer).
Model: the SmolLM2-135M backbone read in the Math-Shepherd format (the scores are
meaningless, the speed is not), in ``--dtype auto`` (bfloat16 on a CPU with native bfloat16, else float32) unless ``--dtype`` says otherwise, or any
``--model``/``--format`` that ``prmkit score`` takes. The sides run alternately ``--repeats``
times; the best run of each side counts (the machine is shared).

First it times the model alone on the same solutions, one at a time and in batches: the most
any batching can gain on this hardware. Then it prints throughput (solutions/s), p50/p99
latency and the mean number of requests per forward group for each side, the largest score difference between the sides, and last the ratio of
the throughputs. Usage: ``python bench/serve.py [--requests 256] [--concurrency 32]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

import torch

from prmkit.models.backends.hf import HFConfig, load_hf_prm
from prmkit.models.backends.remote import RemotePRM
from prmkit.serve.app import ServerThread, create_app
from prmkit.serve.batcher import BatcherConfig
from prmkit.serve.config import ServeConfig
from prmkit.shareddata import shared_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = shared_data_dir()
FIELDS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")


def load(data: str, n: int, shared: str = DEFAULT_DATA) -> tuple[list[str], list[list[str]]]:
    """``n`` solutions (problem, steps): lab-world problems with their reference steps, or
    GSM8K model solutions (four per problem, one step per line)."""
    if data == "lab":
        from prmkit.lab import LabConfig, make_problems

        records = make_problems(LabConfig(n=n, min_steps=2, max_steps=4, seed=0))
        return [r.problem for r in records], [r.steps for r in records]
    problems, steps = [], []
    with open(os.path.join(shared, "gsm8k", "example_model_solutions.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            for field in FIELDS:
                lines = [s.strip() for s in row[field]["solution"].split("\n") if s.strip()]
                if lines:
                    problems.append(row["question"])
                    steps.append(lines)
            if len(problems) >= n:
                break
    return problems[:n], steps[:n]


def run_side(prm, batching: BatcherConfig, problems, steps, concurrency: int) -> dict:
    """Serve ``prm`` with ``batching`` and send every solution as one request, ``concurrency``
    at a time; throughput, latencies and the scores."""
    config = ServeConfig(port=0, batching=batching)
    app = create_app(prm, config, "bench", prm.format.name)
    scores: list = [None] * len(problems)
    latencies: list[float] = []
    lock = threading.Lock()
    next_index = iter(range(len(problems)))
    with ServerThread(app, config=config) as server:
        RemotePRM(server.url).score(problems[:2], steps[:2])  # warm up
        stats0 = dict(app.state.scorer.batcher.stats.as_dict())

        def client() -> None:
            remote = RemotePRM(server.url, retries=3, timeout=600)
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                t = time.perf_counter()
                scores[i] = remote.score_request([problems[i]], [steps[i]])[0]
                with lock:
                    latencies.append(time.perf_counter() - t)

        threads = [threading.Thread(target=client) for _ in range(concurrency)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        stats = app.state.scorer.batcher.stats
        groups = stats.groups - stats0["groups"]
    latencies.sort()
    return {"throughput": len(problems) / wall, "wall_s": wall,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "requests_per_group": (stats.jobs - stats0["jobs"]) / max(1, groups),
            "scores": scores}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="lab", choices=["lab", "gsm8k"], help="the solutions")
    ap.add_argument("--shared-data", default=DEFAULT_DATA, help="the shared data folder (gsm8k)")
    ap.add_argument("--model", default="smollm2-135m", help="what prmkit score --model takes")
    ap.add_argument("--format", default="math-shepherd", help="step format (None: the model's)")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--requests", type=int, default=256, help="solutions sent per side")
    ap.add_argument("--concurrency", type=int, default=32, help="clients sending at once")
    ap.add_argument("--token-budget", type=int, default=16384, help="dynamic side's budget")
    ap.add_argument("--max-wait-ms", type=float, default=10.0, help="dynamic side's max wait")
    ap.add_argument("--repeats", type=int, default=1, help="runs per side, alternating")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    problems, steps = load(args.data, args.requests, args.shared_data)
    fmt = None if args.format in ("", "None") else args.format
    prm = load_hf_prm(args.model, fmt, HFConfig(dtype=args.dtype, token_budget=args.token_budget))
    tokens = [len(prm.encode(p, s).input_ids) for p, s in zip(problems, steps)]
    print(f"model {args.model} ({prm.format.name}, {args.dtype}); {len(problems)} {args.data} "
          f"solutions, {statistics.mean(tokens):.0f} tokens on average ({min(tokens)}-"
          f"{max(tokens)}), {statistics.mean(len(s) for s in steps):.1f} steps; "
          f"concurrency {args.concurrency}; {torch.get_num_threads()} torch threads; load average "
          f"{os.getloadavg()[0]:.1f}")
    # The ceiling: the model alone, the same solutions one at a time and all at once (sorted,
    # token-budget batches). Dynamic batching cannot beat this ratio.
    k = min(64, len(problems))
    prm.score(problems[:4], steps[:4])
    t = time.perf_counter()
    for i in range(k):
        prm.score(problems[i:i + 1], steps[i:i + 1])
    alone = time.perf_counter() - t
    t = time.perf_counter()
    prm.score(problems[:k], steps[:k])
    together = time.perf_counter() - t
    print(f"the model alone on {k} solutions: {sum(tokens[:k]) / alone:.0f} tokens/s one at a "
          f"time, {sum(tokens[:k]) / together:.0f} tokens/s in token-budget batches "
          f"(ceiling for batching: {alone / together:.2f}x)", flush=True)
    sides = {"batch size 1": BatcherConfig(token_budget=1, max_wait_ms=0),
             "dynamic batching": BatcherConfig(token_budget=args.token_budget,
                                               max_wait_ms=args.max_wait_ms)}
    best: dict[str, dict] = {}
    for r in range(args.repeats):
        for name, batching in sides.items():
            result = run_side(prm, batching, problems, steps, args.concurrency)
            print(f"  run {r + 1} {name:>16}: {result['throughput']:6.1f} solutions/s, "
                  f"p50 {result['p50_ms']:7.0f} ms, p99 {result['p99_ms']:7.0f} ms, "
                  f"{result['requests_per_group']:.1f} requests per forward group", flush=True)
            if name not in best or result["throughput"] > best[name]["throughput"]:
                best[name] = result
    one, dyn = best["batch size 1"], best["dynamic batching"]
    diff = max(abs(a - b) for x, y in zip(one["scores"], dyn["scores"]) for a, b in zip(x, y))
    print(f"largest score difference between the sides: {diff:.2g} ({args.dtype}; in bfloat16 the "
          f"batch makeup alone moves scores by a few hundredths)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(f"dynamic batching / batch size 1 throughput at concurrency {args.concurrency}: "
          f"{dyn['throughput'] / one['throughput']:.2f}x ({dyn['throughput']:.1f} vs "
          f"{one['throughput']:.1f} solutions/s; p50 {dyn['p50_ms']:.0f} vs {one['p50_ms']:.0f} ms, "
          f"p99 {dyn['p99_ms']:.0f} vs {one['p99_ms']:.0f} ms)")


if __name__ == "__main__":
    main()
