"""Sample completions from any OpenAI-compatible server over HTTP (standard library only).

Targets the completions endpoint of the OpenAI API, ``POST {base_url}/completions`` (base_url
like ``http://host:8000/v1``), as vLLM (``vllm serve``), llama.cpp (``llama-server``), SGLang
and TGI serve it. Request body::

    {"model", "prompt", "n": 1, "max_tokens", "temperature", "top_p", "seed", "stop",
     "include_stop_str_in_output": true}

Response: ``choices[0].text`` and ``finish_reason`` ("stop" / "length"), ``usage``
(``prompt_tokens``, ``completion_tokens``). The prompt is a string built by prmkit (the chat
template already applied), so no chat endpoint is involved.

Every sample is its own request (``n=1``) with its own seed from
:func:`prmkit.generate.base.sample_seed`: per-sample token counts come straight from ``usage``,
a sample does not depend on the rest of the call, and servers without ``n > 1`` work too.
Requests run in parallel, at most ``concurrency`` at a time.

Stop strings. prmkit keeps the stop string in the text. The request asks for that with vLLM's
``include_stop_str_in_output`` (other servers ignore the field; turn it off with
``extra={}`` for a server that rejects unknown fields). The matched stop string is taken, in
this order, from the text's end, from ``stop_reason`` (vLLM), ``matched_stop`` (SGLang) or
``stopping_word`` (llama.cpp), and appended when the server left it out. A ``"stop"`` without
any of these is an end of text (``finish_reason "eos"``): a server that strips stop strings and
does not say which one matched (OpenAI's own API) cannot be told apart from an end token.

Failures: HTTP 429 and 5xx, timeouts and refused or dropped connections are retried with
exponential backoff (``backoff * 2**attempt`` seconds, capped at 30, honouring a numeric
``Retry-After``), at most ``retries`` times; then, or at once for any other HTTP error, a
:class:`prmkit.errors.PrmkitError` names the URL, the status and the server's message.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Completion, check_sampling, check_stop, sample_seed

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


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

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise PrmkitError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0 or self.concurrency < 1:
            raise PrmkitError("timeout and concurrency must be positive, retries and backoff >= 0")


class OpenAIGenerator:
    """An OpenAI-compatible completions server as a :class:`prmkit.generate.base.Generator`."""

    def __init__(self, config: OpenAIConfig):
        self.config = config
        self.url = config.base_url.rstrip("/") + "/completions"
        self.tokens_generated = 0
        self.requests_sent = 0

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature, top_p, seed)
        stop = check_stop(stop)
        bodies = []
        for prompt in prompts:
            for k in range(n):
                body = {"model": self.config.model, "prompt": prompt, "n": 1,
                        "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
                        "seed": sample_seed(seed, prompt, k), **self.config.extra}
                if stop:
                    body["stop"] = stop
                bodies.append(body)
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            flat = list(pool.map(lambda b: self._completion(self._post(b), stop), bodies))
        self.tokens_generated += sum(c.n_tokens for c in flat)
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    # ------------------------------------------------------------------------------ HTTP

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

    @staticmethod
    def _completion(answer: dict[str, Any], stop: list[str]) -> Completion:
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
        if matched is not None:
            return Completion(text, n_tokens, "stop", matched, prompt_tokens=prompt_tokens)
        return Completion(text, n_tokens, "eos", prompt_tokens=prompt_tokens)


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
