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
        """"a{seed % 97}" then the first stop string (if any), in the configured style.

        A model of sorts: a request whose first token "a{seed % 97}" is itself a stop string
        stops there at once (the probe of ``stop_strings="auto"``); a prompt ending in "END"
        gets the text and then the model's end of text, one ending in "EMPTY" the end at once
        (finish "stop" with nothing said, as llama-cpp-python reports an end token, and the
        end token not counted). With ``logprobs``, the tokens come back, a stop string's too.
        """
        text, choice, tokens_used = f"a{body['seed'] % 97}", {}, 3
        stops, finish, stop = body.get("stop") or [], "stop", None
        written = [text]                               # the tokens the model wrote
        if text in stops:
            stop, text = text, ""
        elif body["prompt"].endswith("EMPTY"):
            text, written, tokens_used = "", [], 0
        elif body["prompt"].endswith("END"):
            pass
        elif body["max_tokens"] < 3:
            finish = "length"
        elif stops:
            stop = stops[0]
            written.append(stop)
        if stop is not None:
            if self.style == "included":          # include_stop_str_in_output honoured
                text += stop
            elif self.style == "stop_reason":     # vLLM without include: stop_reason says it
                choice["stop_reason"] = stop
            # "stripped": OpenAI-like, the stop string is gone and nothing says which
        if body.get("logprobs") is not None:
            choice["logprobs"] = {"tokens": written}
        choice.update(text=text, index=0, finish_reason=finish)
        return {"choices": [choice], "usage": {"prompt_tokens": len(body["prompt"].split()),
                                               "completion_tokens": tokens_used}}

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
        gen.generate(["p three"], n=1, stop=["\n"], seed=3)
    # stop_strings "auto": first the probe, two greedy requests on the first prompt, one token
    # without stop strings, then that token as the stop string; this server keeps it
    probe = {"model": "m", "prompt": "p one", "n": 1, "max_tokens": 1, "temperature": 0.0,
             "top_p": 1.0, "seed": 0, "include_stop_str_in_output": True}
    assert server.bodies[:2] == [probe, {**probe, "max_tokens": 2, "stop": ["a0"]}]
    assert gen.stop_mode == "reported" and gen.requests_sent == len(server.bodies) == 7
    body = next(b for b in server.bodies if b["prompt"] == "p two" and b["seed"] == sample_seed(3, "p two", 1))
    assert body == {"model": "m", "prompt": "p two", "n": 1, "max_tokens": 16, "temperature": 0.5,
                    "top_p": 0.9, "seed": sample_seed(3, "p two", 1), "stop": ["\n"],
                    "include_stop_str_in_output": True}
    c = out[1][1]
    assert (c.text, c.finish_reason, c.stop, c.n_tokens, c.prompt_tokens) == \
        (f"a{sample_seed(3, 'p two', 1) % 97}\n", "stop", "\n", 3, 2)
    assert gen.tokens_generated == 15                 # the probe's tokens are not counted
    assert server.bodies[-1]["prompt"] == "p three"   # probed once per generator


@pytest.mark.parametrize("style,mode,finish,text_end", [
    ("included", "auto", "stop", "\n"), ("stop_reason", "auto", "stop", "\n"),
    ("stripped", "auto", "stop", "\n"), ("stripped", "stripped", "stop", "\n"),
    ("stripped", "logprobs", "stop", "\n"), ("stripped", "reported", "eos", "")])
def test_stop_string_reporting(style, mode, finish, text_end):
    with FakeServer(style=style) as server:
        gen = client(server, stop_strings=mode)
        [[c]] = gen.generate(["p"], n=1, stop=["\n"], max_tokens=8, seed=0)
    assert c.finish_reason == finish and c.text == f"a{sample_seed(0, 'p', 0) % 97}{text_end}"
    assert gen.stop_mode == {"auto": "stripped" if style == "stripped" else "reported"}.get(mode, mode)
    assert len(server.bodies) == (3 if mode == "auto" else 1)
    with FakeServer() as server:
        [[c]] = client(server).generate(["p"], n=1, stop=["\n"], max_tokens=2, seed=0)
    assert c.finish_reason == "length"


@pytest.mark.parametrize("mode,expected", [
    # the end of text after some text reads as the separator, unless the tokens say otherwise;
    # nothing generated at all is an end of text in every mode
    ("stripped", [("stop", "\n"), ("eos", None), ("stop", "\n")]),
    ("logprobs", [("eos", None), ("eos", None), ("stop", "\n")]),
    ("reported", [("eos", None), ("eos", None), ("eos", None)])])
def test_stripping_server_end_of_text_and_several_stop_strings(mode, expected):
    with FakeServer(style="stripped") as server:
        gen = client(server, stop_strings=mode)
        out = gen.generate(["p END", "p EMPTY", "p"], n=1, stop=["\n", "\n\n", "\nQuestion:"],
                           max_tokens=8, seed=0)
        gen.generate(["p"], n=1, max_tokens=8, seed=0)          # no stop strings
    assert [(c.finish_reason, c.stop) for [c] in out] == expected
    assert [c.text.endswith("\n") for [c] in out] == [s is not None for _, s in expected]
    asked = [b.get("logprobs") for b in server.bodies]
    assert asked == ([0, 0, 0, None] if mode == "logprobs" else [None] * 4)


