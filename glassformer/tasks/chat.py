"""Chat: render a conversation with the model's chat template, generate the reply, stream it.

Chat models are trained on conversations laid out in one exact format; SmolLM2-Instruct (like
Qwen2) uses ChatML:

    <|im_start|>system
    You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
    <|im_start|>user
    What is the capital of France?<|im_end|>
    <|im_start|>assistant
    ...the model writes here, and ends its turn with <|im_end|>

The model files store the format as a Jinja template, which comes with the tokenizer
(`tokenizer.config`: GGUF metadata, chat_template.jinja or tokenizer_config.json) and is rendered
in Jinja2's sandbox as transformers renders it (tokenizers/chat_template.py). The template's own
control tokens become control ids; anything the user types stays text, so typing `<|im_end|>`
cannot close the turn. A model without a template but with ChatML's tokens gets ChatML (the CLI
says so).

The session keeps its KV cache between turns, as llama.cpp's server does. Each turn renders the
whole conversation and tokenizes it, then keeps the cache for the longest common prefix of the new
ids and the ids already cached, and prefills only the rest:

    cached:  [system ... user 1 ... assistant\n reply-1 ids]             (cache.length ids)
    new:     [system ... user 1 ... assistant\n reply-1 ids <|im_end|>\n user 2 ... assistant\n]
              ^^^^^^^^^^^^^ common prefix: kept ^^^^^^^^^^^^ ^^^^ prefilled this turn ^^^^^^^^^^

Every position keeps the id a fresh session would put there, so the reply is a fresh session's
(to float rounding: cached keys were computed one token at a time). A reply whose text
re-tokenizes differently only shortens the common prefix. When the conversation no longer fits the
context (prompt + max_new_tokens > max_seq_len), the oldest exchanges are dropped (never the
system prompt), the turn says so (`TurnStats.dropped_messages`), and the cache is rebuilt once
from the first id that changed. Generation stops at `<|im_end|>` or the tokenizer's other
end-of-text tokens, which are not printed or kept in the history.

A hybrid model's cache (Qwen3-Next, Qwen3.5: a recurrent state per linear-attention layer) cannot
be cut back to a shorter prefix; the session checkpoints its state once per turn at the turn
boundary and goes back there instead (tasks/chat_checkpoints.py). Each turn records how many ids
it prefilled and where the reused ones came from (`TurnStats`; `glassformer chat --stats` prints
one line per turn).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from glassformer.blocks.kv_cache import KVCache
from glassformer.errors import GlassformerError
from glassformer.generate.generate import check_cache_memory, generate
from glassformer.generate.stream import StreamStep, stream_text
from glassformer.io.pretrained import load_pretrained
from glassformer.packaged import MODEL, resolve_path
from glassformer.tasks.chat_checkpoints import (FROM_NOTHING, TurnCheckpoints, can_cut_back,
                                                common_prefix, prefill_to, turn_boundary)
from glassformer.tokenizers.chat_template import (ChatTemplate, RenderBudget, chat_prompt_ids,
                                                  chat_template_of)
from glassformer.tokenizers.end_of_text import end_of_text_ids

IM_END = "<|im_end|>"
CACHE_STEP = 256   # the KV cache grows by whole steps of this many positions


def open_chat(name_or_path: str | Path, *, system: str | None = None,
              adapter: str | Path | None = None,
              template_budget: RenderBudget | None = None) -> "ChatSession":
    """Load a chat model (a .gguf file, an HF folder, a run, or a named model such as smollm2)
    with the chat template its tokenizer carries (ChatML when it has none: template.fallback).

    system: a system prompt replacing the template's default one.
    adapter: a LoRA adapter folder (PEFT's format), merged into the model (io/peft.py).
    template_budget: the chat template's render limits (tokenizers/template_budget.py).
    """
    model = load_pretrained(resolve_path(name_or_path, MODEL), adapter=adapter)
    if model.tokenizer is None:
        raise GlassformerError("this model has no tokenizer, so it cannot chat")
    template = chat_template_of(model.tokenizer, template_budget)
    messages = [] if system is None else [{"role": "system", "content": system}]
    return ChatSession(model, template, messages)


@dataclass
class TurnStats:
    """What one turn cost: how much of its prompt was read again, and how fast it ran."""
    prompt_tokens: int            # ids of the whole rendered conversation
    reused_tokens: int            # of those, already in the KV cache from earlier turns
    dropped_messages: int         # oldest messages dropped so the conversation fits the context
    prefill_seconds: float = 0.0  # until the first new token (prefill and its sampling)
    new_tokens: int = 0           # tokens generated, an end-of-turn token included
    decode_seconds: float = 0.0   # from the first new token to the last
    reused_from: str = FROM_NOTHING  # chat_checkpoints.FROM_*: the live cache, a checkpoint
    checkpoint_bytes: int = 0     # what the session's turn checkpoints hold (hybrids only)

    @property
    def prefilled_tokens(self) -> int:
        """The prompt ids this turn ran through the model."""
        return self.prompt_tokens - self.reused_tokens


def oldest_exchange(messages: list[dict]) -> int:
    """How many messages to drop to remove the oldest exchange after the system prompt: the
    first user message and the replies up to the next user message (0 when only one is left)."""
    start = 1 if messages and messages[0]["role"] == "system" else 0
    users = [i for i in range(start, len(messages)) if messages[i]["role"] == "user"]
    if len(users) < 2:
        return 0
    return users[1] - start


@dataclass
class ChatSession:
    """A conversation with one model: the messages so far, the KV cache of the ids already read,
    and a record per turn."""
    model: object                      # a glassformer Model with a tokenizer
    template: ChatTemplate             # the conversation format (tokenizers/chat_template.py)
    messages: list[dict] = field(default_factory=list)
    kv_cache: KVCache | None = None    # keys and values of cached_ids[:kv_cache.length]
    cached_ids: list[int] = field(default_factory=list)
    turns: list[TurnStats] = field(default_factory=list)
    checkpoints: TurnCheckpoints = field(default_factory=TurnCheckpoints)  # a hybrid's states

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The ids the model reads for `messages`, ending with the assistant's turn opening."""
        tokenizer = self.model.tokenizer
        if tokenizer is None:
            raise GlassformerError("this model has no tokenizer, so it cannot chat")
        return chat_prompt_ids(tokenizer, self.template, messages, add_generation_prompt=True)

    def stop_ids(self) -> list[int]:
        """The ids that end the assistant's turn."""
        tokenizer = self.model.tokenizer
        stop = set(end_of_text_ids(tokenizer))
        if IM_END in tokenizer.special_tokens:
            stop.add(tokenizer.special_tokens[IM_END])
        return sorted(stop)

    def reset(self, system: str | None = None) -> None:
        """Start over (with this system prompt, if any). The KV cache stays: the next turn
        reuses whatever prefix (the system prompt) it still shares."""
        self.messages = [] if system is None else [{"role": "system", "content": system}]

    def send(self, text: str, *, max_new_tokens: int = 256,
             **generate_kwargs) -> Iterator[StreamStep]:
        """Add a user message and return the stream of the assistant's reply: a StreamStep
        (token_id, text) per token, whose texts joined are the reply (`"".join(step.text for
        step in session.send(...))`); the reply joins `messages` when the stream ends or is
        closed (Ctrl-C keeps the part already written).

        The prompt is prepared here, before the stream starts: `turns[-1]` already tells how
        many ids are reused and how many messages were dropped.
        generate_kwargs: temperature, top_k, top_p (or sampling, a Sampling), seed, use_cache.
        """
        messages, prompt_ids, dropped = self.fit(
            self.messages + [{"role": "user", "content": text}], max_new_tokens)
        use_cache = generate_kwargs.get("use_cache", True)
        stats = TurnStats(len(prompt_ids), 0, dropped)
        if use_cache:
            stats.reused_tokens, stats.reused_from = self.reuse_prefix(prompt_ids,
                                                                       max_new_tokens)
        self.turns.append(stats)
        boundary = self.boundary(messages, prompt_ids) if use_cache else 0
        ids = self.generated(prompt_ids, stats, boundary=boundary, max_new_tokens=max_new_tokens,
                             **generate_kwargs)
        return self.reply(messages, ids)

    def fit(self, messages: list[dict], max_new_tokens: int
            ) -> tuple[list[dict], list[int], int]:
        """Drop the oldest exchanges until prompt + max_new_tokens fits the context.
        Returns (messages kept, their prompt ids, how many messages were dropped)."""
        context = self.model.context_len
        dropped = 0
        prompt_ids = self.prompt_ids(messages)
        while len(prompt_ids) + max_new_tokens > context:
            count = oldest_exchange(messages)
            if count == 0:
                raise GlassformerError(
                    f"this message makes a prompt of {len(prompt_ids)} tokens, which with "
                    f"max_new_tokens={max_new_tokens} does not fit the context of {context} "
                    "tokens; send a shorter message or ask for fewer new tokens")
            start = 1 if messages[0]["role"] == "system" else 0
            messages = messages[:start] + messages[start + count:]
            dropped += count
            prompt_ids = self.prompt_ids(messages)
        return messages, prompt_ids, dropped

    def reuse_prefix(self, prompt_ids: list[int], max_new_tokens: int = 1) -> tuple[int, str]:
        """Cut the KV cache back to the prefix it shares with prompt_ids, with room for the
        prompt and max_new_tokens; returns the prefix's length and where it came from
        (chat_checkpoints.FROM_*: a hybrid's state goes back to a turn checkpoint).

        The cache grows with use, CACHE_STEP positions at a time, and never past what this turn
        needs rounded up (nor the context): a model that declares a huge context gets a cache of
        the conversation's size, its bytes checked against the memory budget first.
        note: the last prompt id is always fed again, since its logits give the first token."""
        need = len(prompt_ids) + max_new_tokens
        size = min(-(-need // CACHE_STEP) * CACHE_STEP, self.model.context_len)  # rounded up
        if self.kv_cache is None or self.kv_cache.max_len < need:
            check_cache_memory(self.model, 1, size, prompt=len(prompt_ids))
        if self.kv_cache is None:
            self.kv_cache = self.model.new_cache(1, size)
        cached = self.cached_ids[:self.kv_cache.length]
        keep = min(common_prefix(cached, prompt_ids), len(prompt_ids) - 1)
        source = self.checkpoints.rewind(self.kv_cache, keep)   # a hybrid: maybe fewer
        if self.kv_cache.max_len < need:
            self.kv_cache = self.kv_cache.with_room(size)   # the kept positions come along
        return self.kv_cache.length, source

    def boundary(self, messages: list[dict], prompt_ids: list[int]) -> int:
        """Where a hybrid's state is checkpointed this turn: the end of the prefix the next
        turn's prompt will share (chat_checkpoints.turn_boundary), before the last prompt id
        (fed by generate for its logits); 0 for a cache that can be cut back anywhere."""
        if self.kv_cache is None or can_cut_back(self.kv_cache):
            return 0
        shared = turn_boundary(self.model.tokenizer, self.template, messages, prompt_ids)
        return min(shared, len(prompt_ids) - 1)

    def generated(self, prompt_ids: list[int], stats: TurnStats, boundary: int = 0,
                  **generate_kwargs) -> Iterator[int]:
        """The reply's ids as generate() picks them, ending before an end-of-turn id; records
        the ids fed to the cache (cached_ids) and the turn's timings as they happen.
        boundary: a hybrid's prefill stops there first and checkpoints its state (0: none)."""
        # The cache's positions always hold the leading ids of this list, prompt then reply.
        self.cached_ids = list(prompt_ids)
        stop = self.stop_ids()
        kv_cache = self.kv_cache if generate_kwargs.get("use_cache", True) else None
        start = time.perf_counter()
        if kv_cache is not None and boundary >= kv_cache.length and boundary > 0:
            prefill_to(self.model, kv_cache, prompt_ids, boundary)   # the rest: generate's
            self.checkpoints.save(kv_cache)
            stats.checkpoint_bytes = self.checkpoints.nbytes()
        for step in generate(self.model, np.asarray([prompt_ids], dtype=np.int64), stop=stop,
                             kv_cache=kv_cache, **generate_kwargs):
            now = time.perf_counter()
            if stats.new_tokens == 0:
                stats.prefill_seconds = now - start
            else:
                stats.decode_seconds = now - start - stats.prefill_seconds
            stats.new_tokens += 1
            token_id = int(step[0])
            if token_id in stop:
                return
            self.cached_ids.append(token_id)
            yield token_id

    def reply(self, messages: list[dict], ids: Iterator[int]) -> Iterator[StreamStep]:
        """Stream the reply's text; whatever was written joins the conversation at the end."""
        text = []
        try:
            for step in stream_text(self.model.tokenizer, ids):
                text.append(step.text)
                yield step
        finally:  # also on close() or Ctrl-C: the part of the reply already shown is kept
            self.messages = messages + [{"role": "assistant", "content": "".join(text)}]
