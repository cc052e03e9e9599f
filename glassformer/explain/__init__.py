"""Step-by-step explanations: `glassformer attention` and `glassformer explain PART`.

    core.py            Step, Part, Setup, Result, Check; `run` and the finite-difference check
    render.py          prose (tables, ASCII heatmaps) in English or Chinese, and JSON
    parts/<topic>.py   one file per op topic: its parts, the code that reads that op's ctx, and
                       the parts' own English and Chinese texts; parts/__init__.py lists them

Parts run the op's own gradcheck case (glassformer/gradcheck/cases/) on small seeded inputs.
"""
