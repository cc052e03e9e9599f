"""The lm-evaluation-harness door: importing this registers the model name "glassformer".

    import glassformer.lm_eval, lm_eval
    lm_eval.simple_evaluate(model="glassformer", model_args="pretrained=smollm2", tasks=[...])

    python -m glassformer.lm_eval run --model glassformer --model_args pretrained=smollm2 ...

lm-eval is an optional extra (`pip install -e ".[eval]"`), never imported by `import
glassformer`: only this package reads it.

    requests.py   the three request types as tokens (pure; reuses tasks/evaluate's encoding)
    model.py      GlassformerLM, the LM subclass (loglikelihood, _rolling, generate_until)
    __main__.py   lm-eval's own command line with the name registered
    tasks.py      arc_easy_local, piqa_local, winogrande_local: lm-eval task YAMLs over the
                  shared JSONL (python -m glassformer.lm_eval.tasks --data-dir D --out DIR)
"""
from __future__ import annotations

from glassformer.errors import GlassformerError

try:
    import lm_eval.models  # noqa: F401  lm-eval's own names (hf, local-completions, ...) first:
    from lm_eval.api.registry import register_model   # its registry loads them only while empty
except ImportError as error:     # one line, not a traceback, when the extra is missing
    raise GlassformerError('lm-eval is not installed: pip install -e ".[eval]" '
                           f"(or pip install lm-eval) [{error}]") from None

from glassformer.lm_eval.model import GlassformerLM

register_model("glassformer")(GlassformerLM)

__all__ = ["GlassformerLM"]
