"""The remote PRM client against a small fake ``prmkit serve`` on loopback.

The fake server implements the wire contract in prmkit/models/backends/remote.py: it scores step k of a
solution as a deterministic function of the text, and can be told to fail in scripted ways.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prmkit.errors import PrmkitError
from prmkit.models.backends.remote import (RemotePRM, error_message, is_remote, validate_response,
                                  _retry_after)


def fake_score(problem: str, step: str, k: int) -> float:
    return round(((len(problem) * 7 + len(step) * 3 + k) % 97) / 96, 6)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that timed out and hung up is part of the tests


class FakeServer:
    """``POST /v1/score`` and ``GET /health``. ``script`` is a list of canned answers used
    first, one per request: (status, headers, body) or "close" (drop the connection)."""

    def __init__(self, token: str | None = None):
        self.token = token
        self.script: list = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status, body, headers=()):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with server.lock:
                    server.requests.append({"method": method, "path": self.path,
                                            "auth": self.headers.get("Authorization"),
                                            "body": json.loads(raw) if raw else None})
                    canned = server.script.pop(0) if server.script else None
                if canned == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if canned is not None:
                    status, headers, body = canned
                    return self._send(status, body, headers)
                if server.token and self.headers.get("Authorization") != f"Bearer {server.token}":
                    return self._send(401, {"error": {"message": "missing or wrong token",
                                                      "type": "auth"}})
                if method == "GET" and self.path == "/health":
                    return self._send(200, {"status": "ok", "model": "fake", "format": "prmkit"})
                if method != "POST" or self.path != "/v1/score":
                    return self._send(404, {"detail": "Not Found"})
                body = server.requests[-1]["body"]
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.delay)
                    scores = [[fake_score(p, s, k) for k, s in enumerate(steps)]
                              for p, steps in zip(body["problems"], body["steps"])]
                finally:
                    with server.lock:
                        server.in_flight -= 1
                self._send(200, {"step_scores": scores, "model": "fake-prm", "format": "prmkit"})

            def do_POST(self):
                self._handle("POST")

            def do_GET(self):
                self._handle("GET")

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def score_posts(self):
        return [r for r in self.requests if r["path"] == "/v1/score"]


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


PROBLEMS = [f"problem {i} " + "x" * i for i in range(10)]
STEPS = [[f"step {k} of {i}" for k in range(1 + i % 4)] for i in range(10)]


def expected(problems=PROBLEMS, steps=STEPS):
    return [[fake_score(p, s, k) for k, s in enumerate(ss)] for p, ss in zip(problems, steps)]


def client(url, **kw):
    kw.setdefault("backoff", 0.01)
    kw.setdefault("timeout", 5)
    return RemotePRM(url, **kw)


def test_scores_match_and_keep_order(server):
    prm = client(server.url)
    assert prm.score(PROBLEMS, STEPS) == expected()
    (req,) = server.score_posts()
    assert req["body"] == {"problems": PROBLEMS, "steps": STEPS}
    assert req["auth"] is None
    assert prm.model_name == "fake-prm" and prm.format_name == "prmkit"
    assert prm.health() == {"status": "ok", "model": "fake", "format": "prmkit"}


def test_batching_and_concurrency(server):
    server.delay = 0.1
    prm = client(server.url, batch_size=3, concurrency=4)
    assert prm.score(PROBLEMS, STEPS) == expected()
    posts = server.score_posts()
    assert sorted(len(r["body"]["problems"]) for r in posts) == [1, 3, 3, 3]
    assert sorted(p for r in posts for p in r["body"]["problems"]) == sorted(PROBLEMS)
    assert server.max_in_flight > 1          # requests overlapped
    assert server.max_in_flight <= 4


def test_concurrency_limit(server):
    server.delay = 0.05
    prm = client(server.url, batch_size=1, concurrency=2)
    assert prm.score(PROBLEMS, STEPS) == expected()
    assert len(server.score_posts()) == 10
    assert server.max_in_flight <= 2


def test_auth_header_and_401_message():
    s = FakeServer(token="s3cret")
    try:
        assert client(s.url, token="s3cret").score(PROBLEMS[:2], STEPS[:2]) == expected(PROBLEMS[:2], STEPS[:2])
        assert s.score_posts()[-1]["auth"] == "Bearer s3cret"
        with pytest.raises(PrmkitError, match="HTTP 401: missing or wrong token"):
            client(s.url, token="wrong").score(PROBLEMS[:1], STEPS[:1])
        assert len(s.score_posts()) == 2      # the 401 was not retried
    finally:
        s.close()


def test_token_from_environment(server, monkeypatch):
    """One name on both sides: the server and its clients read $PRMKIT_TOKEN, and both take
    $PRMKIT_SERVE_TOKEN as its alias."""
    monkeypatch.delenv("PRMKIT_TOKEN", raising=False)
    monkeypatch.setenv("PRMKIT_SERVE_TOKEN", "alias")
    client(server.url).score(PROBLEMS[:1], STEPS[:1])
    assert server.score_posts()[-1]["auth"] == "Bearer alias"
    monkeypatch.setenv("PRMKIT_TOKEN", "from-env")
    client(server.url).score(PROBLEMS[:1], STEPS[:1])
    assert server.score_posts()[-1]["auth"] == "Bearer from-env"


def test_an_error_in_one_of_several_requests_is_raised(server):
    server.script = [(200, [], {"step_scores": [[0.5]]}),
                     (413, [], {"error": {"message": "body too large"}})]
    prm = client(server.url, batch_size=1, concurrency=2)
    with pytest.raises(PrmkitError, match="HTTP 413: body too large"):
        prm.score(PROBLEMS[:4], [["s"]] * 4)


def test_retry_after_503_is_honoured(server):
    server.script = [(503, [("Retry-After", "0.3")], {"error": {"message": "overloaded"}})]
    prm = client(server.url, backoff=0.001)
    t0 = time.monotonic()
    assert prm.score(PROBLEMS[:2], STEPS[:2]) == expected(PROBLEMS[:2], STEPS[:2])
    assert time.monotonic() - t0 >= 0.3
    assert len(server.score_posts()) == 2
    assert prm.stats.retries == 1 and prm.stats.requests == 2


def test_502_and_504_and_dropped_connections_are_retried(server):
    server.script = [(502, [], b"bad gateway"), "close", (504, [], {"detail": "timeout"})]
    prm = client(server.url, retries=3)
    assert prm.score(PROBLEMS[:1], STEPS[:1]) == expected(PROBLEMS[:1], STEPS[:1])
    assert len(server.score_posts()) == 4


def test_retries_run_out_with_the_last_error(server):
    server.script = [(503, [("Retry-After", "0")], {"error": {"message": "queue full"}})] * 3
    with pytest.raises(PrmkitError, match=r"HTTP 503: queue full \(after 3 attempts\)"):
        client(server.url, retries=2).score(PROBLEMS[:1], STEPS[:1])


def test_no_retry_on_400_and_the_message_is_shown(server):
    server.script = [(422, [], {"detail": [{"loc": ["body", "steps", 0], "msg": "too many steps"}]})]
    with pytest.raises(PrmkitError, match=r"HTTP 422: steps\.0: too many steps"):
        client(server.url).score(PROBLEMS[:1], STEPS[:1])
    server.script = [(400, [], {"error": {"message": "problem 0 is empty", "type": "invalid"}})]
    with pytest.raises(PrmkitError, match="HTTP 400: problem 0 is empty"):
        client(server.url).score(PROBLEMS[:1], STEPS[:1])
    assert len(server.score_posts()) == 2


@pytest.mark.parametrize("body, match", [
    (b"<html>oops</html>", "not JSON"),
    ({"scores": []}, "'step_scores' is missing"),
    ({"step_scores": [[0.5]]}, "1 score lists for 2 solutions"),
    ({"step_scores": [[0.5], [0.5]]}, r"step_scores\[1\] has 1 scores for 2 steps"),
    ({"step_scores": [[0.5], [0.5, "high"]]}, r"step_scores\[1\]\[1\] = 'high'"),
    ({"step_scores": [[0.5], [0.5, 1.5]]}, r"= 1.5 is not a number in \[0, 1\]"),
    ({"step_scores": [[True], [0.5, 0.5]]}, r"= True"),
])
def test_malformed_responses_are_clear_errors(server, body, match):
    server.script = [(200, [], body)]
    with pytest.raises(PrmkitError, match=match):
        client(server.url).score(["a", "b"], [["s"], ["s", "t"]])


def test_null_scores_are_kept_and_counted(server):
    server.script = [(200, [], {"step_scores": [[0.5, None], [0.25]], "model": "m", "format": "f"})]
    prm = client(server.url)
    assert prm.score(["a", "b"], [["s", "t"], ["u"]]) == [[0.5, None], [0.25]]
    assert prm.stats.truncated_solutions == 1


def test_connection_refused_after_retries():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()                                  # nothing listens there now
    prm = client(f"http://127.0.0.1:{port}", retries=2, backoff=0.01)
    with pytest.raises(PrmkitError, match=r"cannot connect: .*\(after 3 attempts\)"):
        prm.score(["a"], [["s"]])
    assert prm.stats.requests == 3


def test_timeouts_are_retried_then_reported(server):
    server.delay = 0.5
    prm = client(server.url, timeout=0.1, retries=1)
    with pytest.raises(PrmkitError, match=r"cannot connect: .*timed out.*\(after 2 attempts\)"):
        prm.score(["a"], [["s"]])


def test_urls_inputs_and_options():
    assert is_remote("http://h:8000") and is_remote("HTTPS://h/prefix")
    assert not is_remote("smollm2-135m") and not is_remote("org/model") and not is_remote("./http:")
    assert RemotePRM("http://h:1/prefix/").base_url == "http://h:1/prefix"
    assert RemotePRM("http://h:1/v1/score").base_url == "http://h:1"
    with pytest.raises(PrmkitError, match="http:// or https://"):
        RemotePRM("h:1")
    with pytest.raises(PrmkitError, match="batch_size"):
        RemotePRM("http://h:1", batch_size=0)
    prm = RemotePRM("http://h:1")
    assert prm.score([], []) == []                   # no request at all
    with pytest.raises(PrmkitError, match="2 problems but 1 step lists"):
        prm.score(["a", "b"], [["s"]])
    with pytest.raises(PrmkitError, match="steps must be a list of strings"):
        prm.score(["a"], ["one step as a string"])
    with pytest.raises(PrmkitError, match="not available for a remote PRM"):
        prm.score_per_prefix(["a"], [["s"]])


def test_pure_helpers():
    assert validate_response({"step_scores": [[0, 1], []]}, [2, 0]) == [[0.0, 1.0], []]
    with pytest.raises(PrmkitError, match="expected a JSON object"):
        validate_response([], [1])
    with pytest.raises(PrmkitError, match="not a number"):
        validate_response({"step_scores": [[float("nan")]]}, [1])
    assert error_message(b'{"error": "plain"}') == "plain"
    assert error_message(b'{"detail": "Not Found"}') == "Not Found"
    assert error_message(b"Service Unavailable") == "Service Unavailable"
    assert _retry_after("2", 60) == 2.0
    assert _retry_after("1000", 60) == 60.0
    assert _retry_after("-5", 60) == 0.0
    assert _retry_after("soon", 60) is None
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 60) == 0.0   # a date in the past
    assert _retry_after(None, 60) is None
