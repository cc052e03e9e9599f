"""Training objectives by name (train/objective.py says what one is).

TrainConfig.objective names one of these; a run saves the name, so a resumed run (and every rank
of a data-parallel run) uses the same one.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.train.mlm import MLM
from glassformer.train.objective import NEXT_TOKEN, Objective
from glassformer.train.pairs import SEQ2SEQ
from glassformer.train.sft import SFT

# name -> Objective, one line each
OBJECTIVES: dict[str, Objective] = {
    NEXT_TOKEN.name: NEXT_TOKEN,
    MLM.name: MLM,
    SFT.name: SFT,
    SEQ2SEQ.name: SEQ2SEQ,
}


def objective_of(name: str) -> Objective:
    """The Objective called `name` ("next-token", ...)."""
    if name not in OBJECTIVES:
        raise GlassformerError(f"unknown training objective {name!r}; known: {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]
