"""Noticing that a client left, so the server drops its work instead of computing it.

:class:`WatchDisconnect` is ASGI middleware: once a request's body has been read, a task waits
for the server's ``http.disconnect`` message and sets the request's "gone" event (messages the
app asks for after that are passed on unchanged). :func:`wait_answer` waits for a batcher job's
answer or for that event, whichever comes first; when the client has gone it tells the batcher
(:meth:`prmkit.serve.batcher.Batcher.cancel`, so the job costs nothing after the piece under
way) and raises the caller's error (the server answers 499, which no one reads). A client that
leaves is logged as one line, never as an error with a traceback.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from concurrent.futures import Future
from typing import Any, Callable

log = logging.getLogger("prmkit")

_gone: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "prmkit_client_gone", default=None)


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


class WatchDisconnect:
    """ASGI middleware that sets the request's "gone" event when its client disconnects."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        gone = asyncio.Event()
        later: asyncio.Queue = asyncio.Queue()
        watcher: list[asyncio.Task] = []

        async def watch() -> None:
            while True:
                message = await receive()
                await later.put(message)
                if message["type"] == "http.disconnect":
                    gone.set()
                    return

        async def wrapped() -> Any:
            if watcher:  # the body is read: the watcher owns the server's messages
                return await later.get()
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                watcher.append(asyncio.create_task(watch()))
            return message

        token = _gone.set(gone)
        try:
            await self.app(scope, wrapped, send)
        finally:
            _gone.reset(token)
            for task in watcher:
                task.cancel()


async def wait_answer(future: Future, cancel: Callable[[Future], None], what: str,
                      error: Callable[[], Exception] = ClientGone) -> Any:
    """The result of ``future``, or the exception ``error()`` (after ``cancel(future)``) as
    soon as the client of the request being served disconnects."""
    gone = _gone.get()
    answer = asyncio.wrap_future(future)
    if gone is None:
        return await answer
    if gone.is_set():
        watch = None
    else:
        watch = asyncio.ensure_future(gone.wait())
        await asyncio.wait({answer, watch}, return_when=asyncio.FIRST_COMPLETED)
    if answer.done():
        if watch is not None:
            watch.cancel()
        return answer.result()
    cancel(future)
    answer.cancel()
    log.warning("client disconnected before its answer; dropped %s", what)
    raise error()


async def body_chunks(request: Any, error: Callable[[], Exception] = ClientGone) -> Any:
    """The chunks of a request's body; the exception ``error()`` (and one log line, no
    traceback) when the client disconnects before it has sent all of it."""
    from starlette.requests import ClientDisconnect

    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        log.warning("client disconnected while sending its request")
        raise error() from None
