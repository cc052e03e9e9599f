"""Whole-batch losses on a batch split over MPI ranks, for objectives whose rows come in units:
DPO's pairs (a chosen and a rejected row), GRPO's groups (a prompt's G completions).

train/distributed.py gives each rank whole units (the objective's `shard`, built on
`unit_slice`). A rank runs the model on its own rows only: the forward and the backward, all of
a step's cost. The loss of these objectives couples rows (a pair's two log-probs, a group's
rewards, GRPO's token count over the batch), so each rank then gathers the few numbers per row
that every rank computed and evaluates the WHOLE batch's loss and metrics from them, exactly as
one process would, and back-propagates only its own rows' part:

    rank r:   forward of its rows              -> logps_r (n_r, ...)          the cost
              allgather, in rank order         -> logps (N, ...)    the one-process batch's order
              loss, metrics, dlogps of logps                 identical on every rank
              dlogps[its rows] -> backward of its rows       the ranks' grads sum to the gradient

What travels is tiny (DPO: 4 floats a pair; GRPO: a few floats a completion token) next to the
logits. comm is mpi4py's communicator (its pickle-based allgather, no MPI import here); None in
one process, where each function returns its input whole, so one process computes what it
always did.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError


def unit_slice(units: int, ranks: int, rank: int, what: str) -> slice:
    """Rank `rank`'s contiguous share of `units` units (pairs, prompts); they must split evenly.

    >>> unit_slice(6, 2, 1, "pairs")
    slice(3, 6, None)
    """
    if units % ranks:
        raise GlassformerError(f"{units} {what} do not split evenly over {ranks} ranks")
    share = units // ranks
    return slice(rank * share, (rank + 1) * share)


def gather_rows(comm, part: np.ndarray) -> tuple[np.ndarray, slice]:
    """(every rank's part stacked in rank order on axis 0, where this rank's part lies in it).

    >>> whole, mine = gather_rows(None, np.arange(3))
    >>> whole.tolist(), mine
    ([0, 1, 2], slice(0, 3, None))
    """
    if comm is None:
        return part, slice(0, len(part))
    parts = comm.allgather(part)
    start = sum(len(p) for p in parts[:comm.Get_rank()])
    return np.concatenate(parts), slice(start, start + len(part))


def gather_token_rows(comm, part: np.ndarray) -> tuple[np.ndarray, slice]:
    """gather_rows for per-token arrays (n_r, T_r) whose widths differ by rank: each part is
    right-padded with zeros (False) to the widest, (N, T_max). The padding lies past every row's
    last completion token, where the mask is False, so it changes no masked sum."""
    if comm is None:
        return part, slice(0, len(part))
    width = max(comm.allgather(part.shape[1]))
    padded = np.zeros((part.shape[0], width), dtype=part.dtype)     # (n_r, T_max)
    padded[:, :part.shape[1]] = part
    return gather_rows(comm, padded)


def check_whole_units(objective, batch_size: int, workers: int) -> None:
    """--batch-size counts an objective's units (Objective.unit: pairs, prompts), which must split
    evenly over --workers ranks; one line before any rank starts. Other objectives: nothing."""
    if objective.unit is None or workers <= 1 or batch_size % workers == 0:
        return
    unit, why = objective.unit
    raise GlassformerError(f"--batch-size {batch_size} ({unit}) does not split evenly over "
                           f"{workers} ranks ({why}); use a multiple of {workers}")
