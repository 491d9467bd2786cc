"""The server shares prefixes across the requests it batches (prmkit/models/sharing/prefix.py's
``score_by_problem``): GRPO-shaped load, completions of one prompt sent close together, gets
the answers of one-pass scoring (float32) while the prompt is read once per micro-batch."""

from __future__ import annotations

import threading

import pytest
import tiny
from test_incremental import sharp
from test_serve import close, serving

from prmkit.models.backends.hf import HFConfig, HFPRM
from prmkit.models.backends.remote import RemotePRM
from prmkit.serve.batcher import BatcherConfig
from prmkit.stepformat import PRESETS

PROMPTS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends in April."]


def completions(prompt: str, n: int = 4) -> list[list[str]]:
    return [["Let us add.", f"{k} + {len(prompt)} = {k + len(prompt)}."][:1 + k % 2]
            + [f"The answer is {k}."] for k in range(n)]


def send_all(url: str, requests: list[tuple[list[str], list[list[str]]]]) -> list:
    """Every request at once, from its own client thread; the answers in request order."""
    out: list = [None] * len(requests)

    def client(i: int) -> None:
        problems, steps = requests[i]
        out[i] = RemotePRM(url, timeout=60).score_request(problems, steps)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("fmt", ["math-shepherd", "prmkit"])
def test_batched_requests_share_prefixes_and_answer_as_one_pass(fmt):
    prm = HFPRM(sharp("lm" if fmt == "math-shepherd" else "classes"), tiny.tokenizer(),
                PRESETS[fmt], HFConfig(dtype="float32"))
    # 6 requests: each a group of 4 completions of one prompt, two requests per prompt, and
    # one request of a single completion (its prompt shared with the other requests' only
    # when they land in the same micro-batch)
    requests = [([p] * 4, completions(p)) for p in PROMPTS for _ in range(2)]
    requests += [([PROMPTS[0]], completions(PROMPTS[0], 1)), ([PROMPTS[1]] * 2, completions(PROMPTS[1], 2))]
    want = [prm.score(p, s) for p, s in requests]
    answers, health = {}, {}
    for share in (True, False):
        # a long wait lets every request join one micro-batch
        with serving(prm, batching=BatcherConfig(max_wait_ms=500), share_prefix=share) as server:
            answers[share] = send_all(server.url, requests)
            health[share] = RemotePRM(server.url).health()
    for share in (True, False):
        for got, ref in zip(answers[share], want):
            assert close(got, ref, 1e-4)
    sharing = health[True]["prefix_sharing"]
    assert sharing["groups"] >= len(PROMPTS) and sharing["fallbacks"] == 0
    assert 0 < sharing["computed"] < sharing["plain"]
    assert health[False]["prefix_sharing"] is None


def test_a_prm_that_cannot_share_is_served_as_before():
    from test_serve import Held

    prm = HFPRM(tiny.causal_lm(), tiny.tokenizer(), PRESETS["math-shepherd"], HFConfig(dtype="float32"))
    held = Held(prm)
    held.release.set()
    with serving(held) as server:
        got = RemotePRM(server.url).score([PROMPTS[0]] * 2, completions(PROMPTS[0], 2))
        assert RemotePRM(server.url).health()["prefix_sharing"] is None
    assert close(got, prm.score([PROMPTS[0]] * 2, completions(PROMPTS[0], 2)))
