"""The generative PRM's backends: an OpenAI-compatible fake server with logprobs (in process,
and behind `prmkit score` killed with SIGKILL and resumed), the transformers backend's verdict
probabilities against a slow full-pass reference, and the CLI's refusals."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import real_tokenizers as rt
from prmkit.cli import main
from prmkit.generate.openai import OpenAIConfig
from prmkit.verify import templates as T
from prmkit.verify.openai import OpenAIVerifier
from prmkit.verify.backend import Sampling
from prmkit.verify.prm import GenConfig, GenerativePRM
from prmkit.verify.verdicts import parse_whole


def verdict_of(seed: int, step: int) -> tuple[bool, float]:
    """The fake verifier's verdict of a step and its P(correct), from the request's seed."""
    p = 0.1 + 0.8 * ((seed >> (3 * step)) % 8) / 7
    return p >= 0.5, p


class VerifierServer:
    """/v1/completions as a verifier: a ThinkPRM-style verification of the prompt's steps, its
    tokens and top logprobs at each verdict word (both words' first tokens); ``logprobs=False``
    answers without them."""

    def __init__(self, tokenizer, logprobs=True, delay=0.0):
        self.firsts = [tokenizer.decode(tokenizer(w, add_special_tokens=False)["input_ids"][:1])
                       for w in ("correct", "incorrect")]
        self.logprobs, self.delay, self.bodies = logprobs, delay, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                time.sleep(server.delay)
                data = json.dumps(server.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, body):
        if body.get("max_tokens") == 1:   # ThinkPRM's decision after its question
            return decision_answer(body["prompt"])
        solution = body["prompt"].split("[Solution]")[1]
        n = len(re.findall(r"^Step \d+:", solution, re.MULTILINE))
        tokens, tops = [], []
        for i in range(1, n + 1):
            ok, p = verdict_of(body["seed"], i)
            word = "correct" if ok else "incorrect"
            first = self.firsts[0 if ok else 1]
            alt = {self.firsts[0]: math.log(p), self.firsts[1]: math.log(1 - p)}
            for tok, top in [(f"Step {i}: fine.\n\\boxed{{", {}), (first, alt),
                             (word[len(first):] + "}\n", {})]:
                tokens.append(tok)
                tops.append(top or {tok: 0.0})
        text = "".join(tokens)
        choice = {"text": text, "finish_reason": "stop", "stop_reason": None,
                  "logprobs": {"tokens": tokens, "top_logprobs": tops} if self.logprobs else None}
        return {"choices": [choice], "usage": {"completion_tokens": len(tokens),
                                               "prompt_tokens": 10}}

    def close(self):
        self.httpd.shutdown()


def decision_of(prompt: str) -> float:
    """The fake verifier's P(yes) after ``Is the solution correct?``: .2 after a verification
    that called a step incorrect, else .9."""
    assert prompt.endswith("\n" + T.THINKPRM_END), prompt[-80:]
    return 0.2 if "{incorrect}" in prompt.split("Let's verify step by step:")[-1] else 0.9


def decision_answer(prompt: str) -> dict:
    p = decision_of(prompt)
    top = {" Yes": math.log(p), " No": math.log(1 - p)}
    choice = {"text": " Yes", "finish_reason": "length",
              "logprobs": {"tokens": [" Yes"], "top_logprobs": [top]}}
    return {"choices": [choice], "usage": {"completion_tokens": 1, "prompt_tokens": 10}}


def expected_outcome(prompt: str, k: int, n: int) -> float:
    """The mean P(yes) of k verifications of the fake server, by the same rule."""
    from prmkit.generate.base import sample_seed

    ps = [0.2 if any(not verdict_of(sample_seed(0, prompt, s), i)[0] for i in range(1, n + 1))
          else 0.9 for s in range(k)]
    return sum(ps) / k


PROBLEM, STEPS = "What is 2 + 3 * 4?", ["3 * 4 = 12.", "2 + 12 = 14.", "The answer is 14."]


def expected(prompt: str, k: int, n: int) -> list[float | None]:
    """The step scores of k verifications of the fake server, worked out by the rule."""
    from prmkit.generate.base import sample_seed

    values = []
    for s in range(k):
        seed, row, wrong = sample_seed(0, prompt, s), [], None
        for i in range(1, n + 1):
            ok, p = verdict_of(seed, i)
            row.append(wrong if wrong is not None else p)
            if not ok and wrong is None:
                wrong = p
        values.append(row)
    return [sum(r[j] for r in values) / k for j in range(n)]


def test_openai_backend_reads_the_verdicts_logprobs():
    tok = rt.smollm2()
    server = VerifierServer(tok)
    try:
        t = T.get_template("thinkprm")
        backend = OpenAIVerifier(OpenAIConfig(base_url=server.url, model="m"), tok)
        prm = GenerativePRM(backend, t, T.chat_of(tok, t, "m"), tok.eos_token,
                            GenConfig(samples=3, max_new_tokens=64))
        scores = prm.score([PROBLEM], [STEPS])[0]
        prompt = T.whole_prompt(t, T.chat_of(tok, t, "m"), PROBLEM, STEPS)
        assert scores == pytest.approx(expected(prompt, 3, 3), abs=1e-12)
        # ThinkPRM's solution-level P(yes): one greedy token after each verification's question
        assert prm.outcome_of(PROBLEM, STEPS) == pytest.approx(expected_outcome(prompt, 3, 3))
        decisions = [b for b in server.bodies if b["max_tokens"] == 1]
        assert len(decisions) == 3 and all(b["temperature"] == 0.0 for b in decisions)
        server.bodies[:] = [b for b in server.bodies if b["max_tokens"] != 1]
        assert all(b["logprobs"] == 20 and b["stop"] == T.whole_stops(3) for b in server.bodies)
        # llama.cpp samples without its repeat penalty, as the logprobs it returns are read
        assert all(b["repeat_penalty"] == 1.0 for b in server.bodies)
        assert len({b["seed"] for b in server.bodies}) == 3
        assert prm.stats.parsed == 3
        # no top_k, OpenAI's API has none; top_k is sent where set (GenPRM's recipe)
        assert all(b["top_p"] == 1.0 and "top_k" not in b for b in server.bodies)
        server.bodies.clear()
        backend.sample(prompt, 2, T.whole_stops(3), 64, Sampling(0.6, 0.95, 20), 0)
        assert [(b["temperature"], b["top_p"], b["top_k"]) for b in server.bodies] == \
            [(0.6, 0.95, 20)] * 2
    finally:
        server.close()


def test_a_server_without_logprobs_is_one_line_and_exit_2(tmp_path, capsys):
    server = VerifierServer(rt.smollm2(), logprobs=False)
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": PROBLEM, "steps": STEPS}) + "\n")
    try:
        rc = main(["score", "--backend", "generative", "--model", "smollm2-135m", "--format",
                   "thinkprm", "--server", server.url, "--input", str(data), "--output",
                   str(tmp_path / "out.jsonl")])
    finally:
        server.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "returned no logprobs" in err[0], err


def test_unknown_format_and_missing_chat_template_exit_2(tmp_path, capsys):
    pytest.importorskip("torch")
    import tiny

    folder = tmp_path / "bare"
    tiny.causal_lm().save_pretrained(folder)
    tok = copy.deepcopy(tiny.tokenizer())   # the shared one keeps its template
    tok.chat_template = None
    tok.save_pretrained(folder)
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": PROBLEM, "steps": STEPS}) + "\n")
    base = ["score", "--backend", "generative", "--input", str(data), "--output",
            str(tmp_path / "out.jsonl")]
    assert main(base + ["--model", str(folder), "--format", "thinkprn"]) == 2
    assert "'thinkprn' is not a generative PRM template" in capsys.readouterr().err
    assert main(base + ["--model", str(folder), "--format", "genprm"]) == 2
    assert "has no chat template, and --format genprm needs one" in capsys.readouterr().err


def test_killed_generative_run_resumes_to_the_unbroken_output(tmp_path):
    tok = rt.smollm2()
    server = VerifierServer(tok, delay=0.5)   # each record takes a while: a window for the kill
    data = tmp_path / "in.jsonl"
    with open(data, "w") as f:
        for i in range(8):
            f.write(json.dumps({"id": f"r{i}", "problem": f"{PROBLEM} ({i})",
                                "steps": STEPS[:1 + i % 3]}) + "\n")
    args = lambda out: [sys.executable, "-m", "prmkit.cli", "score", "--backend", "generative",
                        "--model", "smollm2-135m", "--format", "thinkprm", "--samples", "2",
                        "--server", server.url, "--chunk", "1", "--input", str(data),
                        "--output", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        full = tmp_path / "full.jsonl"
        done = subprocess.run(args(full), env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "parse rate 100.0% (16 of 16" in done.stderr
        out = tmp_path / "killed.jsonl"
        proc = subprocess.Popen(args(out), env=env, stderr=subprocess.DEVNULL)
        partial = str(out) + ".partial"
        deadline = time.time() + 600   # a loaded machine starts the command slowly
        while time.time() < deadline and proc.poll() is None:   # the settings and 2 records
            if os.path.exists(partial) and open(partial).read().count("\n") >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not out.exists() and os.path.exists(partial)
        again = subprocess.run(args(out), env=env, capture_output=True, text=True)
        assert again.returncode == 0, again.stderr[-2000:]
        assert "resuming:" in again.stderr
    finally:
        server.close()
    assert out.read_text() == full.read_text()
    rows = [json.loads(line) for line in full.read_text().splitlines()]
    assert all(len(r["step_scores"]) == len(r["steps"]) and None not in r["step_scores"]
               for r in rows)


def tiny_backend():
    """A tiny causal LM as a transformers verifier backend, float32, one thread, and the
    ``plain`` prompt of the test solution."""
    torch = pytest.importorskip("torch")
    import tiny
    from prmkit.generate.hf import HFGenConfig, HFGenerator
    from prmkit.verify.hf import HFVerifier

    torch.set_num_threads(1)
    tok, model = tiny.tokenizer(), tiny.causal_lm()
    backend = HFVerifier(HFGenerator(model, tok, HFGenConfig(dtype="float32")))
    prompt = T.whole_prompt(T.get_template("plain"), T.chat_of(tok, T.get_template("plain"), "m"),
                            PROBLEM, STEPS)
    return torch, tok, model, backend, prompt


def test_hf_verdict_probs_equal_a_full_pass_per_sample():
    from prmkit.generate.hf import encode_prompt
    from prmkit.verify.backend import Sample

    torch, tok, model, backend, prompt = tiny_backend()
    texts = ["Step 1: ok \\boxed{correct}\nStep 2: \\boxed{incorrect}",
             "\\boxed{incorrect} and so on, a longer one: The answer is 5."]
    samples = [Sample(t, "eos", 0) for t in texts]
    ats = [[v.at for v in parse_whole(t, 3) if v is not None] for t in texts]
    got = backend.verdict_probs(prompt, samples, ("correct", "incorrect"), ats)
    yes, no = backend.first_token("correct"), backend.first_token("incorrect")
    assert yes != no
    p_ids = encode_prompt(tok, prompt)
    for text, at, row in zip(texts, ats, got):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        starts = {s: i for i, (s, _) in enumerate(enc["offset_mapping"])}
        with torch.no_grad():
            logits = model(torch.tensor([p_ids + enc["input_ids"]])).logits[0].float()
        for a, value in zip(at, row):
            if a not in starts:
                assert value is None
                continue
            ref = torch.softmax(logits[len(p_ids) + starts[a] - 1][[yes, no]], 0)[0].item()
            assert value == pytest.approx(ref, abs=1e-5)
    assert any(v is not None for row in got for v in row)
    assert backend.stats.prompt_tokens_saved == len(p_ids)   # read once for the 2 samples


def test_hf_backend_scores_reproducibly_and_counts_what_it_saves():
    torch = pytest.importorskip("torch")
    import tiny
    from prmkit.generate.hf import HFGenConfig, HFGenerator
    from prmkit.verify.hf import HFVerifier

    torch.set_num_threads(1)
    make = lambda: HFVerifier(HFGenerator(tiny.causal_lm(), tiny.tokenizer(),
                                          HFGenConfig(dtype="float32")))
    t = T.get_template("plain")
    runs = []
    for _ in range(2):
        backend = make()
        prm = GenerativePRM(backend, t, T.chat_of(backend.tokenizer, t, "m"), "",
                            GenConfig(samples=3, max_new_tokens=8))
        scores = prm.score([PROBLEM], [STEPS])
        texts = [x.text for x in backend.sample("a prompt", 3, [], 8, Sampling(0.7), 5)]
        runs.append((scores, texts))
        assert prm.stats.samples == 3 and prm.stats.tokens_generated > 0
        assert prm.stats.prompt_tokens_saved >= 2 * prm.stats.prompt_tokens // 3 > 0
    assert runs[0] == runs[1] and len(set(runs[0][1])) > 1   # seeded, and the samples differ
    backend.gen.max_positions = 20     # a prompt longer than the model takes: cut, not a crash
    prm = GenerativePRM(backend, t, T.chat_of(backend.tokenizer, t, "m"), "", GenConfig(samples=2))
    assert prm.score([PROBLEM], [STEPS]) == [[None] * 3] and prm.stats.capped == 2


def test_prmkit_serve_serves_a_generative_prm():
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from prmkit.serve.app import ServerThread, create_app
    from prmkit.serve.config import ServeConfig

    tok = rt.smollm2()
    server = VerifierServer(tok)
    try:
        t = T.get_template("thinkprm")
        make = lambda: GenerativePRM(OpenAIVerifier(OpenAIConfig(base_url=server.url, model="m"), tok),
                                     t, T.chat_of(tok, t, "m"), tok.eos_token,
                                     GenConfig(samples=2, max_new_tokens=64))
        offline = make().score([PROBLEM], [STEPS])
        prm = make()
        config = ServeConfig(host="127.0.0.1", port=0)
        app = create_app(prm, config, "verifier", prm.format.name)
        with ServerThread(app, host="127.0.0.1", config=config) as running:
            with httpx.Client(base_url=running.url, trust_env=False, timeout=30) as c:
                body = c.post("/v1/score", json={"problems": [PROBLEM], "steps": [STEPS]}).json()
                health = c.get("/health").json()
    finally:
        server.close()
    assert body["step_scores"] == offline and None not in offline[0]
    assert health["format"] == "thinkprm"


class VLLMParams:   # the SamplingParams fields prmkit sets, with vLLM's names
    def __init__(self, **kw):
        assert set(kw) in ({"n", "temperature", "top_p", "top_k", "max_tokens", "stop",
                            "include_stop_str_in_output", "logprobs", "seed"},
                           {"n", "temperature", "max_tokens", "logprobs"})   # a decision
        self.__dict__.update(kw)


class StandInLLM:
    """vLLM's offline API as the verifier backend calls it: the fake server's verifications,
    as token ids with per-token logprobs (``Logprob`` objects keyed by token id)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.server, self.requests = tokenizer, VerifierServer.__new__(VerifierServer), []
        self.server.firsts = [tokenizer.decode(tokenizer(w, add_special_tokens=False)["input_ids"][:1])
                              for w in ("correct", "incorrect")]
        self.server.logprobs = True
        self.word_ids = {first: tokenizer(w, add_special_tokens=False)["input_ids"][0]
                         for first, w in zip(self.server.firsts, ("correct", "incorrect"))}

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=True):
        from types import SimpleNamespace as NS

        outs = []
        for p, sp in zip(prompts, params if isinstance(params, list) else [params] * len(prompts)):
            assert set(p) == {"prompt_token_ids"} and sp.n == 1 and sp.logprobs == 20
            prompt = self.tokenizer.decode(p["prompt_token_ids"])
            if sp.max_tokens == 1:   # ThinkPRM's decision after its question
                yes, no = (self.tokenizer(w, add_special_tokens=False)["input_ids"][0]
                           for w in (" Yes", " No"))
                q = decision_of(prompt)
                top = {yes: NS(logprob=math.log(q)), no: NS(logprob=math.log(1 - q))}
                outs.append(NS(outputs=[NS(text=" Yes", token_ids=[yes], logprobs=[top])]))
                continue
            self.requests.append(sp)
            choice = self.server.answer({"prompt": prompt, "seed": sp.seed})["choices"][0]
            ids, lps = [], []
            for n, (text, top) in enumerate(zip(choice["logprobs"]["tokens"],
                                                choice["logprobs"]["top_logprobs"])):
                tid = self.word_ids.get(text, 10**6 + n)   # a made-up id for other pieces
                ids.append(tid)
                lps.append({self.word_ids.get(t, tid): NS(logprob=v, decoded_token=t)
                            for t, v in top.items()})
            out = NS(text=choice["text"], token_ids=ids, logprobs=lps, finish_reason="stop",
                     stop_reason="Is the solution correct?")
            outs.append(NS(outputs=[out]))
        return outs


