"""Sample completions from any OpenAI-compatible server over HTTP (standard library only).

``POST {base_url}/completions`` (base_url like ``http://host:8000/v1``), as vLLM, llama.cpp's
``llama-server``, SGLang and TGI serve it, with body ``{"model", "prompt", "n": 1, "max_tokens",
"temperature", "top_p", "seed", "stop", "include_stop_str_in_output": true}``; the prompt is
prmkit's own string (chat template applied). Each sample is its own request (``n=1``) with its
own seed (:func:`prmkit.generate.base.sample_seed`), so token counts come from ``usage`` and
samples do not depend on each other; at most ``concurrency`` requests run at a time.

prmkit keeps the stop string in the text: it is taken from the text's end, ``stop_reason``
(vLLM), ``matched_stop`` (SGLang) or ``stopping_word`` (llama.cpp), and appended when the server
left it out (``extra={}`` drops ``include_stop_str_in_output`` for a server that rejects unknown
fields). Servers that cut it unnamed (llama-cpp-python's server, OpenAI's API) report a stop
string and the end token alike as ``"stop"``; ``stop_strings`` says how to read it:

* ``reported``: an unexplained ``"stop"`` is an end of text (on a stripping server this ends
  every step-wise continuation after its first step);
* ``stripped``: it is the first stop string sent, the step separator; exact when every other
  stop string begins with the first (as prmkit's prompt styles send them), else a warning. The
  model's end token after some text is misread as the separator, so the solution asks for one
  more step. An empty text from zero generated tokens is an end of text;
* ``logprobs``: as ``stripped``, but the stop string is found in the returned ``logprobs``
  tokens; exact, end of text included, and much slower on llama-cpp-python;
* ``auto`` (default): the first call with stop strings asks the server with two greedy requests
  (one token, then the same with that token's text as stop string): the text back or a named
  stop means ``reported``, an empty text with an unexplained ``"stop"`` ``stripped``, anything
  else ``reported`` with a warning. The two count in ``requests_sent``.

HTTP 429 and 5xx, timeouts and dropped connections are retried at most ``retries`` times with
backoff ``backoff * 2**attempt`` seconds (capped at 30, honouring a numeric ``Retry-After``);
then, or at once for another HTTP error, a :class:`prmkit.errors.PrmkitError` names the URL, the
status and the server's message.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Completion, check_sampling, check_stop, find_stop, sample_seed

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
STOP_MODES = ("auto", "reported", "stripped", "logprobs")
STOP_HELP = ("how the server returns a matched stop string, which decides what a finish "
             "'stop' that names none means: reported (kept or named, as vLLM, SGLang and "
             "llama-server do: it is an end of text), stripped (cut and not named, as "
             "llama-cpp-python's server and OpenAI's API do: it is the first stop string "
             "sent, the step separator), logprobs (as stripped, but read from the tokens the "
             "server returns with logprobs, so an end of text is told apart; about 5x slower "
             "on llama-cpp-python), auto (ask the server once with two one-token greedy "
             "requests: reported or stripped)")


@dataclass
class OpenAIConfig:
    """Where the server is and how it is called."""

    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={
        "help": "the API root, ending in /v1"})
    model: str = field(default="", metadata={"help": "the model name the server knows"})
    api_key: str | None = field(default=None, metadata={"help": "sent as a Bearer token"})
    timeout: float = field(default=120.0, metadata={"help": "seconds per request"})
    retries: int = field(default=5, metadata={"help": "retries of a failed request"})
    backoff: float = field(default=0.5, metadata={"help": "first retry delay, in seconds"})
    concurrency: int = field(default=8, metadata={"help": "requests in flight at once"})
    extra: dict[str, Any] = field(default_factory=lambda: {"include_stop_str_in_output": True},
                                  metadata={"help": "more fields for every request body"})
    stop_strings: str = field(default="auto", metadata={"help": STOP_HELP})

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise PrmkitError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0 or self.concurrency < 1:
            raise PrmkitError("timeout and concurrency must be positive, retries and backoff >= 0")
        if self.stop_strings not in STOP_MODES:
            raise PrmkitError(f"stop_strings must be one of {', '.join(STOP_MODES)}, "
                              f"got {self.stop_strings!r}")


class OpenAIGenerator:
    """An OpenAI-compatible completions server as a :class:`prmkit.generate.base.Generator`."""

    def __init__(self, config: OpenAIConfig):
        self.config = config
        self.url = config.base_url.rstrip("/") + "/completions"
        self.tokens_generated = 0
        self.requests_sent = 0
        # how an unexplained "stop" is read; "auto" is settled by probe() on first use
        self.stop_mode = None if config.stop_strings == "auto" else config.stop_strings

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature, top_p, seed)
        stop = check_stop(stop)
        if stop and self.stop_mode is None and prompts:
            self.stop_mode = self.probe(prompts[0])
        mode = self.stop_mode or "reported"
        if mode == "stripped" and any(not s.startswith(stop[0]) for s in stop):
            warnings.warn(f"stop strings {stop!r}: on a server that strips them, one that does "
                          f"not begin with {stop[0]!r} is read as {stop[0]!r} when it matches")
        bodies = []
        for prompt in prompts:
            for k in range(n):
                body = {"model": self.config.model, "prompt": prompt, "n": 1,
                        "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
                        "seed": sample_seed(seed, prompt, k), **self.config.extra}
                if stop:
                    body["stop"] = stop
                    if mode == "logprobs":
                        body["logprobs"] = 0
                bodies.append(body)
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            flat = list(pool.map(lambda b: read_completion(self._post(b), stop, mode), bodies))
        self.tokens_generated += sum(c.n_tokens for c in flat)
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    def probe(self, prompt: str) -> str:
        """Whether this server keeps or names a matched stop string (``"reported"``) or cuts it
        unnamed (``"stripped"``), asked with two greedy requests on ``prompt`` (the module
        docstring, ``auto``)."""
        body = {"model": self.config.model, "prompt": prompt, "n": 1, "max_tokens": 1,
                "temperature": 0.0, "top_p": 1.0, "seed": 0, **self.config.extra}
        first = read_completion(self._post(body), [], "reported")
        token = first.text
        if token:
            # max_tokens 2: a server that missed the stop string says so with a longer text
            again = read_completion(self._post({**body, "max_tokens": 2, "stop": [token]}),
                                    [token], "reported")
            if again.finish_reason == "stop":
                return "reported"
            if again.finish_reason == "eos" and not again.text:
                return "stripped"
        warnings.warn(f"{self.url}: could not tell whether the server strips stop strings "
                      f"(its first greedy token, {token!r}, did not come back as a stop string); "
                      f"reading them as reported: say --stop-strings stripped or reported")
        return "reported"

    # ------------------------------------------------------------------------------ HTTP

    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """One completions request as given (with the retries above), its JSON answer."""
        return self._post(body)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        for attempt in range(self.config.retries + 1):
            retry_after = None
            try:
                request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
                self.requests_sent += 1
                with urllib.request.urlopen(request, timeout=self.config.timeout) as response:
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as e:
                message = _error_message(e)
                if e.code not in RETRY_STATUS or attempt == self.config.retries:
                    raise PrmkitError(f"{self.url}: HTTP {e.code}: {message}") from None
                retry_after = e.headers.get("Retry-After") if e.headers else None
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as e:
                if attempt == self.config.retries:
                    reason = getattr(e, "reason", e)
                    raise PrmkitError(f"{self.url}: no answer after {attempt + 1} tries "
                                      f"({reason})") from None
            except json.JSONDecodeError:
                raise PrmkitError(f"{self.url}: the answer is not JSON") from None
            time.sleep(_delay(self.config.backoff, attempt, retry_after))
        raise AssertionError("unreachable")

def read_completion(answer: dict[str, Any], stop: list[str], mode: str = "reported") -> Completion:
    """One answer of the completions endpoint as a :class:`Completion`; ``mode`` says how an
    unexplained ``"stop"`` is read (``stop_strings`` in the module docstring)."""
    try:
        choice = answer["choices"][0]
        text = choice.get("text") or ""
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise PrmkitError(f"unexpected answer from the server (no choices[0].text): "
                          f"{json.dumps(answer)[:200]}") from None
    usage = answer.get("usage") or {}
    n_tokens = int(usage.get("completion_tokens") or 0)
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    if finish == "length":
        return Completion(text, n_tokens, "length", prompt_tokens=prompt_tokens)
    if finish != "stop":  # "eos" (some servers), or a server-side end
        return Completion(text, n_tokens, "eos", prompt_tokens=prompt_tokens)
    matched = next((s for s in stop if text.endswith(s)), None)
    if matched is None:
        for key in ("stop_reason", "matched_stop", "stopping_word"):
            value = choice.get(key, answer.get(key))
            if isinstance(value, str) and value in stop:
                matched, text = value, text + value
                break
    if matched is None and stop and mode != "reported":
        matched = unnamed_stop(choice, text, usage, stop, mode)
        if matched is not None:
            text += matched
    if matched is not None:
        return Completion(text, n_tokens, "stop", matched, prompt_tokens=prompt_tokens)
    return Completion(text, n_tokens, "eos", prompt_tokens=prompt_tokens)


def unnamed_stop(choice: dict[str, Any], text: str, usage: dict[str, Any], stop: list[str],
                 mode: str) -> str | None:
    """The stop string behind a ``"stop"`` that neither the text nor the answer names, on a
    server that strips them (mode ``stripped`` or ``logprobs``); None for an end of text."""
    if mode == "logprobs":
        logprobs = choice.get("logprobs")
        tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
            found = find_stop("".join(tokens), stop)   # the token that completed it is there
            return None if found is None else found[1]
    if not text and "completion_tokens" in usage and not usage["completion_tokens"]:
        return None                                    # nothing generated: no stop string
    return stop[0]


def _error_message(e: urllib.error.HTTPError) -> str:
    try:
        body = e.read().decode("utf-8", "replace")
    except OSError:
        return str(e.reason)
    try:
        obj = json.loads(body)
        error = obj.get("error", obj) if isinstance(obj, dict) else obj
        message = error.get("message", body) if isinstance(error, dict) else str(error)
    except json.JSONDecodeError:
        message = body
    return " ".join(str(message).split())[:300] or str(e.reason)


def _delay(backoff: float, attempt: int, retry_after: str | None) -> float:
    if retry_after is not None:
        try:
            return min(30.0, max(0.0, float(retry_after)))
        except ValueError:
            pass
    return min(30.0, backoff * 2 ** attempt)
