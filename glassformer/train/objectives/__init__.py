"""Training objectives by name (objective.py says what one is): the one registry.

TrainConfig.objective names one of these; a run saves the name, so a resumed run (and every rank
of a data-parallel run) uses the same one.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.train.objectives.dpo import DPO
from glassformer.train.objectives.grpo import GRPO
from glassformer.train.objectives.mlm import MLM
from glassformer.train.objectives.moe_next_token import MOE_NEXT_TOKEN
from glassformer.train.objectives.next_token import NEXT_TOKEN
from glassformer.train.objectives.objective import Objective
from glassformer.train.objectives.seq2seq import SEQ2SEQ
from glassformer.train.objectives.sft import SFT

# name -> Objective, one line each
OBJECTIVES: dict[str, Objective] = {
    NEXT_TOKEN.name: NEXT_TOKEN,
    MLM.name: MLM,
    SFT.name: SFT,
    SEQ2SEQ.name: SEQ2SEQ,
    DPO.name: DPO,
    GRPO.name: GRPO,
    MOE_NEXT_TOKEN.name: MOE_NEXT_TOKEN,
}


def objective_of(name: str) -> Objective:
    """The Objective called `name` ("next-token", ...)."""
    if name not in OBJECTIVES:
        raise GlassformerError(f"unknown training objective {name!r}; known: {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]
