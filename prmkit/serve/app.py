"""The reward server: a PRM behind HTTP, for RL trainers and remote scoring (FastAPI + uvicorn).

Endpoints (with a token, each needs ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``):

``POST /v1/score``
    The wire contract of :mod:`prmkit.models.backends.remote`. Also accepted: ``"texts"``, full
    solutions cut by the server's step rule (with ``"problems"``, or holding the problem, cut
    as :func:`prmkit.serve.queries.split_query` does; the answer then has ``"steps"``), and
    ``"aggregates"``, the rules of :mod:`prmkit.aggregate` to return (default all; null for a
    solution without a scored step).
``POST /get_reward``
    OpenRLHF's remote reward model (:mod:`prmkit.serve.queries`); ``"return_steps": true`` adds
    ``"problems"`` and ``"steps"``.
``GET /health``
    ``{"status", "model", "format", "dtype", "kind", "queue", "batching", "prefix_sharing"}``.

Bad requests get ``{"error": {"message", "type"}}`` with 400, 401, 413, 422 (also for text
that is not valid Unicode), 431 (headers over the limit, :mod:`prmkit.serve.headers`) or 503,
never a 500 (docs/serving.md). One worker thread owns the
model (:class:`~prmkit.serve.batcher.Batcher`); handlers validate and count tokens off the
event loop, queue and wait. Shutdown finishes the requests in flight (``graceful_timeout``),
then drains.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import socket
import threading
import time
import urllib.parse
from typing import Any, Literal, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from prmkit.aggregate import AGGREGATES
from prmkit.errors import PrmkitError
from prmkit.models.base import PRM
from prmkit.models.sharing.policy import sharing_of
from prmkit.models.sharing.prefix import ShareStats, score_by_problem
from prmkit.scoring import describe
from prmkit.serve.batcher import Batcher, Closed, Overloaded
from prmkit.serve.config import ServeConfig
from prmkit.serve.disconnect import WatchDisconnect, body_chunks, wait_answer
from prmkit.serve.headers import HeaderLimit, protocol
from prmkit.serve.queries import (one_solution_hint, response_steps, rewards_from_scores,
                                  safe_aggregate, split_query)

log = logging.getLogger("prmkit")

AggregateName = Literal["prod", "min", "last", "mean", "geomean"]
assert set(AggregateName.__args__) == set(AGGREGATES)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# request bodies


class ScoreRequest(BaseModel):
    """``POST /v1/score``: ``problems`` + ``steps``, or ``texts`` (with or without problems)."""

    model_config = ConfigDict(extra="forbid")
    problems: list[StrictStr] | None = None
    steps: list[list[StrictStr]] | None = None
    texts: list[StrictStr] | None = None
    aggregates: list[AggregateName] | None = None


class RewardRequest(BaseModel):
    """``POST /get_reward`` (OpenRLHF). Unknown fields are ignored; ``labels`` too."""

    model_config = ConfigDict(extra="ignore")
    query: list[StrictStr]
    prompts: list[StrictStr] | None = None
    labels: Any = None
    return_steps: StrictBool = False


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message for the caller."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request",
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers


def gone() -> RequestError:
    """What a client that disconnected gets (no one reads it; prmkit/serve/disconnect.py)."""
    return RequestError(499, "the client disconnected", "client_disconnected")


def error_response(status: int, message: str, kind: str,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status,
                        headers=headers)


# ---------------------------------------------------------------------------------------------
# the server's state: the PRM, its batcher and the limits


class Scorer:
    """What the handlers share: the PRM (reached only through the batcher) and the limits."""

    def __init__(self, prm: PRM, config: ServeConfig, model_name: str, format_name: str,
                 kind: str = "prm"):
        self.prm, self.config, self.model_name, self.format_name, self.kind = (
            prm, config, model_name, format_name, kind)
        self.dtype = describe(prm)["dtype"]   # /health's: a resumed score checks it
        self.bound = getattr(prm, "bound", None)       # the step format, to count tokens
        limits = [x for x in (config.max_tokens, getattr(prm, "max_length", None)) if x]
        self.max_tokens = min(limits) if limits else None
        self.sharing = ShareStats() if config.share_prefix and sharing_of(prm).can_share else None
        self.batcher = Batcher(prm.score if self.sharing is None else (
            lambda p, s: score_by_problem(prm, p, s, self.sharing)), config.batching, self.sharing is not None)

    def check(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> None:
        """The limits that need no tokenizer: solutions per request, steps per solution."""
        cfg = self.config
        if len(problems) > cfg.max_solutions:
            raise RequestError(413, f"{len(problems)} solutions in one request; this server takes "
                                    f"at most {cfg.max_solutions} (split the request)", "too_large")
        for i, s in enumerate(steps):
            if len(s) > cfg.max_steps:
                raise RequestError(422, f"solution {i} has {len(s)} steps; this server scores at "
                                        f"most {cfg.max_steps} steps per solution", "too_many_steps")

    def lengths(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[int]:
        """Token count of every solution as the step format encodes it (422 over the limit).
        Runs in a worker thread of the pool, not on the event loop."""
        if self.bound is None:
            return [1] * len(problems)
        out = []
        for i, (p, s) in enumerate(zip(problems, steps)):
            if not s:
                out.append(0)
                continue
            try:
                n = len(self.bound.encode(p, s).input_ids)
            except PrmkitError as e:
                raise RequestError(422, f"solution {i}: {e}") from None
            if self.max_tokens is not None and n > self.max_tokens:
                raise RequestError(422, f"solution {i} is {n} tokens long; this server scores at "
                                        f"most {self.max_tokens} tokens per solution",
                                   "too_many_tokens")
            out.append(n)
        return out

    async def score(self, problems: list[str], steps: list[list[str]]) -> list[list[float | None]]:
        """Validate, queue and wait: one score list per solution (a solution without steps
        gets ``[]`` without reaching the model)."""
        self.check(problems, steps)
        lengths = await run_in_threadpool(self.lengths, problems, steps)
        todo = [i for i, s in enumerate(steps) if s]
        out: list[list[float | None]] = [[] for _ in problems]
        if not todo:
            return out
        try:
            future = self.batcher.submit([problems[i] for i in todo], [steps[i] for i in todo],
                                         [lengths[i] for i in todo])
        except Overloaded as e:
            raise RequestError(503, str(e), "overloaded",
                               {"Retry-After": str(e.retry_after)}) from None
        except Closed as e:
            raise RequestError(503, str(e), "shutting_down", {"Retry-After": "5"}) from None
        scores = await wait_answer(future, self.batcher.cancel, f"{len(todo)} solutions", gone)
        for i, row in zip(todo, scores):
            out[i] = row
        return out

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "model": self.model_name, "format": self.format_name,
                "dtype": self.dtype, "kind": self.kind,
                "queue": {"queued": self.batcher.queued, "max": self.config.batching.max_queue},
                "batching": self.batcher.stats.as_dict(),
                "prefix_sharing": None if self.sharing is None else dict(self.sharing.__dict__)}


# ---------------------------------------------------------------------------------------------
# reading and checking bodies


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON: 413 past ``limit`` bytes (checked before and while reading), 400 when
    it is empty or not JSON."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body is {int(declared)} bytes; this server takes at most "
                                f"{limit} bytes", "too_large")
    chunks, size = [], 0
    async for chunk in body_chunks(request, gone):  # the client may leave while sending
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the body is over {limit} bytes, the most this server takes",
                               "too_large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise RequestError(400, "the body is empty; send a JSON object", "invalid_json")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise RequestError(400, f"the body is not valid JSON: {e}", "invalid_json") from None


def parse(model: type[BaseModel], data: Any) -> Any:
    """``data`` validated as ``model``, or 422 naming the first few bad fields (a request
    written for one solution says how to send it)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        near = one_solution_hint(data) if model is ScoreRequest else None
        if near:
            raise RequestError(422, near) from None
        parts = []
        for err in e.errors()[:5]:
            loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"]).lstrip(".")
            parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
        more = f" (and {e.error_count() - 5} more)" if e.error_count() > 5 else ""
        raise RequestError(422, "; ".join(parts) + more) from None


