"""Turn-boundary checkpoints: how a chat with a hybrid model (Qwen3-Next, Qwen3.5) reuses its
earlier turns although its recurrent state cannot be cut back.

A KV cache forgets its last positions by lowering `length` (tasks/chat.py keeps the longest
prefix the new prompt shares). A Gated DeltaNet layer's state (blocks/delta_state.py) has folded
every token into one matrix: it cannot forget one. So the chat copies the state at the point the
next turn will share, and goes back there when the live state has run past what the new prompt
shares:

    turn k prompt:  [system, user 1, ..., user k]<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n
                                                  ^ boundary: checkpoint here (B x fixed bytes)
    turn k+1:       [system, user 1, ..., user k]<|im_start|>assistant\\n{reply k}<|im_end|>...
                    ^^^^^^^ restored: not read again ^ prefilled from here

Where the boundary lies is the chat template's business: a template that renders an earlier
reply as it was generated (ChatML) shares the whole prompt and reply, and the live state
continues with nothing to restore; one that renders it otherwise (Qwen3's and Qwen3.5's drop the
empty think block from earlier turns) shares the prompt up to the assistant's turn opening. The
boundary is found by rendering what the next turn will render, with an empty reply and an empty
next message (`turn_boundary`), and compared with this turn's prompt. It is a guess: a checkpoint
is only used when the new prompt's ids truly share its prefix (`rewind`).

The state is copied once per turn, at the boundary (the prefill runs in two forwards, up to it
and after it), never per token. A checkpoint costs the states' bytes (`StateCheckpoint.nbytes`:
the same at 1k or 32k tokens of context), and at most MAX_CHECKPOINTS are kept, the newest.
The full-attention layers' keys and values need no copy: positions before a checkpoint are never
written again while it is kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glassformer.blocks.delta_state import HybridCache, StateCheckpoint
from glassformer.blocks.kv_cache import KVCache
from glassformer.errors import GlassformerError
from glassformer.tokenizers.chat_template import ChatTemplate, chat_prompt_ids

MAX_CHECKPOINTS = 4   # turn boundaries kept (a regenerated reply, an edited recent message)

# where a turn's reused prefix came from (TurnStats.reused_from)
FROM_CACHE = "cache"            # the live cache: every position it holds, or a plain KV prefix
FROM_CHECKPOINT = "checkpoint"  # a hybrid's state restored at an earlier turn boundary
FROM_NOTHING = "none"           # nothing reused: the prompt is prefilled from its first token


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids a and b share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def can_cut_back(cache: KVCache) -> bool:
    """Whether `cache.keep(n)` keeps n positions for any n: a KV cache's keys (chat caches hold
    every position), not a recurrent state."""
    return not isinstance(cache, HybridCache)


def turn_boundary(tokenizer, template: ChatTemplate, messages: list[dict],
                  prompt_ids: list[int]) -> int:
    """How many leading ids of `prompt_ids` (messages rendered with the generation prompt) the
    next turn's prompt will share, as far as the template tells: the conversation rendered as
    the next turn renders it (this turn's reply and the next message, empty here), without a
    generation prompt. A template that refuses that probe gives the messages alone."""
    probes = (messages + [{"role": "assistant", "content": ""}, {"role": "user", "content": ""}],
              messages)
    for probe in probes:
        try:
            ids = chat_prompt_ids(tokenizer, template, probe, add_generation_prompt=False)
        except GlassformerError:
            continue
        return common_prefix(ids, prompt_ids)
    return 0


def prefill_to(model, cache: KVCache, ids: list[int], end: int) -> int:
    """Feed ids[cache.length:end] (one row) to the model, filling the cache up to `end`; returns
    how many ids were fed (their logits are not needed: only the state they leave)."""
    start = cache.length
    if end <= start:
        return 0
    chunk = np.asarray([ids[start:end]], dtype=np.int64)                    # (1, T)
    model.forward(chunk, positions=np.arange(start, end)[None, :], kv_cache=cache,
                  last_only=True)
    cache.advance(end - start)
    return end - start


@dataclass
class TurnCheckpoints:
    """The checkpoints of one chat's cache, oldest first; each one's ids are the first
    `length` ids the cache holds (`rewind` drops any that stop being so)."""
    saved: list[StateCheckpoint] = field(default_factory=list)

    def nbytes(self) -> int:
        """What the checkpoints kept cost now."""
        return sum(c.nbytes() for c in self.saved)

    def save(self, cache: KVCache) -> None:
        """Checkpoint a hybrid cache where it stands (once per length; a plain cache needs
        none), keeping the newest MAX_CHECKPOINTS."""
        if can_cut_back(cache) or any(c.length == cache.length for c in self.saved):
            return
        self.saved.append(cache.checkpoint())
        del self.saved[:-MAX_CHECKPOINTS]

    def rewind(self, cache: KVCache, keep: int) -> str:
        """Cut `cache` back to hold at most its first `keep` positions (the prefix the new
        prompt shares), as many as it can; returns where what is kept came from (FROM_*).
        A plain KV cache keeps exactly `keep`; a hybrid keeps everything when keep is all it
        holds, else restores the longest checkpoint within `keep`, else starts over."""
        if can_cut_back(cache) or keep >= cache.length:
            cache.keep(min(keep, cache.length))
            return FROM_CACHE if cache.length else FROM_NOTHING
        usable = [c for c in self.saved if c.length <= keep]
        self.saved = usable                 # the others hold ids the new prompt does not share
        if usable:
            cache.restore(usable[-1])
            return FROM_CHECKPOINT if cache.length else FROM_NOTHING
        cache.keep(0)
        return FROM_NOTHING
