"""`explain embedding`: ops/embedding.py, step by step, through its "repeated-ids" gradcheck case.

A (V, C) table and ids (B, T) with one id forced to repeat, so the backward shows two upstream
rows landing in one table row (np.add.at, not a buffered `+=`).
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.core import Part, Setup, normal, shape_of, step, with_common
from glassformer.gradcheck.cases import find_case

SIZES = {"batch": 2, "seq": 3, "d_model": 4}
VOCAB = 6        # V: small, so the table prints whole and unused rows are easy to spot
CASE = find_case("embedding", "repeated-ids")

TEXT = with_common({
    "en": {
        "title": "Embedding lookup (ops/embedding.py)",
        "table": "Table (V, C): one learned row of C numbers for each of V ids.",
        "ids": "Ids (B, T): integers in [0, V). One id below is forced to appear twice.",
        "out": "out = table[ids]: each id copies its row. Same as one-hot(ids) @ table, without "
               "building the one-hot matrix.",
        "dtable": "dL/dtable: each row of G is added into the table row its id picked, with "
                  "np.add.at, which adds repeated ids up (a plain `dtable[ids] += G` would keep "
                  "only one of them).",
        "repeated_id": "Id {id} is looked up more than once.",
        "repeated_at": "Where id {id} occurs, as (batch, position) pairs.",
        "repeated_G": "The rows of G at those positions: both flow into table row {id}.",
        "repeated_dtable": "dtable[{id}]: the sum of the rows above.",
        "unused_ids": "Ids nobody looked up: their dtable rows are exactly 0.",
    },
    "zh": {
        "title": "嵌入查表（ops/embedding.py）",
        "table": "嵌入表 (V, C)：V 个 id 各对应一行可学习的 C 个数。",
        "ids": "id (B, T)：[0, V) 中的整数。下面特意让其中一个 id 出现两次。",
        "out": "out = table[ids]：每个 id 复制出自己的那一行。等价于 one-hot(ids) @ table，"
               "但不需要真的构造 one-hot 矩阵。",
        "dtable": "dL/dtable：G 的每一行加到它的 id 所选中的那一行上，用 np.add.at 实现，"
                  "重复的 id 会累加（普通的 `dtable[ids] += G` 只会保留其中一次）。",
        "repeated_id": "id {id} 被查了不止一次。",
        "repeated_at": "id {id} 出现的位置，以 (批次, 位置) 表示。",
        "repeated_G": "这些位置上 G 的行：它们都流向嵌入表的第 {id} 行。",
        "repeated_dtable": "dtable[{id}]：上面这些行之和。",
        "unused_ids": "没有被查到的 id：它们在 dtable 中的行恰好为 0。",
    },
})


def _inputs(options: dict, rng) -> Setup:
    b, t, c = options["batch"], options["seq"], options["d_model"]
    if b * t < 2:
        raise GlassformerError("explain embedding needs at least two positions (batch * seq >= 2) "
                               "to show a repeated id")
    ids = rng.integers(0, VOCAB, size=(b, t))                          # (B, T)
    ids[-1, -1] = ids[0, 0]          # note: one id is made to repeat, for the backward's sake
    return Setup({"table": normal(rng, (VOCAB, c)), "ids": ids}, CASE, {})


def _steps(inputs, out, ctx, static):
    table, ids = inputs["table"], inputs["ids"]
    return [step(TEXT, "table", table, f"(V={table.shape[0]}, C={table.shape[1]})"),
            step(TEXT, "ids", ids, f"{shape_of(ids)} integers in [0, V)"),
            step(TEXT, "out", out, f"table[ids]: {shape_of(ids)} -> {shape_of(out)}")]


def _backward_steps(dout, grads, ctx, static):
    dtable = grads["table"]
    repeated = int(ctx.ids[0, 0])
    where = np.argwhere(ctx.ids == repeated)                           # (n, 2): (b, t) pairs
    rows = dout[ctx.ids == repeated]                                   # (n, C): G at those
    unused = np.setdiff1d(np.arange(dtable.shape[0]), ctx.ids)
    return [step(TEXT, "G", dout, shape_of(dout)),
            step(TEXT, "dtable", dtable, f"np.add.at(zeros(V, C), ids, G): {shape_of(dtable)}"),
            step(TEXT, "repeated_id", repeated, "ids[0,0]", id=repeated),
            step(TEXT, "repeated_at", where, f"argwhere(ids == {repeated}): {shape_of(where)}",
                 id=repeated),
            step(TEXT, "repeated_G", rows, f"G[ids == {repeated}]: {shape_of(rows)}",
                 id=repeated),
            step(TEXT, "repeated_dtable", dtable[repeated], f"dtable[{repeated}]: (C,)",
                 id=repeated),
            step(TEXT, "unused_ids", unused, "{0 .. V-1} - set(ids)")]


EMBEDDING = Part(name="embedding", defaults=dict(SIZES), make_inputs=_inputs,
                 forward_steps=_steps, backward_steps=_backward_steps, text=TEXT)
