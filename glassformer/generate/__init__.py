"""Decoding: how a model's next tokens are chosen, whatever they are used for.

    generate.py   the token-by-token loop of a causal LM (prefill, then one token per step with a
                  KVCache; KVCache itself is in blocks/)
    sampling.py   the one sampler (generate, chat, serve): Sampling records, greedy, temperature,
                  top-k, top-p, applied to a batch of rows in one call
    beam.py       an encoder-decoder's greedy and beam search
    stream.py     ids to printable text as they arrive
    constrain/    a JSON schema's masks over the vocabulary (structured outputs; its __init__
                  lists the files): generate(..., constraint=table) applies them per row

The uses built on these (chat, translate) are tasks (glassformer/tasks/); chat templates (a
conversation rendered and tokenized as the model was trained) are tokenizers/chat_template.py's.
"""
