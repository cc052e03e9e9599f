"""LoRA on a quantized base (QLoRA's idea: the base stays in its blocks, the adapters are float32):
the adapters' gradients equal those computed on the same base widened to float32, for every
format and every linear layer adapted. Tolerance 1e-5 of each gradient's largest entry: the
quantized products widen W a slab at a time, the same numbers in another BLAS blocking."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package writes GGUF files: pip install gguf")

from glassformer.io.gguf_write import quantize_gguf  # noqa: E402
from glassformer.io.peft import (ALL_LINEAR, LoraConfig, adapter_constants,  # noqa: E402
                                 init_adapters, load_adapter, save_adapter)
from glassformer.io.pretrained import load_pretrained  # noqa: E402
from glassformer.models.llama import LlamaConfig, init_params  # noqa: E402
from glassformer.ops.quant import FORMATS, QuantizedMatrix  # noqa: E402
from glassformer.train.step import loss_and_grads  # noqa: E402

CFG = LlamaConfig(vocab_size=64, max_seq_len=32, n_layer=2, n_head=4, n_kv_head=2, d_model=256,
                  d_ff=512, norm_eps=2.0 ** -16, rope_theta=500.0, tie_embeddings=True)
RTOL = 1e-5


def write_f32(path):
    """A tied tiny LLaMA as GGUF float32 (q/k rows left unpermuted: any rows do here)."""
    from glassformer.io.gguf import expected_tensors

    params = init_params(CFG, np.random.default_rng(0))
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in [(writer.add_block_count, CFG.n_layer), (writer.add_context_length, 32),
                       (writer.add_embedding_length, CFG.d_model),
                       (writer.add_feed_forward_length, CFG.d_ff),
                       (writer.add_head_count, CFG.n_head), (writer.add_head_count_kv, 2),
                       (writer.add_rope_freq_base, CFG.rope_theta),
                       (writer.add_layer_norm_rms_eps, CFG.norm_eps)]:
        add(value)
    writer.add_token_list([f"t{k}" for k in range(CFG.vocab_size)])
    for gguf_name, (name, transpose, _) in expected_tensors(CFG).items():
        value = params[name].T if transpose else params[name]
        writer.add_tensor(gguf_name, np.ascontiguousarray(value, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_adapter_grads_on_a_quantized_base_equal_the_float32_base(tmp_path, kind):
    write_f32(tmp_path / "f32.gguf")
    quantize_gguf(tmp_path / "f32.gguf", kind, tmp_path / "q.gguf")
    quantized = load_pretrained(tmp_path / "q.gguf", tokenizer=False)
    widened = load_pretrained(tmp_path / "q.gguf", tokenizer=False, dequantize=True)
    assert isinstance(quantized.params["blocks.1.mlp.w_down"], QuantizedMatrix)
    lora_cfg = LoraConfig(r=4, targets=ALL_LINEAR)
    rng = np.random.default_rng(1)
    adapters = init_adapters(quantized, lora_cfg, rng)
    adapters = {k: v + 0.05 * rng.standard_normal(v.shape).astype(np.float32)   # B non-zero
                for k, v in adapters.items()}
    x, y = rng.integers(0, 64, (2, 12)), rng.integers(0, 64, (2, 12))
    grads = {}
    for name, model in (("quantized", quantized), ("float32", widened)):
        frozen = {**model.params, **adapter_constants(adapters, lora_cfg)}
        grads[name] = loss_and_grads(model.family, adapters, CFG, x, y, rng=None,
                                     frozen=frozen)
    (loss_q, got), (loss_f, want) = grads["quantized"], grads["float32"]
    assert loss_q == pytest.approx(loss_f, rel=1e-6)
    assert sorted(got) == sorted(want) == sorted(adapters)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=0,
                                   atol=RTOL * np.abs(want[key]).max(), err_msg=key)
    save_adapter(tmp_path / "adapter", quantized, adapters, lora_cfg)   # its probe reads blocks
    for model in (quantized, widened):                                    # the same base values
        loaded, _ = load_adapter(tmp_path / "adapter", model)
        np.testing.assert_array_equal(loaded["blocks.0.attn.wq.lora_A"],
                                      adapters["blocks.0.attn.wq.lora_A"])