def check_unicode(field: str, values: Sequence[Any]) -> None:
    """422 for strings that cannot be encoded (lone surrogates from ``\\ud800`` escapes)."""
    for i, v in enumerate(values):
        items = v if isinstance(v, list) else [v]
        for k, s in enumerate(items):
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:
                where = f"{field}[{i}][{k}]" if isinstance(v, list) else f"{field}[{i}]"
                raise RequestError(422, f"{where} is not valid Unicode (a lone surrogate)") from None


def solutions_of(req: ScoreRequest, rule: str) -> tuple[list[str], list[list[str]], bool]:
    """(problems, steps, split) of a ``/v1/score`` request; ``split``: steps were cut from
    texts."""
    for name in ("problems", "texts"):
        check_unicode(name, getattr(req, name) or [])
    check_unicode("steps", req.steps or [])
    if req.steps is not None:
        if req.texts is not None:
            raise RequestError(422, "give either 'steps' or 'texts', not both")
        if req.problems is None:
            raise RequestError(422, "'steps' needs 'problems' (one problem per solution)")
        if len(req.problems) != len(req.steps):
            raise RequestError(422, f"{len(req.problems)} problems but {len(req.steps)} step lists")
        return req.problems, req.steps, False
    if req.texts is None:
        raise RequestError(422, "give 'problems' and 'steps', or 'texts'")
    if req.problems is not None:
        if len(req.problems) != len(req.texts):
            raise RequestError(422, f"{len(req.problems)} problems but {len(req.texts)} texts")
        return req.problems, [response_steps(t, rule) for t in req.texts], True
    cut = [split_query(t, None, rule) for t in req.texts]
    return [p for p, _ in cut], [s for _, s in cut], True


