"""How an exception that no route turned into an answer is answered and logged (guard.py).

    GlassformerError (the library refused an input)     400 with its one line
    MemoryError                                         503: retry, or send less
    anything else: a fault of the server itself         500; the log gets one line

The log line names the exception, its message (cut at MAX_NOTE_CHARS) and the innermost frame:
where to look, in one line rather than a traceback (the engine's faults are logged the same way).
"""
from __future__ import annotations

import traceback

from glassformer.errors import GlassformerError
from glassformer.serve.protocol import ApiError

MAX_NOTE_CHARS = 300    # an exception's message in the log is cut here (it may echo a body)


def fault_line(err: BaseException) -> str:
    """One line for the log: the exception, its message (cut) and the innermost frame."""
    message = " ".join(str(err).split())
    if len(message) > MAX_NOTE_CHARS:
        message = message[:MAX_NOTE_CHARS - 3] + "..."
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" \
        if frames else ""
    return f"{type(err).__name__}: {message}{where}"


def answer_for(err: Exception) -> tuple[ApiError, str]:
    """The client's error and the log's note for an exception no route turned into one."""
    if isinstance(err, GlassformerError):
        return ApiError(400, str(err), code="invalid_request"), str(err)
    if isinstance(err, MemoryError):
        return (ApiError(503, "the server ran out of memory on this request; retry later or "
                         "send a smaller one", kind="server_error", code="out_of_memory",
                         headers={"Retry-After": "1"}),
                f"out of memory: {fault_line(err)}")
    return (ApiError(500, "the server failed on this request (its log has the details)",
                     kind="server_error"),
            f"server fault: {fault_line(err)}")
