"""Request headers past ``--max-header-bytes`` are answered with 431, never a reset connection.

h11 (under uvicorn) stops reading a request whose line and headers outgrow its buffer limit and
raises an error whose hint is 431; uvicorn answers every such error with 400 and closes at once,
so a client still sending its headers sees the connection reset instead of an answer.
:func:`protocol` is uvicorn's h11 protocol with that limit set to ``max_header_bytes``: such a
request gets 431 with the server's JSON error, and what the client still sends is read and
dropped (for at most :data:`DRAIN_SECONDS`) before the connection closes. A head that arrives
whole in one read gets past h11's check; :class:`HeaderLimit` (ASGI) answers it 431 too, so the
limit holds for every request.
"""

from __future__ import annotations

import json
import sys
from typing import Any

DRAIN_SECONDS = 10.0   # how long the rest of a refused request is read before the connection closes


def refusal(limit: int) -> bytes:
    """The JSON body of a 431 (the server's error form)."""
    return json.dumps({"error": {
        "message": f"the request line and headers are over {limit} bytes, the most this server "
                   f"takes", "type": "headers_too_large"}}).encode()


def protocol(max_header_bytes: int) -> type:
    """uvicorn's h11 protocol class, answering headers over ``max_header_bytes`` with 431 (set
    ``h11_max_incomplete_event_size`` to the same limit in uvicorn's config)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        draining = False

        def send_400_response(self, msg: str) -> None:
            # called inside uvicorn's ``except h11.RemoteProtocolError``: the error is at hand
            error = sys.exc_info()[1]
            if not (isinstance(error, h11.RemoteProtocolError) and error.error_status_hint == 431):
                super().send_400_response(msg)
                return
            body = refusal(max_header_bytes)
            head = h11.Response(status_code=431, reason=b"Request Header Fields Too Large",
                                headers=[(b"content-type", b"application/json"),
                                         (b"content-length", str(len(body)).encode()),
                                         (b"connection", b"close")])
            for event in (head, h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.draining = True   # read the rest, so closing does not reset the answer
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(DRAIN_SECONDS, self.transport.close)

        def data_received(self, data: bytes) -> None:
            if not self.draining:
                super().data_received(data)

        def eof_received(self) -> None:
            if self.draining:
                self.transport.close()

    return Protocol


class HeaderLimit:
    """ASGI middleware: 431 for a request whose line and headers are over ``limit`` bytes (one
    that got past h11's check by arriving in a single read)."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            size = (len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
                    + sum(len(k) + len(v) + 4 for k, v in scope.get("headers") or []))
            if size > self.limit:
                body = refusal(self.limit)
                await send({"type": "http.response.start", "status": 431, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
