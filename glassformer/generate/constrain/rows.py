"""A row's constraint: the logits it may sample from, and its state after each token.

    logits (B, V) --mask_rows--> -inf where a row's grammar refuses the token --sample-->
    ids (B,) --advance_rows--> each constrained row's automaton state moves by its token's bytes

Rows without a constraint (None) are untouched, so constrained and free replies share a batch.
Rows writing the same schema share one MaskTable: a state's mask is computed once for all.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.constrain.mask import DEAD, MaskTable


@dataclass
class RowConstraint:
    """One row's place in its grammar: the shared table and this row's state id."""
    table: MaskTable
    state: int

    @classmethod
    def start(cls, table: MaskTable) -> "RowConstraint":
        return cls(table, table.start)

    def complete(self) -> bool:
        """The value is written (end-of-text allowed)."""
        return self.table.accepting(self.state)


def mask_rows(logits: np.ndarray, constraints: list, inplace: bool = False) -> np.ndarray:
    """(B, V) logits with -inf where each constrained row's grammar refuses a token (a copy
    when any row is constrained, unless inplace). Only a state's shorter index list is
    touched (MaskTable.kept): the refused ids set to -inf, or the allowed ids' logits kept
    and the row refilled around them."""
    rows = [i for i, c in enumerate(constraints) if c is not None]
    if not rows:
        return logits
    if not inplace:
        logits = logits.copy()
    width = logits.shape[1]
    for i in rows:
        allow, ids = constraints[i].table.kept(constraints[i].state)
        ids = ids[ids < width] if ids.size and ids[-1] >= width else ids
        if allow:
            keep = logits[i, ids]                                          # (K,)
            logits[i] = -np.inf
            logits[i, ids] = keep
        else:
            logits[i, ids] = -np.inf
    return logits


def advance_rows(constraints: list, ids: np.ndarray) -> None:
    """Move each constrained row's state by the token it chose (an end-of-text id leaves it)."""
    for constraint, token in zip(constraints, ids.tolist()):
        if constraint is None or token in constraint.table.eos_ids:
            continue
        after = constraint.table.advance(constraint.state, int(token))
        if after == DEAD:
            raise GlassformerError(f"token {token} is outside the grammar (a masked token "
                                   "was chosen)")
        constraint.state = after
