"""The Starlette app of `glassformer serve`: OpenAI's endpoints over one model.

    GET  /                      the chat page (page.py)
    GET  /health                {"status": "ok"}
    GET  /v1/models             the one model served (chat_template: whether it can chat)
    POST /v1/completions        a causal model continues text          (engine.py)
                                (echo: the prompt's own log-probabilities, echo.py)
    POST /v1/chat/completions   its chat template, then the same       (tasks/chat.py's rules)
                                (a reasoning model's thinking apart: reasoning.py)
    POST /v1/embeddings         a sentence encoder's vectors           (tasks/embed.py)

A request is checked before it reaches the engine: its body (body.py: at most MAX_BODY_BYTES,
nested at most MAX_DEPTH deep, short numbers, JSON, an object), the key when the server has one
(401), the model's name (404), its fields (400, naming the field), its prompt against the context
(400), the waiting list (429 with Retry-After). Every error has OpenAI's shape; whatever no
route turned into one is sorted by faults.py's Guard (a server fault is a 500 whose body says
only that, and one line in the log). `RequestLog` prints one line per request on stderr.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
import time
from dataclasses import replace

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.routing import Route

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import RowConstraint
from glassformer.models.family import CAUSAL, ENCODER
from glassformer.serve import protocol, replies
from glassformer.serve.body import read_json
from glassformer.serve.embeddings import embedding_request
from glassformer.serve.engine import QueueFull
from glassformer.serve.guard import Guard
from glassformer.serve.page import chat_page
from glassformer.serve.echo import (echo_body, echoed, first_tokens, score_prompts,
                                    with_echoes)
from glassformer.serve.prompts import chat_prompt, text_prompts
from glassformer.serve.reasoning import thinking_of
from glassformer.serve.sequence import Sequence, Settings
from glassformer.serve.structured import Grammars, response_schema
from glassformer.serve.tools import tool_messages, tool_plan
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.tasks.embed import embed

RETRY_AFTER_S = 1                  # what a 429 asks the client to wait


class Served:
    """What the routes share: the model, its name, the engine (causal models), the key."""

    def __init__(self, model, name: str, engine=None, api_key: str | None = None,
                 embed_max_length: int = 256, template_budget=None,
                 reasoning_budget: int | None = None):
        self.model, self.name, self.engine, self.api_key = model, name, engine, api_key
        self.embed_max_length = embed_max_length
        self.template_budget = template_budget   # chat templates' render limits (None: default)
        self.grammars = Grammars(model)          # response_format's tables (structured.py)
        self.thinking = (thinking_of(model, template_budget, reasoning_budget)   # <think>
                         if model.tokenizer is not None and model.family.kind == CAUSAL
                         else None)                                        # (reasoning.py)


def create_app(served: Served) -> Starlette:
    """The app; its routes find `served` on app.state."""
    routes = [Route("/", page), Route("/health", health), Route("/v1/models", models),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/embeddings", embeddings, methods=["POST"])]
    handlers = {HTTPException: http_error, protocol.ApiError: api_error}
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan,
                    middleware=[Middleware(Guard)])
    app.state.served = served
    return app


@contextlib.asynccontextmanager
async def lifespan(app):
    engine = app.state.served.engine
    if engine is not None:
        engine.start()
    yield
    if engine is not None:   # uvicorn has drained the requests in flight
        await run_in_threadpool(engine.stop)


# --- errors ---------------------------------------------------------------------------------

async def api_error(request, err: protocol.ApiError):
    request.scope.setdefault("glassformer", {})["error"] = err.message
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


async def http_error(request, err: HTTPException):
    code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code)
    message = (f"no route {request.method} {request.url.path}" if err.status_code in (404, 405)
               else str(err.detail))
    return await api_error(request, protocol.ApiError(err.status_code, message, code=code))


def check_key(request, served: Served) -> None:
    if served.api_key is None:
        return
    given = request.headers.get("authorization", "")
    if not secrets.compare_digest(given.encode(), f"Bearer {served.api_key}".encode()):
        raise protocol.ApiError(401, "missing or wrong API key: send the header "
                                "'Authorization: Bearer KEY' with the server's --api-key",
                                code="invalid_api_key")


def check_model(body: dict, served: Served) -> None:
    name = body.get("model")
    if name is not None and name != served.name:
        raise protocol.ApiError(404, f"the model '{name}' does not exist here; this server "
                                f"runs '{served.name}' (GET /v1/models)", param="model",
                                code="model_not_found")


def check_kind(served: Served, kind: str, what: str) -> None:
    if served.model.family.kind != kind:
        use = ("/v1/embeddings" if served.model.family.kind == ENCODER
               else "/v1/completions or /v1/chat/completions")
        raise protocol.ApiError(400, f"{what} need a {kind} model; this server runs "
                                f"'{served.name}' ({served.model.arch}): use {use}")


# --- routes ---------------------------------------------------------------------------------

async def page(request):
    served = request.app.state.served
    return HTMLResponse(chat_page(served.name, has_chat_template(served)))


def has_chat_template(served: Served) -> bool:
    """Whether the model can chat: a causal model whose tokenizer has a template (or ChatML's
    tokens); the page opens in completion mode otherwise."""
    if served.model.family.kind != CAUSAL:
        return True
    try:
        chat_template_of(served.model.tokenizer, served.template_budget)
    except GlassformerError:
        return False
    return True


async def health(request):
    return JSONResponse({"status": "ok"})


async def models(request):
    served = request.app.state.served
    check_key(request, served)
    return JSONResponse({"object": "list", "data": [
        {"id": served.name, "object": "model", "created": 0, "owned_by": "glassformer",
         "chat_template": has_chat_template(served)}]})


async def embeddings(request):
    served = request.app.state.served
    check_key(request, served)
    body = await read_json(request)
    check_model(body, served)
    check_kind(served, ENCODER, "embeddings")
    asked = await run_in_threadpool(embedding_request, served.model, body,
                                    served.embed_max_length)
    vectors = await run_in_threadpool(embed, served.model, asked.texts,
                                      max_length=asked.max_length)
    note(request, prompt=sum(asked.lengths))
    return JSONResponse(protocol.embedding_body(vectors, asked.encoding, served.name,
                                                sum(asked.lengths)))


async def completions(request):
    return await generate(request, chat=False)


async def chat_completions(request):
    return await generate(request, chat=True)


async def generate(request, *, chat: bool):
    served = request.app.state.served
    check_key(request, served)
    body = await read_json(request)
    check_model(body, served)
    check_kind(served, CAUSAL, "completions")
    settings, n = protocol.settings(body, chat=chat)
    schema = await run_in_threadpool(response_schema, body)     # checked: a 400 names a fault
    echo = not chat and protocol.flag(body, "echo")
    stream = protocol.flag(body, "stream")
    if echo and stream:
        raise protocol.ApiError(400, "'echo' is not streamed by this server: send it with "
                                "'stream': false", param="echo")
    plan = await run_in_threadpool(chat_tools, served, body) if chat else None
    if plan is not None:                   # tools: their messages, and (generic) the reply's
        body = {**body, "messages": tool_messages(body.get("messages"), plan)}   # schema
        schema = plan.schema if plan.schema is not None else schema
    try:
        if chat:
            prompt, stop_ids = await run_in_threadpool(
                chat_prompt, served.model, body, budget=served.template_budget,
                tools=plan.tools if plan is not None and plan.native else None)
            prompts = [prompt]
        else:
            prompts, stop_ids = await run_in_threadpool(text_prompts, served.model, body)
    except GlassformerError as err:
        raise protocol.ApiError(400, str(err), code="invalid_prompt") from None
    if echo and protocol.max_tokens(body, 1, low=0) == 0:
        return await echo_only(request, served, prompts, settings.logprobs, n)
    field = "messages" if chat else "prompt"
    protocol.check_bias(settings.sampling, served.engine.padding or served.model.cfg.vocab_size)
    budgets = [check_length(len(p), settings.max_tokens, served.engine.max_len, field)
               for p in prompts]
    if len(prompts) * n > served.engine.max_queue:
        raise protocol.ApiError(400, f"{len(prompts)} prompts x n={n} is past this server's "
                                f"waiting list of {served.engine.max_queue} (--max-queue)",
                                param="prompt")
    if echo:   # the stop id's log-probability is listed, as OpenAI and vLLM list it
        settings = replace(settings, logprob_of_stop=True)
    one_forward = echo and schema is None and settings.max_tokens == 1   # echo.first_tokens
    queue: asyncio.Queue = asyncio.Queue()
    sink = replies.event_sink(asyncio.get_running_loop(), queue)
    sequences = [Sequence(p * n + i, prompt, seeded(replace(settings, max_tokens=budget), i),
                          frozenset(stop_ids), served.model.tokenizer, sink)
                 for p, (prompt, budget) in enumerate(zip(prompts, budgets)) for i in range(n)]
    if schema is not None:                 # every row of the request writes that value
        table = await run_in_threadpool(served.grammars.table, schema, stop_ids)
        for seq in sequences:
            seq.constraint = RowConstraint.start(table)
    reasoning = chat and served.thinking is not None
    for seq in sequences if reasoning else []:   # thinking apart from the answer
        seq.reasoning = served.thinking.start(served.model.tokenizer, seq.prompt)
    prefix = "chatcmpl" if chat else "cmpl"
    reply = replies.Request(protocol.new_id(prefix), served.name, chat, sequences, queue,
                            protocol.include_usage(body) if stream else False, per_prompt=n,
                            tools=plan, reasoning=reasoning)
    scored = None
    try:
        if one_forward:
            began = time.perf_counter()
            scored = await run_in_threadpool(score_prompts, served.model, prompts,
                                             settings.logprobs)
            await run_in_threadpool(first_tokens, served.engine, sequences, scored.last, n,
                                    began)
        else:
            served.engine.submit(sequences)
    except QueueFull as err:
        raise protocol.ApiError(429, str(err), code="queue_full", kind="rate_limit_error",
                                headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    record = request.scope.setdefault("glassformer", {})
    record["id"] = reply.request_id
    if stream:
        return StreamingResponse(replies.stream(reply, record), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    try:
        answer, usage = await replies.collect(reply, request.is_disconnected)
    except replies.Failed as err:
        raise RuntimeError(f"the engine failed: {err}") from None
    record["usage"] = usage
    if scored is not None:
        answer["choices"] = with_echoes(served.model, prompts, scored.infos, n, answer["choices"])
    elif echo:
        answer["choices"] = await run_in_threadpool(
            echoed, served.model, prompts, settings.logprobs, n, answer["choices"])
    return JSONResponse(answer)


async def echo_only(request, served: Served, prompts: list[list[int]], logprobs: int | None,
                    n: int):
    """echo with max_tokens 0: the prompts back, scored by one forward; nothing generated."""
    body, usage = await run_in_threadpool(echo_body, served.model, served.name, prompts,
                                          logprobs, n, served.engine.max_len)
    note(request, usage=usage, id=body["id"])
    return JSONResponse(body)


def chat_tools(served: Served, body: dict):
    """The request's ToolPlan (None without tools); a model without a chat template has none."""
    if body.get("tools") is None and body.get("tool_choice") is None:
        return None
    try:
        source = chat_template_of(served.model.tokenizer, served.template_budget).source
    except GlassformerError as err:
        raise protocol.ApiError(400, str(err), code="invalid_prompt") from None
    return tool_plan(body, source)


