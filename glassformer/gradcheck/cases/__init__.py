"""Every gradcheck case, gathered from one module per op or block.

To add an op: write `cases/<op>.py` with a `CASES` list of `GradcheckCase`, then add it below.
"""
from __future__ import annotations

from glassformer.gradcheck.cases import attention

_MODULES = [
    attention,
]

ALL_CASES = [case for module in _MODULES for case in module.CASES]
