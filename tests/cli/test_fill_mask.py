"""`glassformer fill-mask`: the candidates of each [MASK] from an exported masked-LM BERT, and
its one-line errors."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models import bert, gpt2
from glassformer.models.model import Model
from glassformer.tasks.fill_mask import fill_mask
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.char_wordpiece import BERT_SPECIALS

TEXT = "床前明月光，疑是地上霜。舉頭望明月，低頭思故鄉。"


@pytest.fixture
def folder(tmp_path):
    tokenizer = CharTokenizer.from_text(TEXT, BERT_SPECIALS)
    cfg = bert.BertConfig(vocab_size=tokenizer.vocab_size, max_seq_len=16, n_layer=1, n_head=2,
                          d_model=8, d_ff=16, mlm_head=True)
    params = bert.init_params(cfg, np.random.default_rng(0))
    save_pretrained(Model(cfg, params, tokenizer), tmp_path / "bert")
    return tmp_path / "bert"


def test_prints_best_fill_and_top_k_per_mask(folder, capsys):
    assert main(["fill-mask", "--model", str(folder), "--top-k", "3", "床[MASK]明月光，疑是[MASK]上霜。"]) == 0
    out = capsys.readouterr().out.splitlines()
    model = load_pretrained(folder)
    expected = fill_mask(model, "床[MASK]明月光，疑是[MASK]上霜。", top_k=3)
    assert len(expected) == 2 and all(len(options) == 3 for options in expected)
    assert out[0] == f"床{expected[0][0][0]}明月光，疑是{expected[1][0][0]}上霜。"
    assert out[1] == "[MASK] 1 of 2:" and out[5] == "[MASK] 2 of 2:"
    assert out[2].split()[1] == expected[0][0][0]
    probs = [p for _, p in expected[0]]
    assert probs == sorted(probs, reverse=True) and 0.0 < probs[0] <= 1.0
    assert main(["fill-mask", "--model", str(folder), "--json", "月[MASK]"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert len(record["masks"]) == 1 and len(record["masks"][0]) == 5


@pytest.mark.parametrize("text,message", [
    ("床前明月光", "the text has no [MASK]"),
    ("床前明月光，疑是地上霜。舉頭望明[MASK]", "longer than the model's position table"),
])
def test_bad_text_is_one_line(folder, text, message, capsys):
    assert main(["fill-mask", "--model", str(folder), text]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_decoder_is_refused_in_one_line(tmp_path, capsys):
    cfg = gpt2.GPT2Config(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=8)
    save_pretrained(Model(cfg, gpt2.init_params(cfg, np.random.default_rng(0))), tmp_path)
    assert main(["fill-mask", "--model", str(tmp_path), "a [MASK]"]) == 2
    assert "needs a BERT with a masked-LM head" in capsys.readouterr().err
