"""Gradient checking: `gradcheck(forward, backward, inputs)` and the registry of op cases."""
from glassformer.gradcheck.core import (DEFAULT_TOLERANCE, CaseResult, GradcheckCase, gradcheck,
                                        numeric_gradient, relative_error, run_case)

__all__ = ["DEFAULT_TOLERANCE", "CaseResult", "GradcheckCase", "gradcheck", "numeric_gradient",
           "relative_error", "run_case", "all_cases"]


def all_cases():
    """Every registered case (imported lazily so `import glassformer` stays light)."""
    from glassformer.gradcheck.cases import ALL_CASES
    return list(ALL_CASES)
