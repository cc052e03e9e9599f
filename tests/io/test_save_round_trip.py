"""save_pretrained(model, dir) round-trips every family load_pretrained reads that has a
Hugging Face class: GPT-2, LLaMA and Qwen2, BERT with and without the masked-LM head, Marian,
BART and mBART. A tiny random model of each is saved; glassformer loads it back with the same
config and the same params, and transformers' Auto class loads it as the expected class with the
same logits (hidden states for a bare BertModel) within ROUND_TRIP_RTOL."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models import bert, deepseek_v3, gemma3, gpt2, gpt_oss, llama, seq2seq
from glassformer.models.model import Model
from glassformer.models.registry import family

# The same float32 weights through torch's kernels, relative to the largest output
# (measured: ~3e-7).
ROUND_TRIP_RTOL = 1e-5
V = 29
SIZES = dict(vocab_size=V, max_seq_len=12, n_head=2, d_model=16)
SEQ2SEQ = dict(SIZES, n_layer=2, n_dec_layer=1, d_ff=24, pad_id=0, eos_id=1, decoder_start_id=0)
# name -> (config, the transformers class its folder loads as)
CONFIGS = {
    "gpt2": (gpt2.GPT2Config(**SIZES, n_layer=2), "GPT2LMHeadModel"),
    "gpt2-nobias-untied-erf": (gpt2.GPT2Config(**SIZES, n_layer=1, bias=False,
                                               tie_embeddings=False, activation="gelu"),
                               "GPT2LMHeadModel"),
    "llama": (llama.LlamaConfig(**SIZES, n_layer=2, n_kv_head=1, d_ff=24), "LlamaForCausalLM"),
    "qwen2": (llama.LlamaConfig(**SIZES, n_layer=1, n_kv_head=2, d_ff=24, qkv_bias=True,
                                tie_embeddings=True), "Qwen2ForCausalLM"),
    "bert": (bert.BertConfig(**SIZES, n_layer=2, d_ff=24), "BertModel"),
    "bert-mlm": (bert.BertConfig(**SIZES, n_layer=1, d_ff=24, mlm_head=True),
                 "BertForMaskedLM"),
    "marian": (seq2seq.Seq2SeqConfig(**SEQ2SEQ, scale_embedding=True, activation="silu"),
               "MarianMTModel"),
    "bart": (seq2seq.Seq2SeqConfig(**SEQ2SEQ, positions="learned", pos_offset=2, emb_norm=True,
                                   logits_bias=True), "BartForConditionalGeneration"),
    "mbart": (seq2seq.Seq2SeqConfig(**SEQ2SEQ, positions="learned", pos_offset=2, emb_norm=True,
                                    norm_position="pre"), "MBartForConditionalGeneration"),
    "deepseek_v3": (deepseek_v3.DeepseekV3Config(**SIZES, n_layer=2, d_ff=24, q_lora_rank=6,
                                                 kv_lora_rank=5, qk_nope_head_dim=3,
                                                 qk_rope_head_dim=4, v_head_dim=6),
                    "DeepseekV3ForCausalLM"),
    "mistral": (llama.LlamaConfig(**SIZES, n_layer=2, n_kv_head=1, d_ff=24, sliding_window=4),
                "MistralForCausalLM"),
    "gemma3": (gemma3.Gemma3Config(**SIZES, n_layer=3, n_kv_head=1, d_ff=24, sliding_window=4,
                                   full_layers=(2,), final_softcap=20.0), "Gemma3ForCausalLM"),
    "gpt_oss": (gpt_oss.GptOssConfig(**SIZES, n_layer=2, n_kv_head=1, n_experts=3, d_ff=8,
                                     sliding_window=4, full_layers=(1,)),
                "GptOssForCausalLM"),
}
# What transformers' classes always have comes back, as zeros: GPT-2's biases and the
# encoder-decoder's final_logits_bias.
ALWAYS = {"gpt2": {"bias": True}, "transformer": {"logits_bias": True}}


def random_model(cfg) -> Model:
    """Weights wider than init and biases and gains off their init, so a wrong wire shows."""
    rng = np.random.default_rng(0)
    params = family(cfg.ARCH).init_params(cfg, rng)
    return Model(cfg, {name: (value * 5.0 if value.ndim == 2 else
                              value + 0.1 * rng.standard_normal(value.shape)).astype(np.float32)
                       for name, value in params.items()})


def inputs(model: Model) -> dict:
    """Two sequences of ids (and decoder ids for an encoder-decoder)."""
    rng = np.random.default_rng(1)
    ids = {"ids": rng.integers(2, V, (2, 10))}
    if model.arch == "transformer":
        ids["decoder_input_ids"] = rng.integers(2, V, (2, 7))
    return ids


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_glassformer_loads_back_the_same_config_and_params(name, tmp_path):
    cfg, _ = CONFIGS[name]
    model = random_model(cfg)
    save_pretrained(model, tmp_path)
    again = load_pretrained(tmp_path)
    assert again.cfg == replace(cfg, **ALWAYS.get(cfg.ARCH, {}))
    assert set(again.params) >= set(model.params)
    for key, value in again.params.items():
        if key in model.params:
            np.testing.assert_array_equal(value, model.params[key])
        else:   # written as zeros: GPT-2's biases, final_logits_bias
            assert not np.any(value), key
    batch = inputs(model)
    np.testing.assert_array_equal(again(batch["ids"], decoder_input_ids=batch.get(
        "decoder_input_ids")), model(batch["ids"], decoder_input_ids=batch.get(
            "decoder_input_ids")))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_loads_the_same_model(name, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg, hf_class = CONFIGS[name]
    model = random_model(cfg)
    save_pretrained(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [hf_class]
    auto = {"causal": transformers.AutoModelForCausalLM,
            "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
            "encoder": (transformers.AutoModelForMaskedLM if getattr(cfg, "mlm_head", False)
                        else transformers.AutoModel)}[family(cfg.ARCH).kind]
    hf = auto.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == hf_class
    batch = inputs(model)
    torch_batch = {"input_ids": torch.from_numpy(batch["ids"])}
    if "decoder_input_ids" in batch:
        torch_batch["decoder_input_ids"] = torch.from_numpy(batch["decoder_input_ids"])
    with torch.no_grad():
        out = hf(**torch_batch)
    theirs = (out.logits if hasattr(out, "logits") else out.last_hidden_state).numpy()
    ours = model(batch["ids"], decoder_input_ids=batch.get("decoder_input_ids"))
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= ROUND_TRIP_RTOL * np.abs(theirs).max()
