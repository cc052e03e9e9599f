"""The recipes (train/recipes/): each command picks one, and each gives the settings it always
gave; an --objective the --arch cannot train is refused in one line."""
import pytest

from glassformer.errors import GlassformerError
from glassformer.io.lora_modules import ALL_LINEAR, family_targets
from glassformer.io.peft import LoraConfig
from glassformer.models.bert import BertConfig
from glassformer.models.gpt2 import GPT2Config
from glassformer.models.llama import LlamaConfig
from glassformer.models.seq2seq import Seq2SeqConfig
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.mlm import MLMSettings
from glassformer.train.recipes import (G2P, SHAKESPEARE, TANG_BERT, TANG_SFT, model_config,
                                       new_run_settings, recipe_for)


def test_each_arch_picks_its_recipe():
    assert recipe_for(None) is SHAKESPEARE and recipe_for("gpt2") is SHAKESPEARE
    assert recipe_for("llama") is SHAKESPEARE
    assert recipe_for("bert") is TANG_BERT and recipe_for("transformer") is G2P


def test_the_recipes_keep_their_numbers():
    model, start = new_run_settings(SHAKESPEARE, {}, {})
    assert start.train_cfg == TrainConfig() and start.after_init is None
    assert model_config(model, 65, 64) == GPT2Config(vocab_size=65, max_seq_len=64, bias=False)
    llama = model_config({**model, "arch": "llama"}, 65, 64)
    assert llama == LlamaConfig(vocab_size=65, max_seq_len=64, n_kv_head=4)
    model, start = new_run_settings(TANG_BERT, {}, {})
    assert start.train_cfg == TrainConfig(
        objective="mlm", block_size=128, batch_size=16, lr=2e-3, min_lr=2e-4, warmup_iters=100,
        max_iters=20000, lr_decay_iters=20000, weight_decay=0.01, beta2=0.999,
        objective_settings=MLMSettings(mask_prob=0.4), hold_iters=1500, eval_interval=500, eval_iters=10,
        held_keys="pos_emb,blocks.0.attn.wq,blocks.0.attn.bq,blocks.0.attn.wk,blocks.0.attn.bk")
    assert model_config(model, 100, 128) == BertConfig(
        vocab_size=100, max_seq_len=128, n_layer=2, n_head=4, d_model=128, mlm_head=True,
        activation="gelu_tanh")
    model, start = new_run_settings(G2P, {"max_iters": 7}, {"n_layer": 1})
    assert start.train_cfg == TrainConfig(
        objective="seq2seq", label_smoothing=0.1, batch_size=64, lr=1e-3, warmup_iters=400,
        max_iters=7, min_lr=1e-4, lr_decay_iters=10000, weight_decay=0.01, beta2=0.98,
        eval_interval=500, eval_iters=10)
    assert model_config(model, 71, 29) == Seq2SeqConfig(
        vocab_size=71, max_seq_len=29, n_layer=1, n_head=4, d_model=128, dropout=0.1,
        pad_id=0, eos_id=1, decoder_start_id=2)
    assert TrainConfig(**TANG_SFT.train) == TrainConfig(
        batch_size=4, block_size=256, lr=2e-3, min_lr=2e-4, warmup_iters=10, lr_decay_iters=300,
        max_iters=300, weight_decay=0.0, beta2=0.999, eval_interval=50, eval_iters=4)
    # every linear layer, named per family (issue 49): on SmolLM2 (LLaMA) the seven projections
    assert TANG_SFT.lora == LoraConfig(r=16, alpha=32.0, dropout=0.0, targets=ALL_LINEAR)
    assert family_targets("llama", LlamaConfig(n_layer=1)) == (
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize("arch, objective, message", [
    ("gpt2", "mlm", "--objective mlm trains an encoder: give --arch bert (got --arch gpt2"),
    ("llama", "seq2seq", "--objective seq2seq trains an encoder-decoder: give --arch transformer"),
    ("bert", "next-token", "--arch bert trains with --objective mlm, got --objective next-token"),
    ("transformer", "mlm", "--arch transformer trains with --objective seq2seq, got"),
    ("gpt2", "sft", "--arch gpt2 trains with --objective next-token, got --objective sft"),
    ("gpt2", "nope", "unknown training objective 'nope'"),
])
def test_an_objective_the_arch_cannot_train_is_one_line(arch, objective, message):
    with pytest.raises(GlassformerError, match=message.replace("(", r"\(")):
        recipe_for(arch, objective)
