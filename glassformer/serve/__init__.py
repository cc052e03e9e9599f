"""`glassformer serve`: an OpenAI-compatible HTTP server for glassformer's models.

    rows.py      RowCache: one preallocated KV cache whose rows start and end at different times
    sequence.py  Sequence: one reply, from token ids to the text events a client reads
    engine.py    Engine: continuous batching in one worker thread (admit, prefill, decode)
    protocol.py  OpenAI's request fields, checked, and its response and error shapes
    prompts.py   a request's prompt ids (plain text, or the model's chat template) and stop ids
    replies.py   the engine's events as a whole response or server-sent events
    app.py       the Starlette app: routes, errors, the request log
    page.py      the chat page at `/` (static/), one self-contained HTML file
    run.py       serve(): the KV cache's size checked, the port opened, uvicorn run
    timeline.py  pictures of the rows after each engine step (who joins, leaves, owns which
                 column), drawn as text or HTML for the course

The package imports nothing: Starlette and uvicorn (the `serve` extra) load only with app.py
and run.py's serve().
"""
