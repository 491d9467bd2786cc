"""A Python client of ``prmkit serve``, with retries.

:class:`PrmClient` speaks every endpoint of :mod:`prmkit.serve.app`. Requests go through
:class:`prmkit.models.backends.remote.RemotePRM` (standard library only), so retries behave as its
docstring says: connection errors and 502/503/504 are retried up to ``retries`` times with
exponential backoff, a 503's ``Retry-After`` is honoured (up to ``max_retry_after`` seconds),
and every other error (400, 401, 413, 422) is raised at once as a
:class:`~prmkit.errors.PrmkitError` with the server's message. Scoring is idempotent, so a
retry is always safe.

    client = PrmClient("http://127.0.0.1:8000", token="...")
    client.wait_until_ready()
    client.score(["1+1?"], [["1+1=2", "The answer is 2"]])      # [[0.93, 0.88]]
    client.rewards(["1+1?\\n\\n1+1=2\\n\\nThe answer is 2"])       # [0.88]

``score`` is the PRM protocol method, so a client can stand wherever a PRM is expected.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.backends.remote import RemotePRM, RemoteStats, validate_response


class PrmClient:
    """Client of one ``prmkit serve``. ``token`` defaults to ``$PRMKIT_TOKEN``."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 60,
                 retries: int = 3, backoff: float = 0.5, max_retry_after: float = 60.0,
                 batch_size: int = 32, concurrency: int = 4):
        self.remote = RemotePRM(base_url, token=token, timeout=timeout, retries=retries,
                                batch_size=batch_size, concurrency=concurrency, backoff=backoff,
                                max_retry_after=max_retry_after)

    @property
    def base_url(self) -> str:
        return self.remote.base_url

    @property
    def stats(self) -> RemoteStats:
        """Requests sent and retries made so far."""
        return self.remote.stats

    # -- /v1/score ----------------------------------------------------------------------------
    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        """One score per step (the PRM protocol); requests of ``batch_size`` solutions."""
        return self.remote.score(problems, steps)

    def score_full(self, problems: Sequence[str] | None = None,
                   steps: Sequence[Sequence[str]] | None = None,
                   texts: Sequence[str] | None = None,
                   aggregates: Sequence[str] | None = None) -> dict[str, Any]:
        """One ``/v1/score`` request, the whole answer: ``step_scores``, ``aggregates`` and,
        for ``texts``, the ``problems`` and ``steps`` the server cut them into."""
        payload: dict[str, Any] = {}
        for name, value in (("problems", problems), ("steps", steps), ("texts", texts),
                            ("aggregates", aggregates)):
            if value is not None:
                payload[name] = [list(v) for v in value] if name == "steps" else list(value)
        body = self.remote.request("POST", "/v1/score", payload)
        if steps is not None:
            validate_response(body, [len(s) for s in steps], where=self.base_url + "/v1/score")
        elif not isinstance(body, dict) or not isinstance(body.get("steps"), list):
            raise PrmkitError(f"{self.base_url}/v1/score: malformed response: no 'steps'")
        else:
            validate_response(body, [len(s) for s in body["steps"]], where=self.base_url + "/v1/score")
        return body

    # -- /get_reward --------------------------------------------------------------------------
    def get_reward(self, queries: Sequence[str], prompts: Sequence[str] | None = None,
                   labels: Sequence[Any] | None = None, return_steps: bool = False) -> dict[str, Any]:
        """One ``/get_reward`` request (OpenRLHF's body), the whole answer."""
        payload: dict[str, Any] = {"query": list(queries)}
        if prompts is not None:
            payload["prompts"] = list(prompts)
        if labels is not None:
            payload["labels"] = list(labels)
        if return_steps:
            payload["return_steps"] = True
        body = self.remote.request("POST", "/get_reward", payload)
        rewards = body.get("rewards") if isinstance(body, dict) else None
        if not isinstance(rewards, list) or len(rewards) != len(queries):
            raise PrmkitError(f"{self.base_url}/get_reward: malformed response: expected "
                              f"{len(queries)} rewards")
        return body

    def rewards(self, queries: Sequence[str], prompts: Sequence[str] | None = None) -> list[float]:
        """One reward per query (the server's reward rule over the step scores)."""
        return [float(r) for r in self.get_reward(queries, prompts)["rewards"]]

    # -- /health ------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self.remote.health()

    def wait_until_ready(self, timeout: float = 60.0, interval: float = 0.5) -> dict[str, Any]:
        """Poll ``/health`` until the server answers (a model may take a while to load)."""
        deadline = time.monotonic() + timeout
        probe = RemotePRM(self.base_url, token=self.remote.token, timeout=max(interval, 1.0),
                          retries=0)
        while True:
            try:
                return probe.health()
            except PrmkitError as e:
                if "HTTP 401" in str(e) or "HTTP 403" in str(e) or time.monotonic() > deadline:
                    raise
            time.sleep(interval)
