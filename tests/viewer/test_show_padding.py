"""show's --pad-to is for encoders (their family's kind, not whether it has a KV cache): a
causal model is refused in one line."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import gpt2
from glassformer.models.model import Model
from glassformer.viewer.show import padded


def test_pad_to_on_a_causal_model_is_refused():
    cfg = gpt2.GPT2Config(vocab_size=11, max_seq_len=8, n_layer=1, n_head=2, d_model=8)
    model = Model(cfg, gpt2.init_params(cfg, np.random.default_rng(0)))
    with pytest.raises(GlassformerError, match="--pad-to is for encoders"):
        padded(model, "hi", 4)
