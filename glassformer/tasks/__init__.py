"""Tasks: the uses of a model, each one call from text in to an answer out.

A task is a use of a model, not a part of one. It takes a loaded `Model` (models/), frames the
text with the model's tokenizer (tokenizers/), runs the model's forward or a decoding algorithm
(generate/), and returns what a person asked for: the likely tokens for a blank, a vector, a
translation, a reply, a loss. A task writes no new math; it checks that the model is of the kind
it needs (`Family.kind`: causal, encoder, encoder-decoder) and says so in one line when it is not.
transformers draws the same line: `pipelines/` (tasks) beside `generation/` (decoding).

    fill_mask.py   fill_mask(model, text, top_k)      the top-k tokens a masked-LM BERT puts in
                                                      each [MASK], with probabilities
    embed.py       embed(model, texts)                sentence embeddings: mean pooling, unit
                                                      length (sentence-transformers' MiniLM)
    translate.py   translate(model, inputs, beam)     an encoder-decoder's output for each
                                                      source, greedy or by beam search
    chat.py        open_chat(model) -> ChatSession    a conversation in the model's chat
                                                      template, its KV cache kept between turns
    perplexity.py  perplexity(model, text)            loss, perplexity and bits per byte of a
                                                      causal LM on a text
    preferences.py preference_accuracy(model, adapter, pairs)   a DPO adapter's reward
                                                      accuracy and margin on preference pairs

Each task is also `glassformer.<name>` (the package top) and a command (`glassformer fill-mask`,
`embed`, `translate`, `chat`, `eval`: cli/). A new task, such as the coming `serve`, is one
module here; CONTRIBUTING.md ("Adding a task") lists every file it touches.

This package imports none of its modules: `import glassformer.tasks.fill_mask` reads neither the
chat templates' jinja2 nor the training data code.
"""
