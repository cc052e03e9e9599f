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
logits. A reply that also generates (max_tokens > 0) goes through the engine as usual; the echo
is put in front of it (`with_echo`).
"""
from __future__ import annotations

import numpy as np

from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.serve.protocol import (ApiError, completion_logprobs, envelope, new_id,
                                        usage_body)
from glassformer.serve.sequence import TokenInfo, Usage, likeliest

GROUP_FLOATS = 2 ** 26      # logits of one forward at most (256 MiB of float32)


def prompt_token_infos(model, prompts: list[list[int]], top_k: int) -> list[list[TokenInfo]]:
    """Per prompt, one TokenInfo per token: the first with logprob and top None, then each
    token's log-probability given the ones before it and the top_k likeliest there."""
    infos: list = [None] * len(prompts)
    for group in groups([len(p) for p in prompts], model.cfg.vocab_size):
        ids = [prompts[i] for i in group]
        logp = prompt_logprobs(model, ids)                                 # (b, T, V)
        for row, index in enumerate(group):
            infos[index] = token_infos(model.tokenizer, ids[row], logp[row, :len(ids[row])],
                                       top_k)
    return infos


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


def prompt_logprobs(model, prompts: list[list[int]]) -> np.ndarray:
    """log-softmax of the logits of right-padded prompts: (B, T, V), rows past a prompt's end
    are padding's and meaningless."""
    width = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), width), dtype=np.int64)                 # (B, T)
    mask = np.zeros((len(prompts), width), dtype=bool)                    # (B, T)
    for row, prompt in enumerate(prompts):
        ids[row, :len(prompt)] = prompt
        mask[row, :len(prompt)] = True
    logits = model(ids, attention_mask=mask)                              # (B, T, V)
    return log_softmax_forward(logits)[0]


def token_infos(tokenizer, ids: list[int], logp: np.ndarray, top_k: int) -> list[TokenInfo]:
    """logp (T, V) of one prompt: entry t reads row t - 1 at ids[t]."""
    before = logp[:-1]                                                    # (T-1, V)
    chosen = np.take_along_axis(before, np.asarray(ids[1:])[:, None], axis=-1)[:, 0]   # (T-1,)
    top = likeliest(before, top_k)                                        # (T-1, k)
    texts = [tokenizer.decode([int(i)]) for i in ids]
    infos = [TokenInfo(texts[0], None, None)]
    for t in range(1, len(ids)):
        alternatives = [(tokenizer.decode([int(j)]), float(before[t - 1, j]))
                        for j in top[t - 1]]
        infos.append(TokenInfo(texts[t], float(chosen[t - 1]), alternatives))
    return infos


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
    infos = (prompt_token_infos(model, prompts, logprobs) if logprobs is not None
             else [None] * len(prompts))
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
