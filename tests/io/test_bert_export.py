"""A masked-LM BERT with a char vocabulary, exported with save_pretrained: transformers'
BertForMaskedLM, BertTokenizerFast and pipeline("fill-mask") load it and agree with ours, and
glassformer loads it back."""
import json

import numpy as np
import pytest

from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models import bert
from glassformer.models.model import Model
from glassformer.tasks.fill_mask import fill_mask, framed_ids
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.char_wordpiece import BERT_SPECIALS as SPECIALS

EXPORT_RTOL = 1e-5   # the bar: the same float32 weights through torch's kernels
TEXT = "秦川雄帝宅，函谷壯皇居。綺殿千尋起，離宮百雉餘。床前明月光，疑是地上霜。\n"
LINES = ["床前明月光，疑是地上霜。", "秦川雄帝宅，函谷壯皇居。", "綺殿千尋起，離宮百雉餘？"]


def tiny_model():
    tokenizer = CharTokenizer.from_text(TEXT + "？", SPECIALS)
    cfg = bert.BertConfig(vocab_size=tokenizer.vocab_size, max_seq_len=24, n_layer=2, n_head=2,
                          d_model=16, d_ff=32, mlm_head=True)
    rng = np.random.default_rng(0)
    # larger weights than init, random biases and gains: the logits spread, top-1 is clear
    params = {k: (v * (1.0 if v.ndim == 1 else 20.0)
                  + rng.standard_normal(v.shape) * (0.3 if v.ndim == 1 else 0.0)
                  ).astype(np.float32) for k, v in bert.init_params(cfg, rng).items()}
    return Model(cfg, params, tokenizer)


def test_export_loads_back_in_glassformer_with_the_same_ids_and_logits(tmp_path):
    model = tiny_model()
    save_pretrained(model, tmp_path)
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == model.tokenizer.vocab_size
    assert lines[model.tokenizer.special_tokens["[MASK]"]] == "[MASK]"
    assert lines[model.tokenizer.encode("\n")[0]].startswith("[unused")   # a line cannot hold it
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["do_lower_case"] is False and config["tokenize_chinese_chars"] is True
    again = load_pretrained(tmp_path)
    assert again.cfg == model.cfg
    for line in LINES:
        ids = framed_ids(model.tokenizer, line)
        np.testing.assert_array_equal(framed_ids(again.tokenizer, line), ids)
        ours, back = model(ids[None]), again(ids[None])
        # loaded weights are (in, out) views of torch's layout: another summation order
        assert np.abs(back - ours).max() <= EXPORT_RTOL * np.abs(ours).max()
    ours = fill_mask(model, "床前明月[MASK]，疑是地上霜。", top_k=3)[0]
    back = fill_mask(again, "床前明月[MASK]，疑是地上霜。", top_k=3)[0]
    assert [token for token, _ in back] == [token for token, _ in ours]
    np.testing.assert_allclose([p for _, p in back], [p for _, p in ours], rtol=1e-4)


transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


@pytest.mark.slow
def test_transformers_loads_the_export_same_ids_logits_and_fill_mask_top1(tmp_path):
    model = tiny_model()
    save_pretrained(model, tmp_path)
    hf_model = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert hf_tokenizer.is_fast   # BertTokenizerFast (transformers 5 calls it BertTokenizer)
    from_vocab = transformers.BertTokenizerFast(str(tmp_path / "vocab.txt"), do_lower_case=False)
    masked = [line[:3] + "[MASK]" + line[4:] for line in LINES]
    for text in LINES + masked:
        ids = framed_ids(model.tokenizer, text)
        assert hf_tokenizer(text)["input_ids"] == ids.tolist(), text
        assert from_vocab(text)["input_ids"] == ids.tolist(), text
        with torch.no_grad():
            theirs = hf_model(torch.from_numpy(ids[None])).logits.numpy()
        ours = model(ids[None])
        err = np.abs(ours - theirs).max() / np.abs(theirs).max()
        assert err <= EXPORT_RTOL, (text, err)
    fill = transformers.pipeline("fill-mask", model=hf_model, tokenizer=hf_tokenizer, top_k=3)
    for text in masked:
        ours = fill_mask(model, text, top_k=3)[0]
        theirs = fill(text)
        assert ours[0][0] == theirs[0]["token_str"], text
        assert ours[0][1] == pytest.approx(theirs[0]["score"], rel=1e-4)