def test_vllm_backend_follows_the_offline_api_and_reads_the_logprobs():
    from prmkit.verify.vllm import VLLMVerifier

    tok = rt.smollm2()
    llm = StandInLLM(tok)
    t = T.get_template("thinkprm")
    prm = GenerativePRM(VLLMVerifier(llm, VLLMParams), t, T.chat_of(tok, t, "m"), tok.eos_token,
                        GenConfig(samples=3, max_new_tokens=64))
    scores = prm.score([PROBLEM], [STEPS])[0]
    prompt = T.whole_prompt(t, T.chat_of(tok, t, "m"), PROBLEM, STEPS)
    assert scores == pytest.approx(expected(prompt, 3, 3), abs=1e-12)
    assert prm.outcome_of(PROBLEM, STEPS) == pytest.approx(expected_outcome(prompt, 3, 3))
    assert [r.stop for r in llm.requests] == [T.whole_stops(3)] * 3
    assert [(r.top_p, r.top_k) for r in llm.requests] == [(1.0, -1)] * 3   # vLLM's -1: off
    assert prm.stats.parsed == 3 and prm.stats.prompt_tokens_saved > 0


def test_eval_processbench_with_a_generative_prm_records_its_parse_rate(tmp_path, capsys):
    tok = rt.smollm2()
    server = VerifierServer(tok)
    data = tmp_path / "gsm8k.json"
    data.write_text(json.dumps([
        {"id": "a", "problem": PROBLEM, "steps": STEPS, "label": -1, "final_answer_correct": True},
        {"id": "b", "problem": "What is 1 + 1?", "steps": ["1 + 1 = 3.", "So 3."], "label": 0,
         "final_answer_correct": False}]))
    out = tmp_path / "pb.json"
    try:
        rc = main(["eval", "processbench", "--data", str(data), "--model", "smollm2-135m",
                   "--backend", "generative", "--format", "thinkprm", "--samples", "2",
                   "--server", server.url, "--output", str(out)])
    finally:
        server.close()
    err = capsys.readouterr().err
    assert rc == 0, err
    res = json.loads(out.read_text())
    gen = res["scored_by"]["generative"]
    assert (gen["samples"], gen["parsed"], gen["solutions"]) == (4, 4, 2)
    assert gen["samples"] == 4 and "parse rate 100.0% (4 of 4" in err
    scores = [json.loads(line)["step_scores"] for line in open(tmp_path / "pb.scores.jsonl")]
    assert [len(s) for s in scores] == [3, 2] and None not in scores[0] + scores[1]


