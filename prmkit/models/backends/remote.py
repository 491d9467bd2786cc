"""Score steps through a running ``prmkit serve``, over HTTP.

The wire contract (version 1), which ``prmkit serve`` implements: ``POST {base_url}/v1/score``
(``Authorization: Bearer TOKEN`` when a token is set) with body::

    {"problems": ["...", ...],            # one string per solution
     "steps": [["...", ...], ...]}        # one list of step strings per solution, same length

A server may accept more fields, but must always serve these two. Success, ``200``::

    {"step_scores": [[0.93, 0.41, null], ...],   # one list per solution, one entry per step
     "model": "name or path of the PRM",
     "format": "step format name",
     "aggregates": {"prod": [0.38, ...], ...}}   # optional, one value per solution

``step_scores[i]`` has exactly ``len(steps[i])`` entries, each a finite number in [0, 1] or
``null`` (a step past the model's maximum length); the client rejects a response that breaks
this. Errors: a non-2xx status with ``{"error": {"message", "type"}}`` (FastAPI's ``detail``
forms are understood too), the message shown as it is. 4xx are never retried; 503 with
``Retry-After`` means overloaded (the client waits, at most ``max_retry_after``), so overload
must be 503, not 429. ``GET {base_url}/health`` -> ``{"status": "ok", "model", "format"}``.

The client uses the standard library only. Solutions go in requests of at most ``batch_size``,
``concurrency`` at once, results in input order. Connection errors and 502/503/504 are retried
up to ``retries`` times with backoff ``backoff * 2**attempt`` seconds plus jitter (a 503's
``Retry-After`` wins); scoring is idempotent, so a retry is safe. Environment proxies are used
except for loopback addresses.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from prmkit.errors import PrmkitError
# re-exported: where a URL is told from a model is decided in prmkit.models.names
from prmkit.models.names import is_remote  # noqa: F401

SCORE_PATH = "/v1/score"
HEALTH_PATH = "/health"
RETRY_STATUS = (502, 503, 504)
TOKEN_ENV = "PRMKIT_TOKEN"           # the server's token, read by `prmkit serve` and its clients
TOKEN_ALIAS = "PRMKIT_SERVE_TOKEN"   # the same, under the name serve read first; kept as an alias


def env_token() -> str | None:
    """The server token from the environment: ``$PRMKIT_TOKEN``, else its alias
    ``$PRMKIT_SERVE_TOKEN`` (None when neither is set or both are empty)."""
    return os.environ.get(TOKEN_ENV) or os.environ.get(TOKEN_ALIAS) or None


class RemoteStats:
    """What the client did, for the CLI's summary."""

    def __init__(self) -> None:
        self.requests = 0            # HTTP requests sent, retries included
        self.retries = 0
        self.truncated_solutions = 0  # solutions that came back with a null step score
        self._lock = threading.Lock()

    def add(self, **counts: int) -> None:
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)


