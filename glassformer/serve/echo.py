"""`echo`: the log-probability of every prompt token, as OpenAI's legacy completions give it.

A request with `"echo": true` and `logprobs` gets its prompt back in front of the reply, with one
entry per prompt token: token t's log-probability is the log-softmax of the logits at position
t - 1, read at token t; the first token has nothing before it, so its entry is null.

    prompt ids      a0    a1    a2    a3
    logits at       0     1     2     3      one forward over the whole prompt (B, T, V)
    entry of a_t    null  lp_0[a1]  lp_1[a2]  lp_2[a3]        lp_t = log_softmax(logits_t)

This is what scoring by likelihood reads (lm-evaluation-harness's `local-completions` sends
context + continuation as token ids with echo, max_tokens 1 and logprobs 1, and sums the
continuation's entries, dropping the last one: the generated token). A server without echo
returns the generated tokens' log-probabilities only; a harness that then reads them as the
continuation's scores every choice alike, at chance (llama.cpp's server issue #27174).

No decoding is needed for the prompt: the prompts of a request run as one right-padded forward
(a causal model's position t never sees a pad after it), in groups of at most GROUP_FLOATS
logits. A reply that also generates goes through the engine as usual and the echo is put in front
of it (`with_echo`), except with max_tokens 1 (what scoring harnesses send, no response_format):
that one token is sampled from the echo forward's last logits (`first_tokens`), one forward in
all instead of the engine's prefill and then the echo's.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from glassformer.generate.penalties import History
from glassformer.generate.sampling import sample
from glassformer.ops.softmax import row_max
from glassformer.serve.protocol import (ApiError, completion_logprobs, envelope, new_id,
                                        usage_body)
from glassformer.serve.sequence import TokenInfo, Usage, likeliest

GROUP_FLOATS = 2 ** 26      # logits of one forward at most (256 MiB of float32)


class Scored(NamedTuple):
    """What one echo forward gives a request's prompts."""
    infos: list[list[TokenInfo]] | None   # per prompt, one TokenInfo a token (None: no logprobs)
    last: np.ndarray                      # (P, V) logits at each prompt's last token: the first
                                          # generated token's (first_tokens)


def score_prompts(model, prompts: list[list[int]], top_k: int | None) -> Scored:
    """One forward per group of prompts: each prompt's TokenInfos (top_k None: none asked) and
    the logits after its last token."""
    infos: list = [None] * len(prompts)
    last: list = [None] * len(prompts)
    for group in groups([len(p) for p in prompts], model.cfg.vocab_size):
        ids = [prompts[i] for i in group]
        logits = prompt_logits(model, ids)                                 # (b, T, V)
        for row, index in enumerate(group):
            last[index] = logits[row, len(ids[row]) - 1]                   # (V,)
            if top_k is not None:
                infos[index] = token_infos(model.tokenizer, ids[row],
                                           logits[row, :len(ids[row])], top_k)
    return Scored(infos if top_k is not None else None, np.stack(last))   # (P, V)


def prompt_token_infos(model, prompts: list[list[int]], top_k: int) -> list[list[TokenInfo]]:
    """Per prompt, one TokenInfo per token: the first with logprob and top None, then each
    token's log-probability given the ones before it and the top_k likeliest there."""
    return score_prompts(model, prompts, top_k).infos


def groups(lengths: list[int], vocab: int) -> list[list[int]]:
    """Prompt indices in groups of similar length (longest first) whose padded logits fit
    GROUP_FLOATS; a prompt too long for that runs alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    found: list[list[int]] = []
    for index in order:
        if found and (len(found[-1]) + 1) * lengths[found[-1][0]] * vocab <= GROUP_FLOATS:
            found[-1].append(index)
        else:
            found.append([index])
    return found


def prompt_logits(model, prompts: list[list[int]]) -> np.ndarray:
    """The logits of right-padded prompts: (B, T, V), rows past a prompt's end are padding's
    and meaningless."""
    width = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), width), dtype=np.int64)                 # (B, T)
    mask = np.zeros((len(prompts), width), dtype=bool)                    # (B, T)
    for row, prompt in enumerate(prompts):
        ids[row, :len(prompt)] = prompt
        mask[row, :len(prompt)] = True
    return model(ids, attention_mask=mask)                                # (B, T, V)


def log_normalizers(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of logits (N, V): its max m and log sum exp(x - m), so that log_softmax(x)[j] =
    (x[j] - m) - log_sum: the same float operations as log_softmax_forward, without keeping
    its (N, V) results (only a few entries a row are read)."""
    top = row_max(logits)                                                 # (N, 1)
    shifted = logits - top                                                # (N, V)
    np.exp(shifted, out=shifted)
    return top[:, 0], np.log(shifted.sum(axis=-1))                        # (N,), (N,)