def test_whole_verifications_sampled_in_batches_equal_one_solution_at_a_time():
    """The transformers backend samples several solutions' verifications in one batch
    (solutions with as many steps together); each text and score is what sampling that
    solution alone gives, and every solution is yielded once."""
    torch = pytest.importorskip("torch")
    import tiny
    from prmkit.generate.hf import HFGenConfig, HFGenerator
    from prmkit.verify.hf import HFVerifier
    from prmkit.verify.backend import SamplesMany

    class Alone:   # the same backend without batches
        def __init__(self, inner):
            self.inner, self.stats = inner, inner.stats

        def sample(self, *args):
            return self.inner.sample(*args)

        def verdict_probs(self, *args):
            return self.inner.verdict_probs(*args)

        def decision_probs(self, *args):
            return self.inner.decision_probs(*args)

    torch.set_num_threads(1)
    t = T.get_template("plain")
    problems = [PROBLEM, "What is 7 - 2?", PROBLEM, "What is 3 * 3?", "What is 1 + 1?"]
    steps = [STEPS, ["7 - 2 = 5.", "The answer is 5."], STEPS[:2], ["3 * 3 = 9.", "9."], []]
    got = []
    for wrap in (lambda b: b, Alone):
        backend = HFVerifier(HFGenerator(tiny.causal_lm(), tiny.tokenizer(), HFGenConfig(dtype="float32")))
        assert isinstance(backend, SamplesMany) and not isinstance(Alone(backend), SamplesMany)
        prm = GenerativePRM(wrap(backend), t, T.chat_of(backend.tokenizer, t, "m"), "",
                            GenConfig(samples=2, max_new_tokens=12, temperature=0.7))
        scores = dict(prm.score_iter(problems, steps))
        assert sorted(scores) == list(range(len(problems)))
        assert prm.score(problems, steps) == [scores[i] for i in range(len(problems))]   # in order
        got.append((scores, [prm.verifications_of(p, s) for p, s in zip(problems, steps)],
                    [prm.outcome_of(p, s) for p, s in zip(problems, steps)],
                    prm.stats.samples, prm.stats.tokens_generated))
    assert got[0] == got[1]
    assert all(len(texts) == 2 for texts in got[0][1][:4]) and got[0][1][4] == []


def test_hf_decision_probs_equal_a_full_pass_per_head():
    """ThinkPRM's solution-level decision read teacher-forced: P(yes) / (P(yes) + P(no)) over
    the words' first tokens as the next token after prompt + head, against one whole pass per
    head; words that begin with the same token read None."""
    from prmkit.generate.hf import encode_prompt

    torch, tok, model, backend, prompt = tiny_backend()
    heads = ["Step 1: ok \\boxed{correct}\nIs the solution correct?",
             "a longer one, Step 1: \\boxed{incorrect}, and so on\nIs the solution correct?"]
    got = backend.decision_probs(prompt, heads, ("Yes", "No"))
    yes, no = backend.first_token("Yes"), backend.first_token("No")
    assert yes != no
    assert backend.first_token(" Yes") == backend.first_token(" No")   # this tokenizer's space
    assert backend.decision_probs(prompt, heads, (" Yes", " No")) == [None, None]
    p_ids = encode_prompt(tok, prompt)
    for head, value in zip(heads, got):
        ids = p_ids + tok(head, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float()
        assert value == pytest.approx(torch.softmax(logits[[yes, no]], 0)[0].item(), abs=1e-5)
    assert got[0] != got[1]
