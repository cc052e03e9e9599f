"""`glassformer serve`: an OpenAI-compatible HTTP server for glassformer's models.

    rows.py      RowCache: one preallocated KV cache whose rows start and end at different times
    sequence.py  Sequence: one reply, from token ids to the text events a client reads
    engine.py    Engine: continuous batching in one worker thread (admit, prefill, decode)
    protocol.py  OpenAI's request fields, checked, and its response and error shapes
    app.py       the Starlette app: routes, streaming, errors, the request log
    page.py      the chat page at `/` (static/), one self-contained HTML file

The package imports nothing: Starlette and uvicorn (the `serve` extra) load only with app.py.
"""
