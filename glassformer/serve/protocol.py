"""OpenAI's API shapes: a request's fields checked into Settings, and the response bodies.

Requests (https://platform.openai.com/docs/api-reference): `/v1/completions` reads `prompt`, and
`logprobs` as a count of alternatives; `/v1/chat/completions` reads `messages`, `logprobs` as a
flag and `top_logprobs` as the count, and `max_completion_tokens` (its newer name of
`max_tokens`). `/v1/completions` also reads `echo` (the prompt's log-probabilities in front of
the reply, echo.py; with it, max_tokens may be 0). Both read `temperature`, `top_p`, `n`, `stop`, `seed`, `stream` and
`stream_options.include_usage`, and the sampling fields vLLM and llama.cpp's server take:
`top_k` (-1 or 0: off, as vLLM), `min_p`, `repetition_penalty`, OpenAI's `presence_penalty`,
`frequency_penalty` and `logit_bias` (token id -> bias in [-100, 100]; ids checked against the
model's vocabulary by `check_bias`). Fields this server does not know are ignored, as vLLM does; a
known field with a wrong value is an ApiError (HTTP 400) naming the field and what it takes.

Errors have OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`.
"""
from __future__ import annotations

import base64
import secrets
import time

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.sampling import Sampling, check_bias_ids
from glassformer.serve.sequence import Settings, TokenInfo, Usage

MAX_N = 8               # choices per request
MAX_STOP = 4            # stop strings per request (OpenAI's limit)
MAX_TOP_LOGPROBS = 20   # alternatives per token (OpenAI's limit for chat)
COMPLETION_MAX_TOKENS = 16   # /v1/completions' default max_tokens, as OpenAI's
MAX_LOGIT_BIAS = 300         # logit_bias entries per request (as OpenAI bounds them)
MAX_SEED = 2 ** 63 - 1       # seeds are np.random.default_rng's: integers >= 0


class ApiError(Exception):
    """A request the server refuses: HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error",
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def bad(param: str, expected: str, value) -> ApiError:
    shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
    return ApiError(400, f"'{param}' must be {expected}, got {shown}", param=param,
                    code="invalid_value")


def number(body: dict, name: str, default: float, low: float, high: float, *,
           open_low: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(name, f"a number in {'(' if open_low else '['}{low}, {high}]", value)
    if not (low < value <= high if open_low else low <= value <= high):
        raise bad(name, f"a number in {'(' if open_low else '['}{low}, {high}]", value)
    return float(value)


def integer(body: dict, name: str, default, low: int, high: int | None = None):
    value = body.get(name)
    if value is None:
        return default
    top = "" if high is None else f" and <= {high}"
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        raise bad(name, f"an integer >= {low}{top}", value)
    return value


def stop_strings(body: dict) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (not isinstance(stops, list) or len(stops) > MAX_STOP
            or not all(isinstance(s, str) and s for s in stops)):
        raise bad("stop", f"a string or a list of at most {MAX_STOP} non-empty strings", value)
    return tuple(stops)


def flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(name, "true or false", value)
    return value


def include_usage(body: dict) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise bad("stream_options", "an object such as {\"include_usage\": true}", options)
    return flag(options, "include_usage")


def max_tokens(body: dict, default: int | None, low: int = 1) -> int | None:
    """max_completion_tokens, else max_tokens, else default (None: what the context allows);
    low 0 for echo, whose max_tokens 0 asks for the prompt's log-probabilities alone."""
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    return integer(body, name, default, low)