def seeded(settings: Settings, index: int) -> Settings:
    """Choice i of a seeded request samples from seed + i (all n would be alike otherwise)."""
    return replace(settings, seed=None if settings.seed is None else settings.seed + index)


def check_length(prompt_tokens: int, max_tokens: int, context: int, field: str) -> int:
    """max_tokens checked against the context (0: all the context leaves)."""
    room = context - prompt_tokens
    if room < 1:
        raise protocol.ApiError(400, f"the prompt is {prompt_tokens} tokens, past this "
                                f"server's context of {context} tokens (prompt and reply "
                                "together); send a shorter prompt", param=field,
                                code="context_length_exceeded")
    if max_tokens > room:
        raise protocol.ApiError(400, f"max_tokens={max_tokens} with a prompt of "
                                f"{prompt_tokens} tokens is past the context of {context} "
                                f"tokens: ask for at most {room}", param="max_tokens",
                                code="context_length_exceeded")
    return max_tokens or room


def note(request, **fields) -> None:
    request.scope.setdefault("glassformer", {}).update(fields)


class RequestLog:
    """ASGI middleware: one line per request on stderr (id, status, tokens in/out, time,
    tokens/s), written when the response has been sent."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = {"code": 0}

        async def send_noting_status(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            seconds = time.perf_counter() - start
            print(log_line(scope, status["code"], seconds), file=sys.stderr, flush=True)


def log_line(scope, status: int, seconds: float) -> str:
    record = scope.get("glassformer", {})
    parts = [record.get("id", "-"), f"{scope['method']} {scope['path']}",
             str(status) if status else "-"]   # no status: nothing was sent (the client left)
    usage = record.get("usage")
    if usage is not None:
        parts.append(f"in {usage.prompt_tokens} (cached {usage.cached_tokens}) "
                     f"out {usage.completion_tokens}")
    if "prompt" in record:
        parts.append(f"in {record['prompt']}")
    parts.append(f"{seconds:.2f} s")
    if usage is not None and seconds > 0:
        parts.append(f"{usage.completion_tokens / seconds:.1f} tokens/s")
    if "error" in record:
        parts.append(record["error"])
    return "glassformer serve: " + "  ".join(parts)
