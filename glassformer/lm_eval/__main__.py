"""`python -m glassformer.lm_eval ...`: lm-eval's own command line (lm_eval.__main__'s
cli_evaluate), with the model name "glassformer" registered first."""
import glassformer.lm_eval  # noqa: F401  registers "glassformer"
from lm_eval.__main__ import cli_evaluate

if __name__ == "__main__":
    cli_evaluate()
