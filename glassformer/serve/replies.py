"""A request's replies, from the engine's events to OpenAI's bodies: whole, or streamed as
server-sent events.

    engine thread                          event loop (this file)
    Sequence.on_event(event) --call_soon_threadsafe--> asyncio.Queue --> JSON body / SSE chunks

A stream is `data: {chunk}` lines ending with `data: [DONE]`; with
`stream_options.include_usage` the last chunk before it has no choices and the usage. When the
client leaves (Starlette cancels the stream's task, or `is_disconnected` while a whole reply is
being collected) every sequence of the request is marked cancelled, and the engine frees its row
before its next step.
"""
from __future__ import annotations

import asyncio
import json
from functools import partial
from typing import AsyncIterator, NamedTuple

from glassformer.serve.protocol import (chat_logprobs, completion_logprobs, envelope,
                                        usage_body)
from glassformer.serve.sequence import Delta, Finished, Usage
from glassformer.serve.tools import read_reply

POLL_S = 0.25   # how often a request collecting a whole reply checks that its client is there


class Request(NamedTuple):
    """What a reply needs of its request."""
    request_id: str
    model: str
    chat: bool
    sequences: list          # the n Sequences, choice i at index i
    queue: asyncio.Queue     # their events
    include_usage: bool = False
    per_prompt: int = 1      # n: choices p*n .. p*n+n-1 continue prompt p
    tools: object = None     # the request's ToolPlan (tools.py): replies may be tool calls
    reasoning: bool = False  # replies' thinking is split off (reasoning.py): message.reasoning


def event_sink(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue):
    """The on_event of a sequence: puts events on `queue` from the engine's thread."""
    return partial(loop.call_soon_threadsafe, queue.put_nowait)


def cancel(request: Request) -> None:
    for seq in request.sequences:
        seq.cancelled = True


def total_usage(usages: list[Usage], per_prompt: int = 1) -> Usage:
    """One request's usage: each prompt once (the first of its per_prompt choices), every
    choice's completion tokens."""
    firsts = usages[::per_prompt]
    return Usage(sum(u.prompt_tokens for u in firsts), sum(u.completion_tokens for u in usages),
                 sum(u.cached_tokens for u in firsts))


class Failed(Exception):
    """The engine could not finish a reply (a server fault, HTTP 500)."""


async def collect(request: Request, disconnected) -> tuple[dict, Usage]:
    """The whole response body once every choice is finished."""
    n = len(request.sequences)
    texts, tokens = [[] for _ in range(n)], [[] for _ in range(n)]
    thoughts = [[] for _ in range(n)]
    finished: dict[int, Finished] = {}
    try:
        while len(finished) < n:
            try:
                event = await asyncio.wait_for(request.queue.get(), POLL_S)
            except asyncio.TimeoutError:
                if await disconnected():
                    cancel(request)
                    raise asyncio.CancelledError from None
                continue
            if isinstance(event, Delta):
                (thoughts if event.reasoning else texts)[event.index].append(event.text)
                tokens[event.index].extend(event.tokens)
            else:
                finished[event.index] = event
    finally:
        if len(finished) < n:
            cancel(request)
    errors = [f.message for f in finished.values() if f.reason == "error"]
    if errors:
        raise Failed(errors[0])
    usage = total_usage([finished[i].usage for i in range(n)], request.per_prompt)
    choices = [whole_choice(request, i, "".join(texts[i]), tokens[i], finished[i].reason)
               for i in range(n)]
    if request.reasoning:   # as vLLM: null when the reply did not think
        for choice, thought in zip(choices, thoughts):
            choice["message"]["reasoning"] = "".join(thought) or None
    kind = "chat.completion" if request.chat else "text_completion"
    return {**envelope(kind, request.request_id, request.model), "choices": choices,
            "usage": usage_body(usage)}, usage


def whole_choice(request: Request, index: int, text: str, tokens: list, reason: str) -> dict:
    wants = request.sequences[index].settings.logprobs is not None
    if request.chat:
        message = {"role": "assistant", "content": text}
        if request.tools is not None:
            read = read_reply(text, request.tools, reason)
            message["content"] = read.content
            if read.calls:
                message["tool_calls"], reason = read.calls, "tool_calls"
        return {"index": index, "message": message,
                "logprobs": chat_logprobs(tokens) if wants else None, "finish_reason": reason}
    return {"index": index, "text": text,
            "logprobs": completion_logprobs(tokens, 0) if wants else None,
            "finish_reason": reason}


