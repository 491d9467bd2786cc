"""Prefix sharing (prmkit/models/sharing/prefix.py, prmkit/generate/prefixcache.py), both sides in one run.

Parts (``--part``, default all):

* ``offline``: the default PRM (SmolLM2-135M, prmkit format, bfloat16 unless ``--dtype``)
  scoring (a) the lab demo's test candidates, 8 per problem (``prmkit.lab``: ``make_problems``
  with the demo's test seed 1000 and 2-5 operations, ``load_lab_policy("lab:0.1:0.6")``,
  ``prmkit.lab.candidates.candidates_of``), and (b) the GSM8K test problems with the GSM8K paper's 4
  model solutions each (``../shared/data/gsm8k/example_model_solutions.jsonl``; skipped when
  absent): plain one-pass ``HFPRM.score`` against ``score_shared`` by group. Prints tokens
  computed over one-pass tokens (goal on the lab candidates: at most 0.6) and the wall ratio.
* ``serve``: the real server on loopback, ``--concurrency`` clients (32) each sending
  requests of the 8 lab candidates of one problem (a GRPO group: 8 completions of one prompt),
  with prefix sharing on and off. Prints throughput (solutions/s), the answers' largest
  difference and the ratio (goal: at least 2x).
* ``tokens``: the token figures alone, from the encodings (``SharedPrefixScorer.plan``, no
  forward pass), on larger sets: the demo's 80 test problems x 8 lab candidates, every GSM8K
  test problem x 4 solutions; and real over computed tokens after length bucketing
  (``token_budget_batches``) of one-pass scoring on the whole ProcessBench dev slice
  (SmolLM2-135M, Math-Shepherd format, as ``bench/scoring.py``), at budgets 16384 and 8192.
* ``mc``: ``label mc`` (per-step, K=8) with SmolLM2-135M-Instruct rolling out ProcessBench gsm8k
  dev solutions, the policy's prompt cache on and off: generated tokens/s.

The sides alternate ``--repeats`` times; the fastest run of each counts. The load average is
printed before and after each part. Usage: ``python bench/prefix.py [--part offline]``.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import torch

from prmkit.shareddata import shared_data_dir

DATA = shared_data_dir()


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def lab_candidates(problems: int):
    from prmkit.lab import LabConfig, load_lab_policy, make_problems
    from prmkit.lab.candidates import candidates_of

    policy, prompter = load_lab_policy("lab:0.1:0.6")
    ps = make_problems(LabConfig(n=problems, seed=1000, min_steps=2, max_steps=5))
    return candidates_of(ps, 8, policy, prompter, "lab:0.1:0.6", 1)


def gsm8k(problems: int):
    from prmkit.realdata import gsm8k_candidates

    path = os.path.join(DATA, "gsm8k", "example_model_solutions.jsonl")
    if not os.path.isfile(path):
        return None
    return [r for r in gsm8k_candidates(path) if int(r.group.split("-")[1]) < problems]


def offline_side(prm, recs, repeats):
    from prmkit.models.sharing.prefix import ShareStats, score_shared

    problems, steps, groups = [r.problem for r in recs], [r.steps for r in recs], [r.group for r in recs]
    best = {}
    for _ in range(repeats):
        for side in ("plain", "shared"):
            stats = ShareStats()
            before = prm.stats.real_tokens
            t = time.perf_counter()
            if side == "plain":
                scores = prm.score(problems, steps)
                tokens = prm.stats.real_tokens - before
            else:
                scores = score_shared(prm, problems, steps, groups, stats)
                tokens = stats.computed
            wall = time.perf_counter() - t
            if side not in best or wall < best[side][0]:
                best[side] = (wall, tokens, scores, stats)
    return best


def offline(args):
    from prmkit.models.load import open_prm
    from prmkit.models.reading import HFConfig

    prm = open_prm(None, config=HFConfig(dtype=args.dtype))
    prm.score(["warm up"], [["a step"]])
    out = {}
    for name, recs in (("lab", lab_candidates(args.lab_problems)), ("gsm8k", gsm8k(args.gsm8k_problems))):
        if recs is None:
            print(f"{name}: skipped ({DATA}/gsm8k missing)")
            continue
        print(f"{name}: {len(recs)} candidates, {len({r.group for r in recs})} problems; {load()}",
              flush=True)
        best = offline_side(prm, recs, args.repeats)
        (tp, np_, sp, _), (ts, ns, ss, st) = best["plain"], best["shared"]
        diff = max(abs(a - b) for x, y in zip(sp, ss) for a, b in zip(x, y) if a is not None)
        out[name] = (ns / np_, tp / ts)
        print(f"  one-pass {tp:.1f} s ({np_} tokens), shared {ts:.1f} s ({ns} tokens; "
              f"{st.fallbacks} fallbacks); largest score difference {diff:.2g} ({args.dtype})",
              flush=True)
    print(load())
    for name, (share, speed) in out.items():
        print(f"RESULT offline {name}: computed/one-pass tokens {share:.3f}"
              f"{' (goal <= 0.6)' if name == 'lab' else ''}, wall one-pass/shared {speed:.2f}x")


def serve_side(prm, share, groups, concurrency):
    from prmkit.models.backends.remote import RemotePRM
    from prmkit.serve.app import ServerThread, create_app
    from prmkit.serve.config import ServeConfig

    config = ServeConfig(port=0, share_prefix=share)
    app = create_app(prm, config, "bench", prm.format.name)
    answers: list = [None] * len(groups)
    todo = iter(range(len(groups)))
    lock = threading.Lock()
    with ServerThread(app, config=config) as server:
        RemotePRM(server.url, timeout=600).score_request(*groups[0])   # warm up

        def client() -> None:
            remote = RemotePRM(server.url, retries=3, timeout=600)
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                answers[i] = remote.score_request(*groups[i])

        threads = [threading.Thread(target=client) for _ in range(concurrency)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t
        health = RemotePRM(server.url).health()
    return wall, answers, health


def serve(args):
    from prmkit.models.load import open_prm
    from prmkit.models.reading import HFConfig

    prm = open_prm(None, config=HFConfig(dtype=args.dtype))
    recs = lab_candidates(args.serve_groups)
    by: dict = {}
    for r in recs:
        by.setdefault(r.group, ([], []))
        by[r.group][0].append(r.problem)
        by[r.group][1].append(r.steps)
    groups = list(by.values())
    n = sum(len(g[0]) for g in groups)
    print(f"serve: {len(groups)} requests of 8 lab candidates ({n} solutions), concurrency "
          f"{args.concurrency}; {load()}", flush=True)
    best: dict = {}
    walls: dict = {}
    for r in range(args.repeats):
        for share in (False, True):
            wall, answers, health = serve_side(prm, share, groups, args.concurrency)
            pieces, shared = health["batching"], health["prefix_sharing"]
            tokens = f", computed {shared['computed']} of {shared['plain']} tokens" if shared else ""
            print(f"  run {r + 1} sharing {'on' if share else 'off'}: {n / wall:.1f} solutions/s "
                  f"({wall:.1f} s; {pieces['groups']} pieces, {pieces['solutions'] / pieces['groups']:.1f} "
                  f"solutions each{tokens}); {load()}", flush=True)
            walls.setdefault(share, []).append(wall)
            if share not in best or wall < best[share][0]:
                best[share] = (wall, answers)
    diff = max(abs(a - b) for x, y in zip(best[False][1], best[True][1]) for u, v in zip(x, y)
               for a, b in zip(u, v) if a is not None)
    pairs = ", ".join(f"{off / on:.2f}x" for off, on in zip(walls[False], walls[True]))
    print(f"largest answer difference {diff:.2g} ({args.dtype}); each run's pair {pairs}; {load()}")
    print(f"RESULT serve: sharing on/off throughput {best[False][0] / best[True][0]:.2f}x "
          f"({n / best[True][0]:.1f} vs {n / best[False][0]:.1f} solutions/s, goal >= 2x)")


def mc(args):
    from prmkit.formats import read
    from prmkit.generate.load import load_policy
    from prmkit.generate.prefixcache import PromptCache
    from prmkit.label.mc import MCConfig, label_mc

    pb, gs = os.path.join(DATA, "processbench_dev", "gsm8k.json"), os.path.join(DATA, "gsm8k", "test.jsonl")
    if not (os.path.isfile(pb) and os.path.isfile(gs)):
        print("mc: skipped (no ProcessBench or GSM8K data)")
        return
    with open(gs, encoding="utf-8") as f:
        refs = {row["question"].strip(): row["answer"].split("####")[-1].strip() for row in map(json.loads, f)}
    records = [r for r in read("processbench", pb) if r.problem.strip() in refs][:args.mc_solutions]
    for r in records:
        r.reference = refs[r.problem.strip()]
    policy, prompter = load_policy("smollm2-135m")
    config = MCConfig(rollouts=8, max_tokens=args.mc_tokens, strategy="per-step", last_step="rollout")
    print(f"mc: {len(records)} solutions, {sum(len(r.steps) for r in records)} steps, K=8, "
          f"{args.mc_tokens} tokens per rollout; {load()}", flush=True)
    best: dict = {}
    for r in range(args.repeats):
        for kept in (0, 16):
            policy.prompts = PromptCache(kept) if kept else None
            before = policy.tokens_generated
            t = time.perf_counter()
            labels = [x.labels for x in label_mc(records, policy, prompter, config, "smollm2-135m")]
            wall = time.perf_counter() - t
            tokens = policy.tokens_generated - before
            reused = policy.prompts.reused if policy.prompts else 0
            print(f"  run {r + 1} prompt cache {'on' if kept else 'off'}: {tokens / wall:.1f} "
                  f"generated tokens/s ({tokens} in {wall:.1f} s; {reused} prompt tokens reused)",
                  flush=True)
            if kept not in best or wall < best[kept][0]:
                best[kept] = (wall, tokens, labels)
    same = sum(a == b for a, b in zip(best[0][2], best[16][2]))
    print(f"labels equal on {same}/{len(records)} solutions (bfloat16); {load()}")
    print(f"RESULT label mc generation: {best[0][1] / best[0][0]:.1f} -> "
          f"{best[16][1] / best[16][0]:.1f} tokens/s ({best[0][0] / best[16][0]:.2f}x)")


def tokens(args):
    from prmkit.models.backends.hf import load_hf_prm, token_budget_batches
    from prmkit.models.load import open_prm
    from prmkit.models.reading import HFConfig
    from prmkit.models.sharing.prefix import SharedPrefixScorer

    prm = open_prm(None, config=HFConfig(dtype="bfloat16"))
    scorer = SharedPrefixScorer(prm)
    sets = (("lab", lab_candidates(args.tokens_lab)), ("gsm8k", gsm8k(10**6)))
    for name, recs in sets:
        if recs is None:
            continue
        plan = scorer.plan([r.problem for r in recs], [r.steps for r in recs], [r.group for r in recs])
        print(f"RESULT tokens {name} ({len(recs)} candidates, {plan.groups} groups): computed/"
              f"one-pass {plan.computed / plan.plain:.3f} ({plan.computed} of {plan.plain}; "
              f"{plan.fallbacks} fallbacks)", flush=True)
    path = os.path.join(DATA, "processbench_dev")
    if not os.path.isdir(path):
        return
    rows = []
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        with open(os.path.join(path, f"{split}.json"), encoding="utf-8") as f:
            rows += json.load(f)
    ms = load_hf_prm("smollm2-135m", "math-shepherd", HFConfig(dtype="bfloat16"))
    lengths = [len(ms.encode(r["problem"], r["steps"]).input_ids) for r in rows]
    for budget in (16384, 8192):   # the greedy cut against the scorer's (ms.batches)
        greedy = token_budget_batches(lengths, budget)
        ms.config.token_budget, ms.config.batch_overhead = budget, 128
        cut = ms.batches(lengths)
        share = [sum(lengths) / sum(max(lengths[i] for i in b) * len(b) for b in batches)
                 for batches in (greedy, cut)]
        print(f"RESULT bucketing ProcessBench dev ({len(rows)} solutions, {sum(lengths)} tokens), "
              f"budget {budget}: real/computed {share[0]:.3f} greedy ({len(greedy)} batches), "
              f"{share[1]:.3f} scoring's cut ({len(cut)} batches, overhead "
              f"{ms.config.batch_overhead} tokens a pass)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="all", choices=["all", "offline", "serve", "mc", "tokens"])
    ap.add_argument("--tokens-lab", type=int, default=80, help="lab problems of the tokens part")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--lab-problems", type=int, default=40)
    ap.add_argument("--gsm8k-problems", type=int, default=40)
    ap.add_argument("--serve-groups", type=int, default=64, help="requests (of 8) per side")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--mc-solutions", type=int, default=2)
    ap.add_argument("--mc-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; torch threads {torch.get_num_threads()}; {load()}")
    for part in ("tokens", "offline", "serve", "mc"):
        if args.part in ("all", part):
            globals()[part](args)


if __name__ == "__main__":
    main()
