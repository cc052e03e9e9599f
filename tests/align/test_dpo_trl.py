"""DPO against TRL's DPOTrainer on the same weights: a tiny random Llama with a PEFT LoRA.

TRL's own computation is called on the same padded batch: `DPOTrainer._compute_loss(model,
inputs)` (its concatenated forward, the reference forward and the metrics), then `backward()`
for the adapters' gradients. Building the trainer on a two-pair dataset is the robust way to get
its exact code path without running a whole Trainer loop. Both references are checked:
    ref base     the adapter switched off (TRL with a PEFT model and no "ref" adapter)
    ref adapter  the starting adapter frozen (TRL's "ref" copy of a pretrained adapter)
and the SFT term (--sft-weight W) against TRL's loss_type ["sigmoid", "sft"], loss_weights [1, W].
"""
import tempfile

import numpy as np
import pytest

from glassformer.io.peft import load_adapter
from glassformer.io.pretrained import load_pretrained
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.dpo import REF_PREFIX, DPOSettings, dpo_loss_and_grads

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

TRL_ATOL = 1e-4   # the bar (float32 both sides; measured ~1e-7)
V = 97
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected")


def hf_tokenizer():
    vocab = {f"t{i}": i for i in range(V - 1)}
    vocab["<eos>"] = V - 1
    model = tokenizers.models.WordLevel(vocab, unk_token="t0")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>",
                                                pad_token="t0")


def base_model():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=0.2, bos_token_id=None, eos_token_id=None, pad_token_id=0))


def trl_trainer(ref: str, folder, sft: float = 0.0):
    """A DPOTrainer on a PEFT model with a random adapter; for ref "adapter" the policy's
    adapter is then moved away from TRL's frozen "ref" copy, so the two differ."""
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                             lora_dropout=0.0, init_lora_weights=False)
    base = base_model()
    base.save_pretrained(folder / "base")
    torch.manual_seed(1)
    model = peft.get_peft_model(base, config)
    model.save_pretrained(folder / "start")
    dataset = datasets.Dataset.from_list([{"prompt": "t1", "chosen": " t2", "rejected": " t3"}] * 2)
    losses = dict(loss_type=["sigmoid", "sft"], loss_weights=[1.0, sft]) if sft else {}
    args = trl.DPOConfig(output_dir=tempfile.mkdtemp(dir=folder), beta=0.1, report_to=[],
                         per_device_train_batch_size=2, use_cpu=True, **losses)
    trainer = trl.DPOTrainer(model=model, args=args, train_dataset=dataset,
                             processing_class=hf_tokenizer())
    if ref == "base":
        trainer.model.delete_adapter("ref")   # then TRL's reference is the adapter switched off
    else:
        with torch.no_grad():
            for name, param in trainer.model.named_parameters():
                if ".default." in name:
                    param.add_(0.05 * torch.randn_like(param))
    trainer.model.save_pretrained(folder / "policy", selected_adapters=["default"])
    return trainer


def batch():
    """Two pairs: ids (4, T), chosen rows first, right-padded; completion_mask marks the
    completion's tokens (prompt lengths 3 and 2, completions of 1 to 4 tokens)."""
    rng = np.random.default_rng(5)
    lengths = [(3, 4), (2, 2), (3, 1), (2, 3)]     # (prompt, completion) per row
    T = max(p + c for p, c in lengths)
    ids = np.zeros((4, T), dtype=np.int64)
    completion = np.zeros((4, T), dtype=np.int64)
    attention = np.zeros((4, T), dtype=np.int64)
    prompts = [rng.integers(1, V, 3), rng.integers(1, V, 2)]
    for row, (p, c) in enumerate(lengths):
        ids[row, :p] = prompts[row % 2][:p]
        ids[row, p:p + c] = rng.integers(1, V, c)
        completion[row, p:p + c] = 1
        attention[row, :p + c] = 1
    return ids, attention, completion


def ours(folder, ref, sft=0.0):
    model = load_pretrained(folder / "base")
    policy, _ = load_adapter(folder / "policy", model)
    trained = {k: v for k, v in policy.items() if k.endswith(("lora_A", "lora_B"))}
    frozen = {**model.params, **{k: v for k, v in policy.items() if k not in trained}}
    if ref == "adapter":
        start, _ = load_adapter(folder / "start", model)
        frozen.update({REF_PREFIX + k: v for k, v in start.items()})
    ids, _, completion = batch()
    x = ids[:, :-1]
    y = np.where(completion[:, 1:] == 1, ids[:, 1:], -100)
    train_cfg = TrainConfig(objective="dpo",
                            objective_settings=DPOSettings(beta=0.1, sft_weight=sft))
    return model, dpo_loss_and_grads(model.family, trained, model.cfg, x, y, rng=None,
                                     frozen=frozen, train_cfg=train_cfg)


@pytest.mark.parametrize("ref, sft", [("base", 0.0), ("adapter", 0.0), ("adapter", 0.7)])
def test_dpo_loss_metrics_and_grads_equal_trls(ref, sft, tmp_path):
    trainer = trl_trainer(ref, tmp_path, sft)
    ids, attention, completion = batch()
    inputs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(attention),
              "completion_mask": torch.from_numpy(completion)}
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs, False)
    loss.backward()
    theirs = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    model, (our_loss, grads, metrics) = ours(tmp_path, ref, sft)
    assert our_loss == pytest.approx(loss.item(), abs=TRL_ATOL)
    assert abs(our_loss - np.log(2.0)) > 1e-3        # the reference differs from the policy
    for name in METRICS:
        assert metrics[name] == pytest.approx(theirs[name], abs=TRL_ATOL), name
    names = {f"layers.{i}.{kind}.{m}": f"blocks.{i}.{part}" for i in range(2)
             for kind, m, part in (("self_attn", "q_proj", "attn.wq"),
                                   ("self_attn", "v_proj", "attn.wv"),
                                   ("mlp", "up_proj", "mlp.w_up"))}
    checked = 0
    for name, param in trainer.model.named_parameters():
        if ".default." not in name:
            continue
        module, part = name[len("base_model.model.model."):].split(".lora_")
        key = f"{names[module]}.lora_{part.split('.')[0]}"
        np.testing.assert_allclose(grads[key], param.grad.numpy().T, atol=TRL_ATOL, rtol=0)
        assert np.abs(grads[key]).max() > 1e-6       # every gradient is there and moves
        checked += 1
    assert checked == len(grads) == 12
