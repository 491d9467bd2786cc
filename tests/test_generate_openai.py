"""The OpenAI-compatible client against a small fake server on 127.0.0.1 (a thread)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prmkit.errors import PrmkitError
from prmkit.generate.base import sample_seed
from prmkit.generate.openai import OpenAIConfig, OpenAIGenerator


class FakeServer:
    """Answers /v1/completions with a text that depends on the request's seed.

    ``script`` is a list of actions consumed one per request, then "ok" forever: "ok",
    "429", "500", "400", "slow" (sleeps past the client's timeout) or "drop" (closes the
    connection without an answer). ``style`` says how a stop string is reported.
    """

    def __init__(self, script=(), style="included", delay=0.0):
        self.script, self.style, self.delay = list(script), style, delay
        self.bodies, self.in_flight, self.max_in_flight = [], 0, 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    action = server.script.pop(0) if server.script else "ok"
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.delay)
                    with server.lock:        # done working: no longer in flight once it answers
                        server.in_flight -= 1
                    if action == "slow":
                        time.sleep(0.6)
                    if action == "drop":
                        self.close_connection = True
                        self.connection.close()
                        return
                    if action in ("429", "500", "400"):
                        self._send(int(action), {"error": {"message": f"fake {action}"}},
                                   {"Retry-After": "0"} if action == "429" else {})
                        return
                    self._send(200, server.answer(body))
                except OSError:
                    pass

            def _send(self, code, obj, headers={}):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.handle_error = lambda request, address: None   # dropped connections are the test
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=lambda: self.httpd.serve_forever(poll_interval=0.02),
                                       daemon=True)

    def answer(self, body):
        """"a{seed % 97}" then the first stop string (if any), in the configured style."""
        text, choice = f"a{body['seed'] % 97}", {}
        stop = (body.get("stop") or [None])[0]
        finish = "stop"
        if body["max_tokens"] < 3:
            finish = "length"
        elif stop is not None:
            if self.style == "included":          # include_stop_str_in_output honoured
                text += stop
            elif self.style == "stop_reason":     # vLLM without include: stop_reason says it
                choice["stop_reason"] = stop
            # "stripped": OpenAI-like, the stop string is gone and nothing says which
        choice.update(text=text, index=0, finish_reason=finish)
        return {"choices": [choice], "usage": {"prompt_tokens": len(body["prompt"].split()),
                                               "completion_tokens": 3}}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def client(server, **kw):
    kw.setdefault("backoff", 0.0)
    return OpenAIGenerator(OpenAIConfig(base_url=server.url, model="m", **kw))


def test_requests_and_answers():
    with FakeServer() as server:
        gen = client(server, api_key="k")
        out = gen.generate(["p one", "p two"], n=2, stop=["\n"], max_tokens=16, temperature=0.5,
                           top_p=0.9, seed=3)
    assert len(server.bodies) == 4
    body = next(b for b in server.bodies if b["prompt"] == "p two" and b["seed"] == sample_seed(3, "p two", 1))
    assert body == {"model": "m", "prompt": "p two", "n": 1, "max_tokens": 16, "temperature": 0.5,
                    "top_p": 0.9, "seed": sample_seed(3, "p two", 1), "stop": ["\n"],
                    "include_stop_str_in_output": True}
    c = out[1][1]
    assert (c.text, c.finish_reason, c.stop, c.n_tokens, c.prompt_tokens) == \
        (f"a{sample_seed(3, 'p two', 1) % 97}\n", "stop", "\n", 3, 2)
    assert gen.tokens_generated == 12


@pytest.mark.parametrize("style,finish,text_end", [("included", "stop", "\n"),
                                                   ("stop_reason", "stop", "\n"),
                                                   ("stripped", "eos", "")])
def test_stop_string_reporting(style, finish, text_end):
    with FakeServer(style=style) as server:
        [[c]] = client(server).generate(["p"], n=1, stop=["\n"], max_tokens=8, seed=0)
    assert c.finish_reason == finish and c.text == f"a{sample_seed(0, 'p', 0) % 97}{text_end}"
    with FakeServer() as server:
        [[c]] = client(server).generate(["p"], n=1, stop=["\n"], max_tokens=2, seed=0)
    assert c.finish_reason == "length"


def test_retries_on_429_5xx_and_dropped_connections():
    with FakeServer(script=["429", "500", "drop"]) as server:
        [[c]] = client(server, retries=3).generate(["p"], n=1, seed=0)
    assert c.text.startswith("a") and len(server.bodies) == 4


def test_gives_up_after_the_retries():
    with FakeServer(script=["500"] * 10) as server:
        with pytest.raises(PrmkitError, match=r"HTTP 500: fake 500"):
            client(server, retries=2).generate(["p"], n=1, seed=0)
    assert len(server.bodies) == 3


def test_client_errors_are_not_retried():
    with FakeServer(script=["400"]) as server:
        with pytest.raises(PrmkitError, match=r"/v1/completions: HTTP 400: fake 400"):
            client(server, retries=3).generate(["p"], n=1, seed=0)
    assert len(server.bodies) == 1


def test_timeouts_are_retried():
    with FakeServer(script=["slow"]) as server:
        [[c]] = client(server, timeout=0.2, retries=2).generate(["p"], n=1, seed=0)
    assert c.text.startswith("a") and len(server.bodies) == 2
    with FakeServer(script=["slow"] * 5) as server:
        with pytest.raises(PrmkitError, match="no answer after 2 tries"):
            client(server, timeout=0.2, retries=1).generate(["p"], n=1, seed=0)


def test_concurrency_limit():
    with FakeServer(delay=0.2) as server:
        client(server, concurrency=3).generate([f"p{i}" for i in range(3)], n=3, seed=0)
    assert len(server.bodies) == 9 and 2 <= server.max_in_flight <= 3


def test_unreachable_server_and_bad_config():
    with pytest.raises(PrmkitError, match="no answer"):
        OpenAIGenerator(OpenAIConfig(base_url="http://127.0.0.1:9/v1", retries=0)).generate(["p"])
    with pytest.raises(PrmkitError, match="base_url"):
        OpenAIConfig(base_url="localhost:8000")


def test_generate_command_against_a_server(tmp_path, capsys):
    tiny = pytest.importorskip("tiny")
    from prmkit import cli
    from prmkit.records import read_records

    folder = tmp_path / "tok"
    tiny.tokenizer().save_pretrained(folder)          # a tokenizer folder: its chat template
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"id": "q1", "problem": "What is 2 + 3?", "reference": "5"}\n')
    out = tmp_path / "c.jsonl"
    with FakeServer() as server:
        rc = cli.main(["generate", "--backend", "openai", "--base-url", server.url, "--policy", "m",
                       "--tokenizer", str(folder), "--input", str(problems), "--input-format",
                       "problems", "-n", "2", "--output", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert server.bodies[0]["prompt"].startswith("<|im_start|>system\nSolve the math problem")
    assert "stop" not in server.bodies[0]                 # chat style: no end strings
    recs = read_records(str(out))
    assert [r.id for r in recs] == ["q1-0", "q1-1"] and all(r.meta["backend"] == "openai" for r in recs)
    # a policy the server knows but prmkit cannot prompt without being told how
    assert cli.main(["generate", "--backend", "openai", "--policy", "m", "--input", str(problems),
                     "--input-format", "problems", "--output", str(out)]) == 2
    assert "--prompt-style few-shot" in capsys.readouterr().err
