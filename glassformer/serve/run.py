"""serve(): build the engine and the app for a loaded model and run them under uvicorn.

The KV cache of every row is allocated once, before the port opens, so its size is checked first
(rows.py `RowCache.bytes_for`: the rows' cache as `Model.cache_bytes` counts it, which asks
blocks/kv_cache.py `KVCache.bytes_for`, so MLA's latent cache counts its own two widths; each
row's column mask and ids; and a prefill of every row at once beside them), refused past half
the machine's memory in one line naming the flags that shrink it, before any of it exists.
Every request passes metrics.py's MetricsMiddleware (counted; GET /metrics answered there).
uvicorn handles Ctrl-C: it stops taking connections, lets the requests in flight finish (at most
DRAIN_S), then the app's lifespan stops the engine, and the process exits with status 0.
"""
from __future__ import annotations

import socket
import sys

from glassformer.errors import GlassformerError
from glassformer.memory import check_memory, memory_budget
from glassformer.models.family import CAUSAL, ENCODER
from glassformer.serve.budget import RATIO, PrefillBudget
from glassformer.serve.engine import Engine
from glassformer.serve.metrics import Metrics, MetricsMiddleware
from glassformer.serve.rows import RowCache

DRAIN_S = 30       # Ctrl-C waits this long for replies in flight before cutting them
BACKLOG = 2048     # connections waiting to be accepted (uvicorn's default)


def make_engine(model, *, max_batch: int, max_queue: int, context: int | None,
                prefill_chunk: int | None = 0, prefill_budget: float = RATIO,
                batch_invariant: bool = False, mixed_step: bool = True) -> Engine:
    """The engine of a causal model, its cache checked against memory_budget(); prefill_chunk
    None sizes each chunk to prefill_budget decode steps (budget.py); mixed_step: chunks ride
    in the decode step where the model allows (mixed.py), else each is a forward apart."""
    if batch_invariant and prefill_chunk is None:
        raise GlassformerError("--batch-invariant needs a fixed --prefill-chunk (a count): 'auto' "
                               "sizes chunks by the load, and a prompt cut where the load says "
                               "is not computed as it is alone")
    context = min(context or model.context_len, model.context_len)
    check_memory(RowCache.bytes_for(model, max_batch, context),
                 f"the KV cache of --max-batch {max_batch} rows x {context} positions (and a "
                 "prefill of every row at once)", "lower --max-batch or --context",
                 budget=memory_budget())
    budget = PrefillBudget.for_model(model, prefill_budget) if prefill_chunk is None else None
    return Engine(model, max_batch=max_batch, max_queue=max_queue, max_len=context,
                  prefill_chunk=prefill_chunk or 0, prefill_budget=budget,
                  batch_invariant=batch_invariant, mixed=mixed_step)


def open_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts: a port in use is one line. It
    listens at once, so a client that connects as soon as the first log line names the address
    waits in the backlog for uvicorn rather than being refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as err:
        sock.close()
        raise GlassformerError(f"cannot listen on {host}:{port}: {err.strerror}; pick another "
                               "--port or --host") from None
    return sock


def serve(model, name: str, *, host: str, port: int, api_key: str | None, max_batch: int,
          max_queue: int, context: int | None, embed_max_length: int,
          template_budget=None, prefill_chunk: int | None = 0, prefill_budget: float = RATIO,
          reasoning_budget: int | None = None, batch_invariant: bool = False,
          mixed_step: bool = True) -> int:
    try:
        import uvicorn

        from glassformer.serve.app import RequestLog, Served, create_app
    except ImportError as err:
        raise GlassformerError(f"glassformer serve needs Starlette and uvicorn ({err.name} is "
                               "missing): pip install 'glassformer[serve]'") from None
    kind = model.family.kind
    if kind not in (CAUSAL, ENCODER):
        raise GlassformerError(f"{model.arch} is an encoder-decoder: serve runs causal models "
                               "(completions, chat) and sentence encoders (embeddings)")
    if model.tokenizer is None:
        raise GlassformerError("this model has no tokenizer, so it cannot read requests' text; "
                               "serve a folder or file that includes one")
    engine = make_engine(model, max_batch=max_batch, max_queue=max_queue, context=context,
                         prefill_chunk=prefill_chunk, prefill_budget=prefill_budget,
                         batch_invariant=batch_invariant,
                         mixed_step=mixed_step) if kind == CAUSAL else None
    served = Served(model, name, engine, api_key, embed_max_length, template_budget,
                    reasoning_budget)
    if reasoning_budget is not None and served.thinking is None:
        raise GlassformerError(f"--reasoning-budget is for reasoning models: {name}'s tokenizer "
                               "and chat template have no </think>; leave the flag out")
    sock = open_socket(host, port)
    where = f"http://{host if ':' not in host else f'[{host}]'}:{sock.getsockname()[1]}"
    print(f"glassformer serve: {name} at {where}/v1 (chat page: {where}/); Ctrl-C stops",
          file=sys.stderr, flush=True)
    metrics = engine.metrics if engine is not None else Metrics()
    config = uvicorn.Config(RequestLog(MetricsMiddleware(create_app(served), metrics, engine)),
                            log_level="warning",
                            access_log=False, timeout_graceful_shutdown=DRAIN_S)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:   # uvicorn raises Ctrl-C again once it has drained and stopped
        pass
    print("glassformer serve: stopped", file=sys.stderr, flush=True)
    return 0
