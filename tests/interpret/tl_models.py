"""GPT-2- and LLaMA-shaped transformers models with random weights (norm scales and biases
too, so that a hook before a norm's scale differs from one after it), saved to a folder that
glassformer and TransformerLens's TransformerBridge both load, offline."""
from __future__ import annotations

VOCAB = 50


def _tiny_tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token="t1",
                                   bos_token="t1")


def hf_model(kind: str):
    import torch
    import transformers
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=VOCAB,
                                      n_positions=32)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, hidden_size=32,
                                       intermediate_size=64, vocab_size=VOCAB,
                                       max_position_embeddings=64, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def saved(kind: str, folder) -> tuple:
    """(glassformer Model, TransformerBridge, the transformers model) of one random model."""
    import glassformer
    from transformer_lens.model_bridge import TransformerBridge
    model = hf_model(kind)
    model.save_pretrained(folder)
    _tiny_tokenizer().save_pretrained(folder)
    bridge = TransformerBridge.boot_transformers(str(folder), hf_model=model)
    ours = glassformer.load_pretrained(str(folder), tokenizer=False)
    return ours, bridge, model