def sse(body) -> str:
    data = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return f"data: {data}\n\n"


async def stream(request: Request, record: dict) -> AsyncIterator[str]:
    """Server-sent events of every choice as it grows; `record` gets the usage at the end."""
    n = len(request.sequences)
    kind = "chat.completion.chunk" if request.chat else "text_completion"
    head = envelope(kind, request.request_id, request.model)
    extra = {"usage": None} if request.include_usage else {}
    offsets = [0] * n
    usages: dict[int, Usage] = {}
    held = [[] for _ in range(n)]          # tools: a reply is read whole, then streamed
    try:
        if request.chat:
            for index in range(n):
                opening = {"index": index, "delta": {"role": "assistant", "content": ""},
                           "logprobs": None, "finish_reason": None}
                yield sse({**head, "choices": [opening], **extra})
        while len(usages) < n:
            event = await request.queue.get()
            if isinstance(event, Finished) and event.reason == "error":
                yield sse({"error": {"message": event.message, "type": "server_error",
                                     "param": None, "code": None}})
                break
            if isinstance(event, Finished):
                usages[event.index] = event.usage
            if request.tools is not None and isinstance(event, Delta) and not event.reasoning:
                held[event.index].append(event.text)
                continue
            if request.tools is not None:
                for choice in tool_chunks(request, event, "".join(held[event.index])):
                    yield sse({**head, "choices": [choice], **extra})
                continue
            choice = chunk_choice(request, event, offsets)
            yield sse({**head, "choices": [choice], **extra})
        if request.include_usage and len(usages) == n:
            usage = total_usage([usages[i] for i in range(n)], request.per_prompt)
            yield sse({**head, "choices": [], "usage": usage_body(usage)})
        yield sse("[DONE]")
    finally:  # also when the client left and Starlette cancelled this stream
        record["usage"] = total_usage([seq.usage() for seq in request.sequences],
                                      request.per_prompt)
        if len(usages) < n:
            record["error"] = "the client left: its rows were freed"
        cancel(request)


def chunk_choice(request: Request, event, offsets: list[int]) -> dict:
    """One chunk's choice: a Delta's text (and logprobs), or the finish reason."""
    index = event.index
    if isinstance(event, Finished):
        text, tokens, reason = "", [], event.reason
    else:
        text, tokens, reason = event.text, event.tokens, None
    wants = request.sequences[index].settings.logprobs is not None and tokens
    if request.chat:
        field = "reasoning" if isinstance(event, Delta) and event.reasoning else "content"
        delta = {field: text} if reason is None else {}
        return {"index": index, "delta": delta,
                "logprobs": chat_logprobs(tokens) if wants else None, "finish_reason": reason}
    logprobs = completion_logprobs(tokens, offsets[index]) if wants else None
    offsets[index] += len(text)
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}


def tool_chunks(request: Request, finished: Finished, text: str) -> list[dict]:
    """A tool-using reply's chunks once it is whole: its call as delta.tool_calls (the name,
    then the arguments), or its answer as delta.content; then the finish reason."""
    index, reason = finished.index, finished.reason
    read = read_reply(text, request.tools, reason) if reason in ("stop", "length") else None
    chunks = []
    if read is not None and read.calls:
        for number, call in enumerate(read.calls):
            opening = {"index": number, "id": call["id"], "type": "function",
                       "function": {"name": call["function"]["name"], "arguments": ""}}
            arguments = {"index": number, "function": {"arguments": call["function"][
                "arguments"]}}
            chunks += [{"index": index, "delta": {"tool_calls": [opening]}, "logprobs": None,
                        "finish_reason": None},
                       {"index": index, "delta": {"tool_calls": [arguments]}, "logprobs": None,
                        "finish_reason": None}]
        reason = "tool_calls"
    elif read is not None and read.content:
        chunks.append({"index": index, "delta": {"content": read.content}, "logprobs": None,
                       "finish_reason": None})
    chunks.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": reason})
    return chunks