def token_infos(tokenizer, ids: list[int], logits: np.ndarray, top_k: int) -> list[TokenInfo]:
    """logits (T, V) of one prompt: entry t reads row t - 1 at ids[t] (its log-softmax; the top
    alternatives by logit, the same order: one shift per row)."""
    before = logits[:-1]                                                  # (T-1, V)
    top, log_sum = log_normalizers(before)                                # (T-1,), (T-1,)
    rows = np.arange(len(ids) - 1)
    chosen = (before[rows, ids[1:]] - top) - log_sum                      # (T-1,)
    best = (np.argmax(before, axis=-1)[:, None] if top_k == 1             # (T-1, k)
            else likeliest(before, top_k))
    values = (np.take_along_axis(before, best, axis=-1) - top[:, None]) - log_sum[:, None]
    texts: dict[int, str] = {}

    def text(token: int) -> str:
        if token not in texts:
            texts[token] = tokenizer.decode([token])
        return texts[token]

    infos = [TokenInfo(text(int(ids[0])), None, None)]
    for t in range(1, len(ids)):
        alternatives = [(text(int(j)), float(v)) for j, v in zip(best[t - 1], values[t - 1])]
        infos.append(TokenInfo(text(int(ids[t])), float(chosen[t - 1]), alternatives))
    return infos


def first_tokens(engine, sequences: list, last: np.ndarray, n: int, began: float) -> None:
    """Each sequence's one token (echo with max_tokens 1), chosen from its prompt's last logits
    (P, V) of the echo forward as the engine chooses (sampler, padding ids, log-probs): no
    second forward, no row. Sequence p*n + i continues prompt p; began: when the request's
    forward began (perf_counter), its time to first token's start."""
    logits = last[[seq.index // n for seq in sequences]]                  # (S, V)
    if engine.padding is not None:
        logits[:, engine.padding:] = -np.inf                              # never sampled
    ids = sample(logits, [seq.settings.sampling for seq in sequences],
                 [seq.rng for seq in sequences],
                 history=[History(seq.prompt, seq.output) for seq in sequences])   # (S,)
    infos = engine.token_infos(logits, ids, sequences)
    now = time.perf_counter()
    for seq in sequences:
        seq.submitted_at = began
    for seq, token, info in zip(sequences, ids, infos):
        seq.accept(int(token), info)     # max_tokens 1: finished (length, or a stop)
    engine.metrics.tokens_chosen(sequences, now)


def with_echo(choice: dict, prompt_text: str, infos: list[TokenInfo] | None) -> dict:
    """A whole completion choice with its prompt in front: the text, and (infos given) the
    prompt's log-probabilities before the reply's, whose text offsets move past the prompt."""
    echoed = {**choice, "text": prompt_text + choice["text"]}
    if infos is None:
        return echoed
    head = completion_logprobs(infos, 0)
    tail = choice["logprobs"] or completion_logprobs([], 0)
    moved = [offset + len(prompt_text) for offset in tail["text_offset"]]
    echoed["logprobs"] = {key: head[key] + (moved if key == "text_offset" else tail[key])
                          for key in head}
    return echoed


def echoed(model, prompts: list[list[int]], logprobs: int | None, n: int,
           choices: list[dict]) -> list[dict]:
    """Each choice (choice p*n + i continues prompt p) with its prompt, and the prompt's
    log-probabilities when the request asked for logprobs, in front."""
    infos = prompt_token_infos(model, prompts, logprobs) if logprobs is not None else None
    return with_echoes(model, prompts, infos, n, choices)


def with_echoes(model, prompts: list[list[int]], infos: list | None, n: int,
                choices: list[dict]) -> list[dict]:
    """Each choice with its prompt (and, infos given, their log-probabilities) in front."""
    infos = infos if infos is not None else [None] * len(prompts)
    texts = [model.tokenizer.decode(p) for p in prompts]
    return [with_echo(c, texts[c["index"] // n], infos[c["index"] // n]) for c in choices]


def echo_body(model, name: str, prompts: list[list[int]], logprobs: int | None, n: int,
              context: int) -> tuple[dict, Usage]:
    """The whole answer to echo with max_tokens 0: each prompt back with its log-probabilities,
    nothing generated (finish_reason "length": the 0 tokens asked for)."""
    for prompt in prompts:
        if len(prompt) > context:
            raise ApiError(400, f"the prompt is {len(prompt)} tokens, past this server's "
                           f"context of {context} tokens", param="prompt",
                           code="context_length_exceeded")
    empty = [{"index": p * n + i, "text": "", "logprobs": None, "finish_reason": "length"}
             for p in range(len(prompts)) for i in range(n)]
    usage = Usage(sum(len(p) for p in prompts), 0, 0)
    body = {**envelope("text_completion", new_id("cmpl"), name),
            "choices": echoed(model, prompts, logprobs, n, empty), "usage": usage_body(usage)}
    return body, usage
