"""The reward server (prmkit/serve/app.py) on loopback, in-process, with a tiny model in float32:
the wire contract against offline scoring, OpenRLHF's /get_reward, limits, overload, auth,
graceful shutdown, the client, and the `prmkit serve` command in a real process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from prmkit.errors import PrmkitError
from prmkit.models.backends.hf import HFConfig, HFPRM
from prmkit.models.backends.remote import RemotePRM
from prmkit.serve.app import ServerThread, create_app
from prmkit.serve.batcher import BatcherConfig
from prmkit.serve.client import PrmClient
from prmkit.serve.config import ServeConfig
from prmkit.stepformat import PRESETS
import tiny

PROBLEMS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends in April.",
            "Let's call the price of a pencil p."]
STEPS = [["2 + 3 = 5.", "The answer is 5."],
         ["She sold half as many in May.", "48 / 2 = 24.", "48 + 24 = 72.", "\\boxed{72}"],
         ["Then 3p + e = 124."]]
TOL = 1e-5  # float32; the batch makeup moves scores by ~1e-7 (ARCHITECTURE.md, "Numerics")


def tiny_prm(fmt: str = "math-shepherd") -> HFPRM:
    model = tiny.causal_lm() if fmt in ("math-shepherd", "rlhflow") else tiny.token_classifier(2)
    return HFPRM(model, tiny.tokenizer(), PRESETS[fmt], HFConfig(dtype="float32"))


@contextlib.contextmanager
def serving(prm, host: str = "127.0.0.1", batching: BatcherConfig | None = None, **cfg):
    config = ServeConfig(host=host, port=0, batching=batching or BatcherConfig(), **cfg)
    app = create_app(prm, config, "tiny", prm.format.name)
    with ServerThread(app, host=host, config=config) as server:
        server.scorer = app.state.scorer
        yield server


def http(server, **kw) -> httpx.Client:
    return httpx.Client(base_url=server.url, trust_env=False, timeout=30, **kw)


def close(a, b, tol=TOL) -> bool:
    return [len(r) for r in a] == [len(r) for r in b] and \
        all(abs(x - y) <= tol for u, v in zip(a, b) for x, y in zip(u, v))


class Held:
    """A PRM wrapper whose score waits until released, to line requests up exactly."""

    def __init__(self, prm, delay: float = 0.0):
        self.prm, self.delay = prm, delay
        self.bound, self.max_length, self.format = prm.bound, prm.max_length, prm.format
        self.release = threading.Event()
        self.entered = threading.Event()

    def score(self, problems, steps):
        self.entered.set()
        assert self.release.wait(30)
        time.sleep(self.delay)
        return self.prm.score(problems, steps)


@pytest.fixture(scope="module")
def prm():
    return tiny_prm()


# ---------------------------------------------------------------------------------------------
# the wire contract


def test_remote_prm_against_the_server_equals_offline_scoring(prm):
    offline = prm.score(PROBLEMS, STEPS)
    with serving(prm) as server:
        remote = RemotePRM(server.url, batch_size=2, concurrency=2)
        assert close(remote.score(PROBLEMS, STEPS), offline)
        assert remote.model_name == "tiny" and remote.format_name == "math-shepherd"
        health = remote.health()
        assert health["status"] == "ok" and health["model"] == "tiny"
        assert health["format"] == "math-shepherd" and health["queue"]["queued"] == 0
        assert health["dtype"] == "float32"    # what a resumed `prmkit score` checks


def test_score_returns_aggregates_and_splits_texts(prm):
    offline = prm.score(PROBLEMS[:2], STEPS[:2])
    with serving(prm) as server, http(server) as c:
        body = c.post("/v1/score", json={"problems": PROBLEMS[:2], "steps": STEPS[:2],
                                         "aggregates": ["min", "last"]}).json()
        assert close(body["step_scores"], offline)
        assert set(body["aggregates"]) == {"min", "last"}
        assert body["aggregates"]["min"] == pytest.approx([min(r) for r in offline], abs=TOL)
        assert body["aggregates"]["last"] == pytest.approx([r[-1] for r in offline], abs=TOL)
        assert "steps" not in body
        # full texts: with problems, the text is the solution; without, its first piece is
        texts = ["\n".join(s) for s in STEPS[:2]]
        body = c.post("/v1/score", json={"problems": PROBLEMS[:2], "texts": texts}).json()
        assert body["steps"] == STEPS[:2] and close(body["step_scores"], offline)
        body = c.post("/v1/score", json={"texts": [PROBLEMS[0] + "\n\n" + "\n\n".join(STEPS[0])]}).json()
        assert body["problems"] == PROBLEMS[:1] and body["steps"] == STEPS[:1]
        assert close(body["step_scores"], offline[:1])
        # a solution without steps is answered without the model; its aggregates are null
        body = c.post("/v1/score", json={"problems": ["p", PROBLEMS[0]], "steps": [[], STEPS[0]]}).json()
        assert body["step_scores"][0] == [] and body["aggregates"]["prod"][0] is None
        assert close(body["step_scores"][1:], offline[:1])
        assert c.post("/v1/score", json={"problems": [], "steps": []}).json()["step_scores"] == []


def test_get_reward_answers_openrlhf(prm):
    offline = prm.score(PROBLEMS[:2], STEPS[:2])
    prompts = [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in PROBLEMS[:2]]
    queries = [p + "\n".join(s) + "<|im_end|>" for p, s in zip(prompts, STEPS[:2])]
    with serving(prm) as server, http(server) as c:
        body = c.post("/get_reward", json={"query": queries, "prompts": prompts,
                                           "labels": ["5", "72"], "return_steps": True}).json()
        assert body["problems"] == PROBLEMS[:2] and body["steps"] == STEPS[:2]
        assert body["rewards"] == pytest.approx([min(r) for r in offline], abs=TOL)
        assert body["scores"] == body["rewards"] and close(body["step_scores"], offline)
        logs = body["extra_logs"]
        assert logs["prm_num_steps"] == [2, 4]
        assert all(len(v) == 2 for v in logs.values())
        assert all(isinstance(x, (int, float)) for v in logs.values() for x in v)
        rows = body["step_scores_padded"]
        assert [len(r) for r in rows] == [128, 128] and rows[0][2:] == [-1.0] * 126
        assert close([r[:n] for r, n in zip(rows, [2, 4])], offline)
        # no prompts: the first blank-line piece is the problem (the acceptance check's body)
        plain = PROBLEMS[0] + "\n\n" + "\n\n".join(STEPS[0])
        body = c.post("/get_reward", json={"query": [plain, "   "], "unknown": 1}).json()
        assert body["rewards"][0] == pytest.approx(min(offline[0]), abs=TOL)
        assert body["rewards"][1] == 0.0 and body["extra_logs"]["prm_num_steps"] == [2, 0]


def test_reward_rule_and_step_rule_are_settings(prm):
    offline = prm.score(PROBLEMS[:1], STEPS[:1])
    with serving(prm, reward="last", step_rule="lines") as server, http(server) as c:
        body = c.post("/get_reward", json={"query": [PROBLEMS[0] + "\n" + "\n".join(STEPS[0])]}).json()
        assert body["rewards"] == pytest.approx([offline[0][-1]], abs=TOL)


# ---------------------------------------------------------------------------------------------
# bad requests: 4xx with a clear message, never 5xx

BAD = [
    ("POST", "/v1/score", b'{"problems":5', 400, "not valid JSON"),
    ("POST", "/v1/score", b"", 400, "empty"),
    ("POST", "/v1/score", b"\xff\xfe\x00", 400, "not valid JSON"),
    ("POST", "/v1/score", b"[" * 100_000, 400, "not valid JSON"),
    ("POST", "/v1/score", b"5", 422, "valid dictionary"),
    ("POST", "/v1/score", b'{"problems":5}', 422, "problems: Input should be a valid list"),
    ("POST", "/v1/score", b'{"problems":["a"],"steps":[["x",3]]}', 422, "steps[0][1]"),
    ("POST", "/v1/score", b'{"problems":["a","b"],"steps":[["x"]]}', 422, "2 problems but 1 step lists"),
    ("POST", "/v1/score", b'{"steps":[["x"]]}', 422, "needs 'problems'"),
    ("POST", "/v1/score", b'{"problems":["a"]}', 422, "or 'texts'"),
    ("POST", "/v1/score", b'{"problems":["a"],"steps":[["x"]],"texts":["y"]}', 422, "not both"),
    ("POST", "/v1/score", b'{"problems":["a"],"steps":[["x"]],"aggregates":["max"]}', 422, "aggregates[0]"),
    ("POST", "/v1/score", b'{"problems":["a"],"steps":[["x"]],"stpes":1}', 422, "stpes"),
    ("POST", "/v1/score", b'{"problems":["\\ud800"],"steps":[["x"]]}', 422, "lone surrogate"),
    ("POST", "/v1/score", b'{"problem":"a","steps":["x","y"]}', 422,
     "'problem' where the request takes 'problems'"),
    ("POST", "/v1/score", b'{"problems":["a"],"steps":["x","y"]}', 422,
     "'steps' is one solution's list of steps where the request takes a list per solution"),
    ("POST", "/get_reward", b'{"prompts":["a"]}', 422, "query: Field required"),
    ("POST", "/get_reward", b'{"query":"a"}', 422, "query: Input should be a valid list"),
    ("POST", "/get_reward", b'{"query":["a","b"],"prompts":["a"]}', 422, "2 queries but 1 prompts"),
    ("POST", "/get_reward", b'{"query":["abc"],"prompts":["zzz"]}', 422, "query 0: the query does not contain"),
    ("GET", "/v1/score", None, 405, "Method Not Allowed"),
    ("GET", "/nowhere", None, 404, "Not Found"),
]


@pytest.mark.parametrize("method,path,content,status,message", BAD,
                         ids=[f"{b[3]}-{b[4][:24]}" for b in BAD])
def test_bad_requests_get_a_clear_4xx(prm, method, path, content, status, message):
    with serving(prm) as server, http(server) as c:
        r = c.request(method, path, content=content, headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        assert message in r.json()["error"]["message"]
        good = c.post("/v1/score", json={"problems": PROBLEMS[:1], "steps": STEPS[:1]})
        assert good.status_code == 200  # and the server keeps serving


def test_limits_on_body_solutions_steps_and_tokens(prm):
    enc_len = len(prm.bound.encode(PROBLEMS[1], STEPS[1]).input_ids)
    with serving(prm, max_body_bytes=2000, max_solutions=2, max_steps=4,
                 max_tokens=enc_len - 1) as server, http(server) as c:
        big = {"problems": ["x" * 3000], "steps": [["y"]]}
        r = c.post("/v1/score", json=big)
        assert r.status_code == 413 and "at most 2000 bytes" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: the limit holds while reading
            yield b'{"problems": ["'
            for _ in range(10):
                yield b"x" * 500
            yield b'"], "steps": [["y"]]}'
        r = c.post("/v1/score", content=chunks())
        assert r.status_code == 413 and "over 2000 bytes" in r.json()["error"]["message"]
        r = c.post("/v1/score", json={"problems": ["a"] * 3, "steps": [["x"]] * 3})
        assert r.status_code == 413 and "3 solutions" in r.json()["error"]["message"]
        r = c.post("/v1/score", json={"problems": ["a"], "steps": [["x"] * 5]})
        assert r.status_code == 422 and "5 steps" in r.json()["error"]["message"]
        assert r.json()["error"]["type"] == "too_many_steps"
        r = c.post("/v1/score", json={"problems": PROBLEMS[1:2], "steps": STEPS[1:2]})
        assert r.status_code == 422 and r.json()["error"]["type"] == "too_many_tokens"
        assert f"{enc_len} tokens long" in r.json()["error"]["message"]
        r = c.post("/get_reward", json={"query": ["q\n\n" + "\n\n".join(["s"] * 5)]})
        assert r.status_code == 422 and "5 steps" in r.json()["error"]["message"]
        assert c.post("/v1/score", json={"problems": PROBLEMS[:1], "steps": STEPS[:1]}).status_code == 200


def test_headers_over_the_limit_get_431_not_a_reset(prm):
    """1 MB of headers: 431 with the JSON error, read by a client still sending them (h11's
    check, then the rest drained); a head just over the limit that arrives in one read gets 431
    too (the ASGI check); one under it is served."""
    with serving(prm, max_header_bytes=8192) as server:
        with http(server) as c:
            for size in (2**20, 9000):
                r = c.get("/health", headers={"X-Big": "a" * size})
                assert r.status_code == 431, size
                assert r.json()["error"]["type"] == "headers_too_large"
                assert "over 8192 bytes" in r.json()["error"]["message"]
            assert c.get("/health", headers={"X-Fine": "a" * 4000}).status_code == 200
        host, port = server.url.rsplit("/", 1)[-1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n")
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
        with http(server) as c:   # the server goes on
            assert c.get("/health").status_code == 200


def test_remote_client_shows_the_servers_message(prm):
    with serving(prm, max_steps=1) as server:
        with pytest.raises(PrmkitError, match=r"HTTP 422: solution 0 has 2 steps"):
            RemotePRM(server.url, retries=3).score(PROBLEMS[:1], STEPS[:1])


# ---------------------------------------------------------------------------------------------
# overload, retries, shutdown


def test_full_queue_is_503_with_retry_after_and_the_client_retries(prm):
    held = Held(prm)
    with serving(held, batching=BatcherConfig(max_queue=1, max_wait_ms=0), max_solutions=1) as server:
        done = {}
        first = threading.Thread(target=lambda: done.setdefault(
            "a", RemotePRM(server.url).score(PROBLEMS[:1], STEPS[:1])))
        first.start()
        assert held.entered.wait(10)               # the worker holds request a
        second = threading.Thread(target=lambda: done.setdefault(
            "b", RemotePRM(server.url).score(PROBLEMS[1:2], STEPS[1:2])))
        second.start()
        while server.scorer.batcher.queued < 1:    # request b fills the queue
            time.sleep(0.01)
        with http(server) as c:
            r = c.post("/v1/score", json={"problems": PROBLEMS[2:], "steps": STEPS[2:]})
        assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded"
        assert 1 <= int(r.headers["Retry-After"]) <= 60

        client = PrmClient(server.url, retries=5, max_retry_after=2)
        result = {}
        third = threading.Thread(target=lambda: result.setdefault(
            "c", client.score(PROBLEMS[2:], STEPS[2:])))
        third.start()
        while server.scorer.batcher.stats.refused < 2:  # the client's first try was refused
            time.sleep(0.01)
        held.release.set()
        for t in (first, second, third):
            t.join(30)
        assert close(result["c"], prm.score(PROBLEMS[2:], STEPS[2:]))
        assert client.stats.retries >= 1
        assert close(done["a"] + done["b"], prm.score(PROBLEMS[:2], STEPS[:2]))


def test_client_retries_a_server_that_is_not_up_yet(prm):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    client = PrmClient(f"http://127.0.0.1:{port}", retries=8, backoff=0.2)
    config = ServeConfig(port=port)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", client.rewards(
        [PROBLEMS[0] + "\n\n" + "\n\n".join(STEPS[0])])))
    t.start()
    time.sleep(0.5)                                 # refused connections meanwhile
    with ServerThread(create_app(prm, config, "tiny", "math-shepherd"), port=port, config=config):
        t.join(30)
    assert result["r"] == pytest.approx([min(prm.score(PROBLEMS[:1], STEPS[:1])[0])], abs=TOL)
    assert client.stats.retries >= 1


def test_graceful_shutdown_finishes_requests_in_flight(prm):
    held = Held(prm, delay=0.5)
    config = ServeConfig(port=0)
    server = ServerThread(create_app(held, config, "tiny", "math-shepherd"), config=config).start()
    answers = []
    workers = [threading.Thread(target=lambda: answers.append(
        RemotePRM(server.url, retries=0).score(PROBLEMS, STEPS))) for _ in range(3)]
    for w in workers:
        w.start()
    assert held.entered.wait(10)
    time.sleep(0.2)                                 # the other two are queued meanwhile
    stopper = threading.Thread(target=server.stop)
    stopper.start()                                 # shutdown starts while requests are in flight
    time.sleep(0.1)
    held.release.set()
    for w in workers + [stopper]:
        w.join(30)
    assert len(answers) == 3 and all(close(a, prm.score(PROBLEMS, STEPS)) for a in answers)
    assert not server.thread.is_alive()
    with pytest.raises(PrmkitError, match="cannot connect"):
        RemotePRM(server.url, retries=0, timeout=2).health()


# ---------------------------------------------------------------------------------------------
# auth


def test_token_is_required_on_a_non_loopback_address(prm):
    token = "s3cret-token"
    with serving(prm, host="0.0.0.0", token=token) as server:   # requests go to 127.0.0.1
        with http(server) as c:
            for method, path, body in (("GET", "/health", None), ("GET", "/openapi.json", None),
                                       ("POST", "/v1/score", {"problems": ["a"], "steps": [["b"]]}),
                                       ("POST", "/get_reward", {"query": ["a\n\nb"]})):
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token},
                                {"Authorization": f"Basic {token}"}):
                    r = c.request(method, path, json=body, headers=headers)
                    assert r.status_code == 401, (path, headers)
                    assert r.headers["WWW-Authenticate"] == "Bearer"
                    assert "token" in r.json()["error"]["message"]
            ok = c.post("/v1/score", json={"problems": ["a"], "steps": [["b"]]},
                        headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200
            # clients that cannot set headers (OpenRLHF's --remote_rm_url) put it in the URL
            assert c.post(f"/get_reward?token={token}", json={"query": ["a\n\nb"]}).status_code == 200
            for query in ("?token=wrong", "?token=", "?tok=" + token, "?token=%ff%fe"):
                assert c.post("/get_reward" + query, json={"query": ["a\n\nb"]}).status_code == 401
        assert close(RemotePRM(server.url, token=token).score(PROBLEMS, STEPS), prm.score(PROBLEMS, STEPS))
        with pytest.raises(PrmkitError, match="HTTP 401"):
            RemotePRM(server.url, token="", retries=3).score(PROBLEMS, STEPS)
    with pytest.raises(PrmkitError, match="needs a token"):
        ServeConfig(host="0.0.0.0", port=0)


def test_token_is_optional_on_loopback_but_enforced_when_given(prm):
    with serving(prm) as server, http(server) as c:
        assert c.get("/health").status_code == 200
    with serving(prm, token="abc") as server, http(server) as c:
        assert c.get("/health").status_code == 401
        assert c.get("/health", headers={"Authorization": "bearer abc"}).status_code == 200


# ---------------------------------------------------------------------------------------------
# the command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_serves_a_model_folder_and_stops_on_sigterm(tmp_path):
    model = tiny.causal_lm()
    model.save_pretrained(tmp_path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(tmp_path)
    PRESETS["math-shepherd"].save(str(tmp_path))
    offline = HFPRM(model, tiny.tokenizer(), PRESETS["math-shepherd"]).score(PROBLEMS, STEPS)
    script = os.path.join(os.path.dirname(sys.executable), "prmkit")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "prmkit.cli"]
    port = free_port()
    proc = subprocess.Popen(command + ["serve", "--model", str(tmp_path), "--port", str(port),
                                       "--dtype", "float32"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = PrmClient(f"http://127.0.0.1:{port}")
        assert client.wait_until_ready(timeout=90)["format"] == "math-shepherd"
        assert close(client.score(PROBLEMS, STEPS), offline)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and f"on http://127.0.0.1:{port}" in err

    # user mistakes: one line, exit 2, before any model loads
    for args, message in ((["--host", "0.0.0.0"], "needs a token"),
                          (["--port", str(port), "--max-steps", "0"], "max-steps must be positive"),
                          (["--model", "http://127.0.0.1:1"], "needs a local model")):
        proc = subprocess.run(command + ["serve"] + args, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PRMKIT_SERVE_TOKEN": ""})
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert proc.stderr.strip().count("\n") == 0


def test_taken_port_is_a_clear_error(capsys):
    from prmkit import cli

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        rc = cli.main(["serve", "--port", str(s.getsockname()[1])])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot listen on 127.0.0.1" in err


def test_openapi_lists_the_request_bodies(prm):
    with serving(prm) as server, http(server) as c:
        spec = c.get("/openapi.json").json()
    body = spec["paths"]["/v1/score"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {"problems", "steps", "texts", "aggregates"}
    assert "query" in json.dumps(spec["paths"]["/get_reward"])


# ---------------------------------------------------------------------------------------------
# clients that leave


class Slow:
    """A PRM wrapper that takes ``per_solution`` seconds a solution and counts what it scored."""

    def __init__(self, prm, per_solution: float):
        self.prm, self.per_solution = prm, per_solution
        self.bound, self.max_length, self.format = prm.bound, prm.max_length, prm.format
        self.scored = 0

    def score(self, problems, steps):
        time.sleep(self.per_solution * len(problems))
        self.scored += len(problems)
        return self.prm.score(problems, steps)


def raw_request(server, body: bytes, declared: int | None = None) -> socket.socket:
    """A request sent on a raw socket, left open (the caller closes it: the client leaves)."""
    host, port = server.url.rsplit("/", 1)[-1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    head = (f"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared or len(body)}\r\n\r\n").encode()
    sock.sendall(head + body)
    return sock


def test_clients_that_leave_stop_costing_compute_and_a_new_request_is_answered(prm, caplog):
    slow = Slow(prm, per_solution=0.05)
    big = json.dumps({"problems": [PROBLEMS[1]] * 64, "steps": [STEPS[1]] * 64}).encode()
    with caplog.at_level("INFO"), serving(slow) as server:
        socks = [raw_request(server, big) for _ in range(6)]  # 6 x 64 solutions: ~19 s of work
        while slow.scored == 0:
            time.sleep(0.01)
        for s in socks:
            s.close()
        truncated = raw_request(server, big[:100], declared=len(big))  # a body cut short
        truncated.close()
        start = time.monotonic()
        with http(server) as c:
            r = c.post("/v1/score", json={"problems": PROBLEMS[:1], "steps": STEPS[:1]})
        took = time.monotonic() - start
        assert r.status_code == 200 and close(r.json()["step_scores"], prm.score(PROBLEMS[:1], STEPS[:1]))
        time.sleep(0.3)
        stats = server.scorer.batcher.stats
        assert took < 5, took
        assert slow.scored < 64 * 2, slow.scored  # at most the pieces under way, not 384
        assert stats.dropped == 6 and server.scorer.batcher.queued == 0
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]
    assert sum("client disconnected" in r.getMessage() for r in caplog.records) >= 7
