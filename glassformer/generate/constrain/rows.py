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


def mask_rows(logits: np.ndarray, constraints: list) -> np.ndarray:
    """(B, V) logits with -inf where each constrained row's grammar refuses a token (a copy
    when any row is constrained)."""
    rows = [i for i, c in enumerate(constraints) if c is not None]
    if not rows:
        return logits
    logits = logits.copy()
    for i in rows:
        allowed = constraints[i].table.allowed(constraints[i].state)      # (V,)
        logits[i, ~allowed[:logits.shape[1]]] = -np.inf
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
