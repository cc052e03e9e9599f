"""glassformer: a Transformer you can see through, every forward and backward pass by hand in NumPy."""
from glassformer.tokenizers.load import load_tokenizer  # noqa: F401  (glassformer.load_tokenizer)
from glassformer.io.pretrained import load_pretrained  # noqa: F401  (glassformer.load_pretrained)
from glassformer.viewer.inspection import inspect  # noqa: F401  (glassformer.inspect)
from glassformer.generate.templates import render_chat  # noqa: F401  (glassformer.render_chat)
from glassformer.tasks.fill_mask import fill_mask  # noqa: F401  (glassformer.fill_mask)
from glassformer.tasks.translate import translate  # noqa: F401  (glassformer.translate)
