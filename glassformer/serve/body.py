"""A request's body read and parsed within limits: every way a body can fail is an ApiError.

    the socket --read_body--> at most MAX_BODY_BYTES (413), or the client left (ClientGone)
               --parse_body--> nested at most MAX_DEPTH deep, numbers of at most
                               MAX_NUMBER_CHARS characters, valid JSON, an object (each a 400)

Python's `json.loads` recurses once per nesting level (a 10,000-deep `[[[...]]]` raises
RecursionError) and turns every integer into an `int` (past 4,300 digits Python refuses to):
both would be server faults. So the depth is measured on the bytes before parsing (a bracket
inside a string does not nest), and each number's length is checked as the parser meets it.
OpenAI's requests nest a few levels and their numbers are short: the limits refuse only what
no client sends by mistake.
"""
from __future__ import annotations

import json

import numpy as np
from starlette.requests import ClientDisconnect

from glassformer.serve.protocol import ApiError

MAX_BODY_BYTES = 4 * 1024 * 1024   # a request body past this is refused (413) unread
MAX_DEPTH = 64                     # arrays and objects nested deeper are refused (400)
MAX_NUMBER_CHARS = 100             # a number written with more characters is refused (400)
MAX_LENGTH_DIGITS = 16             # a Content-Length with more digits is over MAX_BODY_BYTES

OPENING = np.frombuffer(b"[{", dtype=np.uint8)
BRACKETS = np.frombuffer(b"[{]}", dtype=np.uint8)
QUOTE, BACKSLASH = ord('"'), ord("\\")


class ClientGone(Exception):
    """The client closed its connection before sending the whole body: nobody to answer."""


def too_large() -> ApiError:
    return ApiError(413, f"the request body is over {MAX_BODY_BYTES} bytes",
                    code="request_too_large")


async def read_body(request) -> bytes:
    """The raw body: 413 past MAX_BODY_BYTES (unread when its declared length says so),
    ClientGone when the client leaves while sending it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and (len(declared) > MAX_LENGTH_DIGITS
                               or int(declared) > MAX_BODY_BYTES):
        raise too_large()
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise too_large()
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(chunks)


def nesting_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in a JSON text, brackets inside strings not counted.

    Vectorised over the bytes (a Python loop over 4 MiB would hold the event loop for seconds):
    a quote ends or starts a string unless an odd run of backslashes precedes it, and a bracket
    is inside a string when an odd number of such quotes precede it.
    """
    codes = np.frombuffer(raw, dtype=np.uint8)                                  # (N,)
    brackets = np.flatnonzero(np.isin(codes, BRACKETS))                         # (M,)
    quotes = np.flatnonzero(codes == QUOTE)                                     # (Q,)
    if len(quotes) and BACKSLASH in codes:
        where = np.arange(len(codes), dtype=np.int64)
        last_plain = np.maximum.accumulate(np.where(codes != BACKSLASH, where, -1))  # (N,)
        before = quotes - 1 - last_plain[np.maximum(quotes - 1, 0)]   # backslashes before each
        quotes = quotes[(quotes == 0) | (before % 2 == 0)]
    if len(quotes):
        brackets = brackets[np.searchsorted(quotes, brackets) % 2 == 0]        # (M',) outside
    step = np.isin(codes[brackets], OPENING).astype(np.int8) * 2 - 1            # (M',) +1 / -1
    return int(np.cumsum(step, dtype=np.int32).max(initial=0))


def short_number(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise ApiError(400, f"the request body has a number written with {len(text)} "
                       f"characters; this server reads numbers of at most {MAX_NUMBER_CHARS}",
                       code="number_too_long")
    return text


def parse_body(raw: bytes) -> dict:
    """The body as a JSON object, or an ApiError (400) naming the limit or the fault."""
    depth = nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise ApiError(400, f"the request body nests arrays and objects {depth} levels deep; "
                       f"this server reads at most {MAX_DEPTH}", code="nesting_too_deep")
    try:
        body = json.loads(raw, parse_int=lambda text: int(short_number(text)),
                          parse_float=lambda text: float(short_number(text)))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON: {err}",
                       code="invalid_json") from None
    except RecursionError:   # deeper than measured: a UTF-16 body whose bytes fooled the count
        raise ApiError(400, f"the request body nests arrays and objects deeper than this "
                       f"server reads ({MAX_DEPTH} levels)", code="nesting_too_deep") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return body


async def read_json(request) -> dict:
    """The body of a request as a JSON object, within the limits above."""
    return parse_body(await read_body(request))