# ---------------------------------------------------------------------------------------------
# the app


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer TOKEN``, or
    ``?token=TOKEN`` in the URL for clients that cannot set headers (OpenRLHF's
    ``--remote_rm_url``); 401 otherwise. The token is compared in constant time."""

    def __init__(self, app: Any, token: str):
        self.app, self.token = app, token.encode("utf-8")

    def authorized(self, scope: Any) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, value = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self.token):
            return True
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        return any(hmac.compare_digest(t.encode("utf-8", "replace"), self.token)
                   for t in query.get("token", []))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if not self.authorized(scope):
                message = ("missing or wrong token: send 'Authorization: Bearer TOKEN' (or "
                           "?token=TOKEN in the URL)")
                response = error_response(401, message, "unauthorized",
                                          {"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(prm: PRM, config: ServeConfig, model_name: str, format_name: str,
               kind: str = "prm") -> FastAPI:
    """The FastAPI app serving ``prm`` (see the module docstring). Its batcher's worker starts
    now and is stopped when the app shuts down."""
    scorer = Scorer(prm, config, model_name, format_name, kind)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        await run_in_threadpool(scorer.batcher.close)  # finish whatever is still queued

    app = FastAPI(title="prmkit reward server", version="1",
                  description=(__doc__ or "").split("\n\n")[0], lifespan=lifespan)
    app.state.scorer = scorer
    if config.token:
        app.add_middleware(BearerAuth, token=config.token)
    app.add_middleware(HeaderLimit, limit=config.max_header_bytes)   # outermost: 431 before 401

    @app.exception_handler(RequestError)
    async def _refused(request: Request, e: RequestError) -> JSONResponse:
        return error_response(e.status, e.message, e.kind, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return error_response(e.status_code, str(e.detail), "http_error", getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception) -> JSONResponse:
        log.exception("internal error while serving %s", request.url.path)
        return error_response(500, f"internal error: {type(e).__name__}: {e}", "internal")

    score_schema, reward_schema = ({"requestBody": {"required": True, "content": {
        "application/json": {"schema": m.model_json_schema()}}}} for m in (ScoreRequest, RewardRequest))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return scorer.health()

    @app.post("/v1/score", openapi_extra=score_schema)
    async def score(request: Request) -> dict[str, Any]:
        req = parse(ScoreRequest, await read_json(request, config.max_body_bytes))
        problems, steps, split = solutions_of(req, config.step_rule)
        step_scores = await scorer.score(problems, steps)
        rules = list(dict.fromkeys(req.aggregates)) if req.aggregates is not None else list(AGGREGATES)
        body: dict[str, Any] = {
            "step_scores": step_scores, "model": scorer.model_name, "format": scorer.format_name,
            "aggregates": {how: [safe_aggregate(row, how) for row in step_scores] for how in rules}}
        if split:
            body["problems"], body["steps"] = problems, steps
        return body

    @app.post("/get_reward", openapi_extra=reward_schema)
    async def get_reward(request: Request) -> dict[str, Any]:
        req = parse(RewardRequest, await read_json(request, config.max_body_bytes))
        check_unicode("query", req.query)
        check_unicode("prompts", req.prompts or [])
        if req.prompts is not None and len(req.prompts) != len(req.query):
            raise RequestError(422, f"{len(req.query)} queries but {len(req.prompts)} prompts")
        problems, steps = [], []
        for i, q in enumerate(req.query):
            try:
                p, s = split_query(q, None if req.prompts is None else req.prompts[i],
                                   config.step_rule)
            except PrmkitError as e:
                raise RequestError(422, f"query {i}: {e}") from None
            problems.append(p)
            steps.append(s)
        step_scores = await scorer.score(problems, steps)
        body = rewards_from_scores(step_scores, config.reward, config.max_steps)
        body["step_scores"] = step_scores
        if req.return_steps:
            body["problems"], body["steps"] = problems, steps
        return body

    return app


# ---------------------------------------------------------------------------------------------
# running it


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), not yet listening; a clear error when it cannot be."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it every keep-alive response waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise PrmkitError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def uvicorn_server(app: FastAPI, config: ServeConfig, log_level: str = "warning",
                   access_log: bool = False) -> Any:
    import uvicorn

    return uvicorn.Server(uvicorn.Config(  # WatchDisconnect: a client that leaves costs nothing
        WatchDisconnect(app), log_level=log_level, access_log=access_log, lifespan="on",
        timeout_graceful_shutdown=config.graceful_timeout or None,
        http=protocol(config.max_header_bytes),    # 431 past the limit, not a reset
        h11_max_incomplete_event_size=config.max_header_bytes))


class ServerThread:
    """Run an app with uvicorn in a background thread (tests, benchmarks, notebooks)::

        with ServerThread(create_app(prm, ServeConfig(port=0), "m", "f")) as server:
            RemotePRM(server.url).score(...)

    ``port=0`` picks a free port; :attr:`url` tells which. :meth:`stop` is the graceful
    shutdown: requests in flight finish first.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                 config: ServeConfig | None = None):
        self.config = config or ServeConfig(host="127.0.0.1", port=0)
        self.sock = bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn_server(app, self.config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="prmkit-serve", daemon=True)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise PrmkitError(f"the server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float | None = 60.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