def test_stripped_warns_when_the_first_stop_string_does_not_start_the_others():
    """Blank-line steps under few-shot: "\\nQuestion:" does not begin with "\\n\\n", so a
    server that strips it unnamed has it read as the separator; the warning says so."""
    with FakeServer(style="stripped") as server:
        with pytest.warns(UserWarning, match="is read as '\\\\n\\\\n' when it matches"):
            [[c]] = client(server, stop_strings="stripped").generate(
                ["p"], stop=["\n\n", "\n\n\n", "\nQuestion:"], max_tokens=8, seed=0)
    assert c.stop == "\n\n"


def test_step_wise_continuation_on_a_stripping_server():
    """next_steps sends the separator first: read as stripped, a step goes on; read as
    reported, every step looks like the end of its solution."""
    from prmkit.generate.prompts import STYLES, Prompter
    from prmkit.generate.stepwise import next_steps

    prompter = Prompter(STYLES["few-shot"])
    for mode, done in (("auto", False), ("stripped", False), ("reported", True)):
        with FakeServer(style="stripped") as server:
            steps = next_steps(client(server, stop_strings=mode), prompter,
                               [("What is 2 + 3?", []), ("What is 2 + 3?", ["2 + 3 = 5."])], n=2)
        assert server.bodies[-1]["stop"] == ["\n", "\n\n", "\nQuestion:"]
        for row in steps:
            assert [(s.done, s.text.endswith("\n"), s.finish_reason) for s in row] == \
                [(done, not done, "stop" if not done else "eos")] * 2, (mode, row)
            assert all(s.step.startswith("a") for s in row)


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
    with pytest.raises(PrmkitError, match="stop_strings must be one of auto, reported"):
        OpenAIConfig(stop_strings="kept")


def test_probe_that_tells_nothing_keeps_reported():
    """A first greedy token that does not come back as a stop string (here: the server answers
    nothing for it) leaves the old reading, with a warning that names the option."""
    with FakeServer() as server:
        gen = client(server)
        with pytest.warns(UserWarning, match="--stop-strings stripped or reported"):
            [[c]] = gen.generate(["p EMPTY"], n=1, stop=["\n"], max_tokens=8, seed=0)
    assert gen.stop_mode == "reported" and c.finish_reason == "eos" and len(server.bodies) == 2


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


class HalfPRM:
    """A PRM that scores every step 0.5 (search needs one; the steps are the point here)."""

    max_length = None

    def __init__(self):
        self.bound = self

    def score(self, problems, steps):
        return [[0.5] * len(s) for s in steps]

    def encode(self, problem, steps, max_length=None):
        from types import SimpleNamespace

        return SimpleNamespace(input_ids=[0] * (1 + len(steps)))


@pytest.mark.parametrize("mode,depth", [("stripped", 3), ("auto", 3), ("reported", 1)])
def test_search_command_on_a_stripping_server(mode, depth, tmp_path, monkeypatch):
    """--stop-strings reaches the generator of prmkit search: on a server that strips stop
    strings, beams go on to --max-depth (this server never writes a final answer), and read as
    reported, every beam ends after its first step."""
    from prmkit import cli
    from prmkit.records import read_records

    problems = tmp_path / "p.jsonl"
    problems.write_text('{"id": "q1", "problem": "What is 2 + 3?", "reference": "5"}\n')
    monkeypatch.setattr("prmkit.search.cli.open_prm", lambda *a, **kw: HalfPRM())
    out = tmp_path / "beam.jsonl"
    with FakeServer(style="stripped") as server:
        assert cli.main(["search", "--method", "beam", "--backend", "openai", "--base-url",
                         server.url, "--policy", "m", "--prompt-style", "few-shot",
                         "--stop-strings", mode, "--input", str(problems), "--input-format",
                         "problems", "-n", "2", "-m", "2", "--max-depth", "3",
                         "--output", str(out)]) == 0
    recs = read_records(str(out))
    assert recs and all(len(r.steps) == depth for r in recs), [r.steps for r in recs]
    assert all(s.startswith("a") for r in recs for s in r.steps)
    probes = [b for b in server.bodies if b["temperature"] == 0.0]
    assert len(probes) == (2 if mode == "auto" else 0)


@pytest.mark.parametrize("command", [["generate"], ["search", "--method", "beam"],
                                     ["label", "mc"], ["label", "judge"]])
def test_every_policy_command_takes_stop_strings(command):
    from prmkit.cli import build_parser
    from prmkit.generate.cli import policy_options

    policy = "--judge" if command[-1] == "judge" else "--policy"
    base = [*command, policy, "m", "--backend", "openai", "--input", "i.jsonl", "--output", "o.jsonl"]
    parser = build_parser()
    assert policy_options(parser.parse_args(base))["stop_strings"] == "auto"
    args = parser.parse_args([*base, "--stop-strings", "stripped"])
    assert policy_options(args)["stop_strings"] == "stripped"
