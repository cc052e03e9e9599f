"""The last word on every request: no exception leaves the app, no traceback reaches the log.

    Starlette's ServerErrorMiddleware        (never reached: Guard answers first)
      Guard (this file)                      any exception -> OpenAI's error shape, one log note
        ExceptionMiddleware                  ApiError and HTTPException -> their own status
          the routes

Starlette's own last resort answers a plain-text 500 and raises the exception again for uvicorn
to print ("Exception in ASGI application" and a traceback), so a fault would be reported twice
and a client leaving mid-upload would look like one. Guard sorts what reaches it:

    the client left while sending its body     nothing to answer; noted quietly
      (ClientGone, Starlette's ClientDisconnect)
    anything else                              faults.py's answer_for: 400 (GlassformerError),
                                               503 (out of memory) or 500 (a server fault)

Its notes go on the request's record (`scope["glassformer"]`), which `RequestLog` prints as the
request's one line: each fault is logged once, with where it was raised (`fault_line`).
"""
from __future__ import annotations

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse

from glassformer.serve.body import ClientGone
from glassformer.serve.faults import answer_for


def note(scope, **fields) -> None:
    scope.setdefault("glassformer", {}).update(fields)


class Guard:
    """ASGI middleware (inside Starlette's ServerErrorMiddleware): any exception of a request
    becomes OpenAI's error shape and one note in its log line, never a traceback."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        sent = {"start": False, "end": False}

        async def send_noting(message):
            if message["type"] == "http.response.start":
                sent["start"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                sent["end"] = True
            await send(message)

        try:
            await self.app(scope, receive, send_noting)
        except (ClientGone, ClientDisconnect):
            note(scope, error="the client left before sending its whole body")
        except Exception as err:   # the catch-all: sorted by answer_for
            error, line = answer_for(err)
            note(scope, error=line)
            if not sent["start"]:
                await JSONResponse(error.body(), status_code=error.status,
                                   headers=error.headers)(scope, receive, send)
            elif not sent["end"]:   # a stream already under way: end it where it is
                await send({"type": "http.response.body", "body": b"", "more_body": False})
