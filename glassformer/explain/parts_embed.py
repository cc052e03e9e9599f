"""`explain embedding` and `explain rope`: ops/embedding.py and ops/rope.py, step by step.

embedding: a (V, C) table, ids (B, T) with one id forced to repeat, so the backward shows two
upstream rows landing in one table row (np.add.at, not a buffered `+=`).

rope: q (B, H, T, D) turned by rope_forward with the tables of rope_tables (read back from its
ctx), then the relative-position property: one fixed query vector and one fixed key vector are
placed at every position and turned; their score matrix (attention_scores, scale 1) has the same
value along each diagonal, i.e. q_m . k_n depends only on m - n.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.parts_core import Part, normal, shape_of, step
from glassformer.ops.attention import attention_scores
from glassformer.ops.embedding import embedding_backward, embedding_forward
from glassformer.ops.rope import rope_backward, rope_forward, rope_tables

EMBEDDING_SIZES = {"batch": 2, "seq": 3, "d_model": 4}
EMBEDDING_VOCAB = 6        # V: small, so the table prints whole and unused rows are easy to spot
ROPE_SIZES = {"batch": 1, "seq": 6, "d_model": 4, "heads": 1}
# Small theta so that even D = 4 turns visibly at short positions (LLaMA uses 10000).
ROPE_THETA = 100.0
# The offset m - n of the two position pairs compared, and the other offset shown beside them.
SAME_OFFSET = 2
OTHER_OFFSET = 1


# ---------------------------------------------------------------- embedding

def _embedding_inputs(options: dict, rng):
    b, t, c = options["batch"], options["seq"], options["d_model"]
    if b * t < 2:
        raise GlassformerError("explain embedding needs at least two positions (batch * seq >= 2) "
                               "to show a repeated id")
    ids = rng.integers(0, EMBEDDING_VOCAB, size=(b, t))                # (B, T)
    ids[-1, -1] = ids[0, 0]          # note: one id is made to repeat, for the backward's sake
    return {"table": normal(rng, (EMBEDDING_VOCAB, c)), "ids": ids}, {}


def _embedding_forward(inputs, static):
    return embedding_forward(inputs["ids"], inputs["table"])


def _embedding_backward(dout, ctx, static):
    return {"table": embedding_backward(dout, ctx)}


def _embedding_steps(inputs, out, ctx, static):
    table, ids = inputs["table"], inputs["ids"]
    return [step("table", table, f"(V={table.shape[0]}, C={table.shape[1]})"),
            step("ids", ids, f"{shape_of(ids)} integers in [0, V)"),
            step("out", out, f"table[ids]: {shape_of(ids)} -> {shape_of(out)}")]


def _embedding_backward_steps(dout, grads, ctx, static):
    dtable = grads["table"]
    repeated = int(ctx.ids[0, 0])
    where = np.argwhere(ctx.ids == repeated)                           # (n, 2): (b, t) pairs
    rows = dout[ctx.ids == repeated]                                   # (n, C): G at those
    unused = np.setdiff1d(np.arange(dtable.shape[0]), ctx.ids)
    return [step("G", dout, shape_of(dout), text="common:G"),
            step("dtable", dtable, f"np.add.at(zeros(V, C), ids, G): {shape_of(dtable)}"),
            step("repeated_id", repeated, "ids[0,0]", id=repeated),
            step("repeated_at", where, f"argwhere(ids == {repeated}): {shape_of(where)}",
                 id=repeated),
            step("repeated_G", rows, f"G[ids == {repeated}]: {shape_of(rows)}", id=repeated),
            step("repeated_dtable", dtable[repeated], f"dtable[{repeated}]: (C,)", id=repeated),
            step("unused_ids", unused, "{0 .. V-1} - set(ids)")]


def _table_only(inputs, static):
    return ["table"]


EMBEDDING = Part(name="embedding", defaults=dict(EMBEDDING_SIZES),
                 make_inputs=_embedding_inputs, forward=_embedding_forward,
                 backward=_embedding_backward, forward_steps=_embedding_steps,
                 backward_steps=_embedding_backward_steps, checked=_table_only)


# ---------------------------------------------------------------- rope

def _rope_inputs(options: dict, rng):
    b, t, c, h = options["batch"], options["seq"], options["d_model"], options["heads"]
    if c % h or (c // h) % 2:
        raise GlassformerError(f"explain rope needs an even head dim D = d_model / heads, got "
                               f"d_model={c}, heads={h}")
    if t < SAME_OFFSET + 2:
        raise GlassformerError(f"explain rope needs --seq >= {SAME_OFFSET + 2} to compare two "
                               f"position pairs {SAME_OFFSET} apart, got {t}")
    d = c // h
    inputs = {"q": normal(rng, (b, h, t, d)),                        # (B, H, T, D)
              "q_one": normal(rng, (d,)),                            # one query vector (D,)
              "k_one": normal(rng, (d,))}                            # one key vector (D,)
    return inputs, {}


def _rope_forward(inputs, static):
    q = inputs["q"]
    cos, sin = rope_tables(q.shape[-2], q.shape[-1], theta=ROPE_THETA, dtype=q.dtype)  # (T, D)
    return rope_forward(q, cos, sin)


def _rope_backward(dout, ctx, static):
    return {"q": rope_backward(dout, ctx)}


def _relative_demo(inputs, ctx):
    """One query and one key vector placed at every position, turned, and scored against
    each other: (T, D) and (T, D) -> (T, T) scores."""
    t, d = ctx.cos.shape
    q_fixed = np.broadcast_to(inputs["q_one"], (t, d))                 # (D,) -> (T, D)
    k_fixed = np.broadcast_to(inputs["k_one"], (t, d))                 # (D,) -> (T, D)
    q_turned, _ = rope_forward(q_fixed, ctx.cos, ctx.sin)              # (T, D)
    k_turned, _ = rope_forward(k_fixed, ctx.cos, ctx.sin)              # (T, D)
    return q_fixed, k_fixed, attention_scores(q_turned, k_turned, 1.0)  # (T, T)


def _rope_steps(inputs, out, ctx, static):
    q = inputs["q"]
    t, d = ctx.cos.shape
    q_fixed, k_fixed, scores = _relative_demo(inputs, ctx)
    last = t - 1
    pairs = [(SAME_OFFSET, 0), (last, last - SAME_OFFSET), (last, last - OTHER_OFFSET)]
    keys = ["score_a", "score_b", "score_c"]
    steps = [step("positions", np.arange(t), f"arange(T={t})"),
             step("cos", ctx.cos, f"cos(pos * theta^(-2i/D)), theta={ROPE_THETA:g}: "
                                  f"({t},{d})  (ctx.cos)"),
             step("sin", ctx.sin, f"sin(pos * theta^(-2i/D)): ({t},{d})  (ctx.sin)"),
             step("q", q, f"{shape_of(q)}  (B, H, T, D)"),
             step("q_rot", out, f"q * cos + rotate_half(q) * sin: {shape_of(q)} * ({t},{d}) "
                                f"-> {shape_of(out)}"),
             step("q_fixed", q_fixed, f"q_one ({d},) repeated -> ({t},{d})"),
             step("k_fixed", k_fixed, f"k_one ({d},) repeated -> ({t},{d})"),
             step("scores_fixed", scores, f"rope(q_fixed) @ rope(k_fixed)^T: ({t},{t})")]
    for key, (m, n) in zip(keys, pairs):
        steps.append(step(key, scores[m, n], f"q_{m} . k_{n}, m - n = {m - n}", text="score",
                          m=m, n=n, offset=m - n))
    return steps


def _rope_backward_steps(dout, grads, ctx, static):
    return [step("G", dout, shape_of(dout), text="common:G"),
            step("dq", grads["q"], f"G * cos - rotate_half(G * sin): {shape_of(grads['q'])}")]


def _q_only(inputs, static):
    return ["q"]


ROPE = Part(name="rope", defaults=dict(ROPE_SIZES), make_inputs=_rope_inputs,
            forward=_rope_forward, backward=_rope_backward, forward_steps=_rope_steps,
            backward_steps=_rope_backward_steps, checked=_q_only)