def settings(body: dict, *, chat: bool) -> tuple[Settings, int]:
    """The sampling settings of a request (max_tokens still unchecked against the prompt,
    0 when the request left it to the context) and n."""
    if chat:
        wanted = flag(body, "logprobs")
        top = integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
        logprobs = top if wanted else None
        if top and not wanted:
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    else:
        logprobs = integer(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
    seed = integer(body, "seed", None, 0, MAX_SEED)
    echo = not chat and flag(body, "echo")
    limit = max_tokens(body, None if chat else COMPLETION_MAX_TOKENS, low=0 if echo else 1)
    sampling = Sampling(temperature=number(body, "temperature", 1.0, 0.0, 2.0),
                        top_p=number(body, "top_p", 1.0, 0.0, 1.0, open_low=True),
                        **adjustments(body))
    found = Settings(max_tokens=limit or 0, sampling=sampling, seed=seed,
                     stop=stop_strings(body), logprobs=logprobs)
    return found, integer(body, "n", 1, 1, MAX_N)


def adjustments(body: dict) -> dict:
    """The Sampling fields past temperature and top_p (generate/penalties.py), checked."""
    top_k = integer(body, "top_k", 0, -1)
    return dict(top_k=top_k if top_k > 0 else None,          # -1 and 0: off, as vLLM
                min_p=number(body, "min_p", 0.0, 0.0, 1.0) or None,      # 0: off
                presence_penalty=number(body, "presence_penalty", 0.0, -2.0, 2.0),
                frequency_penalty=number(body, "frequency_penalty", 0.0, -2.0, 2.0),
                repetition_penalty=number(body, "repetition_penalty", 1.0, 0.0, 100.0,
                                          open_low=True),
                logit_bias=logit_bias(body))


def logit_bias(body: dict) -> tuple:
    """OpenAI's logit_bias, {"token id": bias}, as ((id, bias), ...) sorted by id."""
    value = body.get("logit_bias")
    if value is None:
        return ()
    expected = 'an object of token ids to numbers in [-100, 100], such as {"50256": -100}'
    if not isinstance(value, dict) or len(value) > MAX_LOGIT_BIAS:
        raise bad("logit_bias", expected + f" (at most {MAX_LOGIT_BIAS})", value)
    pairs = []
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isdigit() and len(key) < 12) or isinstance(
                bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise bad("logit_bias", expected, {key: bias})
        pairs.append((int(key), float(bias)))
    return tuple(sorted(pairs))


def check_bias(sampling: Sampling, vocab_size: int) -> None:
    """A 400 for a logit_bias naming an id past the model's vocabulary."""
    try:
        check_bias_ids(sampling, vocab_size)
    except GlassformerError as err:
        raise ApiError(400, str(err), param="logit_bias", code="invalid_value") from None


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def usage_body(usage: Usage) -> dict:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}


def utf8(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def chat_logprobs(tokens: list[TokenInfo]) -> dict:
    """Chat's logprobs: one entry per token, each with its top alternatives."""
    return {"content": [
        {"token": t.text, "logprob": t.logprob, "bytes": utf8(t.text),
         "top_logprobs": [{"token": text, "logprob": lp, "bytes": utf8(text)}
                          for text, lp in t.top]}
        for t in tokens]}


def completion_logprobs(tokens: list[TokenInfo], offset: int) -> dict:
    """Legacy completions' logprobs: parallel lists; text_offset counts from `offset`. An echoed
    prompt's first token has no log-probability: its logprob and top are None (null)."""
    offsets = (offset + np.cumsum([0] + [len(t.text) for t in tokens[:-1]])).tolist()
    return {"tokens": [t.text for t in tokens], "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [None if t.top is None else dict(t.top) for t in tokens],
            "text_offset": offsets if tokens else []}


def embedding_body(vectors: np.ndarray, encoding: str, model: str, tokens: int) -> dict:
    """/v1/embeddings' answer; encoding "base64" packs float32 little-endian (what the openai
    client asks for by default and unpacks)."""
    data = []
    for index, row in enumerate(vectors.astype("<f4")):
        value = base64.b64encode(row.tobytes()).decode() if encoding == "base64" \
            else row.tolist()
        data.append({"object": "embedding", "index": index, "embedding": value})
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def envelope(kind: str, request_id: str, model: str) -> dict:
    """The fields every response and chunk of one request shares."""
    return {"id": request_id, "object": kind, "created": int(time.time()), "model": model}