class RemotePRM:
    """A PRM behind ``prmkit serve``. ``score`` is the protocol method.

    ``base_url`` is the server's root (``http://host:8000``, or with a path prefix); a URL
    ending in ``/v1/score`` is accepted too. ``token`` defaults to ``$PRMKIT_TOKEN``.
    """

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 60,
                 retries: int = 3, batch_size: int = 32, concurrency: int = 4,
                 backoff: float = 0.5, max_retry_after: float = 60.0):
        if not is_remote(base_url):
            raise PrmkitError(f"remote PRM {base_url!r}: the URL must start with http:// or https://")
        if timeout <= 0:
            raise PrmkitError(f"timeout must be positive, got {timeout}")
        if retries < 0:
            raise PrmkitError(f"retries must be 0 or more, got {retries}")
        if batch_size < 1:
            raise PrmkitError(f"batch_size must be positive, got {batch_size}")
        if concurrency < 1:
            raise PrmkitError(f"concurrency must be positive, got {concurrency}")
        url = base_url.strip().rstrip("/")
        for suffix in (SCORE_PATH, HEALTH_PATH):
            if url.endswith(suffix):
                url = url[: -len(suffix)]
        self.base_url = url
        self.token = token if token is not None else env_token()
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.batch_size, self.concurrency = int(batch_size), int(concurrency)
        self.max_retry_after = float(max_retry_after)
        self.model_name: str | None = None   # as the server reports them
        self.format_name: str | None = None
        self.stats = RemoteStats()
        host = urllib.parse.urlsplit(url).hostname or ""
        handlers = [urllib.request.ProxyHandler({})] if is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    # -- the protocol -----------------------------------------------------------------------
    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        """One score per step, from the server; requests of ``batch_size`` solutions, sent
        ``concurrency`` at a time, results in input order."""
        problems, steps = _check_inputs(problems, steps)
        if not problems:
            return []
        chunks = [(start, problems[start:start + self.batch_size], steps[start:start + self.batch_size])
                  for start in range(0, len(problems), self.batch_size)]
        out: list[list[float | None]] = [[] for _ in problems]
        if len(chunks) == 1 or self.concurrency == 1:
            results = [self.score_request(p, s) for _, p, s in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(chunks))) as pool:
                futures = [pool.submit(self.score_request, p, s) for _, p, s in chunks]
                try:
                    results = [f.result() for f in futures]
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
        for (start, _, _), scores in zip(chunks, results):
            out[start:start + len(scores)] = scores
        return out

    def score_per_prefix(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        raise PrmkitError("per-prefix scoring is not available for a remote PRM: run it where "
                          "the model is (prmkit score --model PATH --per-prefix)")

    # -- one request --------------------------------------------------------------------------
    def score_request(self, problems: list[str], steps: list[list[str]]) -> list[list[float | None]]:
        """One ``POST /v1/score``, retried as documented; the validated step scores."""
        body = self.request("POST", SCORE_PATH, {"problems": problems, "steps": steps})
        scores = validate_response(body, [len(s) for s in steps], where=self.base_url + SCORE_PATH)
        if isinstance(body.get("model"), str):
            self.model_name = body["model"]
        if isinstance(body.get("format"), str):
            self.format_name = body["format"]
        self.stats.add(truncated_solutions=sum(1 for row in scores if None in row))
        return scores

    def health(self) -> dict[str, Any]:
        """``GET /health``: the server's answer (raises PrmkitError when it is not up)."""
        return self.request("GET", HEALTH_PATH, None)

    def request(self, method: str, path: str, payload: Any) -> Any:
        """Send one request with retries; the decoded JSON body of a 2xx answer."""
        url = self.base_url + path
        data = None if payload is None else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        headers = {"Accept": "application/json", "User-Agent": "prmkit-remote/1"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats.add(retries=1)
            self.stats.add(requests=1)
            req = urllib.request.Request(url, data=data, headers=headers, method=method)
            wait: float | None = None
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                return _decode_json(raw, url)
            except urllib.error.HTTPError as e:
                raw = _read_quietly(e)
                message = error_message(raw) or e.reason or "no message"
                if e.code not in RETRY_STATUS:
                    raise PrmkitError(f"{method} {url}: HTTP {e.code}: {message}") from None
                last = f"HTTP {e.code}: {message}"
                if e.code == 503:
                    wait = _retry_after(e.headers.get("Retry-After"), self.max_retry_after)
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError,
                    TimeoutError, socket.timeout) as e:
                reason = getattr(e, "reason", None) or e
                last = f"cannot connect: {reason}"
            if attempt < self.retries:
                if wait is None:
                    wait = self.backoff * (2 ** attempt) * (1 + 0.1 * random.random())
                time.sleep(wait)
        tries = self.retries + 1
        raise PrmkitError(f"{method} {url}: {last} (after {tries} attempt{'s' if tries > 1 else ''})")


# ---------------------------------------------------------------------------------------------
# pure helpers


def validate_response(body: Any, n_steps: Sequence[int], where: str = "response") -> list[list[float | None]]:
    """The ``step_scores`` of a ``/v1/score`` answer, checked against the request: one list per
    solution, one entry per step, each a finite number in [0, 1] or null."""
    if not isinstance(body, dict):
        raise PrmkitError(f"{where}: malformed response: expected a JSON object, got "
                          f"{type(body).__name__}")
    rows = body.get("step_scores")
    if not isinstance(rows, list):
        raise PrmkitError(f"{where}: malformed response: field 'step_scores' is missing or not a list")
    if len(rows) != len(n_steps):
        raise PrmkitError(f"{where}: malformed response: {len(rows)} score lists for "
                          f"{len(n_steps)} solutions")
    out: list[list[float | None]] = []
    for i, (row, n) in enumerate(zip(rows, n_steps)):
        if not isinstance(row, list):
            raise PrmkitError(f"{where}: malformed response: step_scores[{i}] is not a list")
        if len(row) != n:
            raise PrmkitError(f"{where}: malformed response: step_scores[{i}] has {len(row)} "
                              f"scores for {n} steps")
        clean: list[float | None] = []
        for k, v in enumerate(row):
            if v is None:
                clean.append(None)
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not 0.0 <= v <= 1.0:
                raise PrmkitError(f"{where}: malformed response: step_scores[{i}][{k}] = {v!r} is "
                                  f"not a number in [0, 1] or null")
            clean.append(float(v))
        out.append(clean)
    return out


def error_message(raw: bytes) -> str:
    """The message of an error body: ``{"error": {"message"}}``, ``{"error": "..."}``,
    FastAPI's ``{"detail": ...}``, or the text itself (shortened)."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list):
            parts = []
            for d in detail[:5]:
                if isinstance(d, dict):
                    loc = ".".join(str(x) for x in d.get("loc", []) if x != "body")
                    parts.append(f"{loc}: {d.get('msg', '')}" if loc else str(d.get("msg", "")))
            if parts:
                return "; ".join(parts)
        if isinstance(body.get("message"), str):
            return body["message"]
    return text[:300]


def _check_inputs(problems: Sequence[str], steps: Sequence[Sequence[str]]) -> tuple[list[str], list[list[str]]]:
    if len(problems) != len(steps):
        raise PrmkitError(f"{len(problems)} problems but {len(steps)} step lists")
    out_p: list[str] = []
    out_s: list[list[str]] = []
    for i, (p, s) in enumerate(zip(problems, steps)):
        if not isinstance(p, str):
            raise PrmkitError(f"solution {i}: the problem is not a string")
        if isinstance(s, str) or not all(isinstance(x, str) for x in s):
            raise PrmkitError(f"solution {i}: steps must be a list of strings")
        out_p.append(p)
        out_s.append(list(s))
    return out_p, out_s


def _decode_json(raw: bytes, url: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        snippet = raw[:120].decode("utf-8", errors="replace")
        raise PrmkitError(f"{url}: malformed response: not JSON ({snippet!r})") from None


def _read_quietly(e: urllib.error.HTTPError) -> bytes:
    try:
        return e.read()
    except (OSError, http.client.HTTPException):
        return b""


def _retry_after(value: str | None, cap: float) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), capped."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), cap)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        import ipaddress

        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
