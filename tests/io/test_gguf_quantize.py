"""io/gguf_write.py (`glassformer quantize`) and io/gguf.py's quantized loading on tiny GGUF files.

Round trip: the file quantize writes, loaded with its matrices kept quantized, gives the logits of
the source model whose matrices were quantized and dequantized in memory (ops/quant/), to float32
rounding: the same weights, multiplied slab by slab (tolerance 1e-5 of the logits' scale)."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package reads GGUF files: pip install gguf")

from glassformer.errors import CheckpointError, GlassformerError  # noqa: E402
from glassformer.io.gguf import LAYER_TENSORS  # noqa: E402
from glassformer.io.gguf_write import quantize_gguf  # noqa: E402
from glassformer.io.pretrained import load_pretrained  # noqa: E402
from glassformer.models.llama import LlamaConfig, init_params  # noqa: E402
from glassformer.models.model import Model  # noqa: E402
from glassformer.ops.quant import (FORMATS, QuantizedMatrix, quantize_matrix,  # noqa: E402
                                   quantize_weight)

CFG = LlamaConfig(vocab_size=64, max_seq_len=32, n_layer=2, n_head=4, n_kv_head=2, d_model=256,
                  d_ff=512, norm_eps=2.0 ** -16, rope_theta=500.0, tie_embeddings=False)
RTOL = 1e-5
IDS = np.array([[1, 5, 9, 3, 7, 63]])


def permute(weight, n_heads):
    """convert_hf_to_gguf.py's q/k row permutation (half layout -> pair layout)."""
    rows = weight.shape[0]
    return weight.reshape(n_heads, 2, rows // n_heads // 2, -1).swapaxes(1, 2).reshape(
        weight.shape)


def write_source(path, params, qtype=None):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(CFG.n_layer)
    writer.add_context_length(CFG.max_seq_len)
    writer.add_embedding_length(CFG.d_model)
    writer.add_feed_forward_length(CFG.d_ff)
    writer.add_head_count(CFG.n_head)
    writer.add_head_count_kv(CFG.n_kv_head)
    writer.add_rope_freq_base(CFG.rope_theta)
    writer.add_layer_norm_rms_eps(CFG.norm_eps)
    writer.add_token_list([f"t{k}" for k in range(CFG.vocab_size)])
    tensors = {"token_embd.weight": params["tok_emb"], "output_norm.weight": params["norm_f.w"],
               "output.weight": params["lm_head"].T}
    for i in range(CFG.n_layer):
        for suffix, (name, transpose, heads) in LAYER_TENSORS.items():
            weight = params[f"blocks.{i}.{name}"]
            weight = weight.T if transpose else weight
            tensors[f"blk.{i}.{suffix}"] = permute(weight, getattr(CFG, heads)) if heads else weight
    for name, weight in tensors.items():
        weight = np.ascontiguousarray(weight, dtype=np.float32)
        if qtype is not None and weight.ndim == 2:
            writer.add_tensor(name, gguf.quants.quantize(weight, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def in_memory(params: dict, kind: str) -> dict:
    """Every matrix quantized and dequantized as the file stores its rows."""
    out = {}
    for name, value in params.items():
        if value.ndim != 2:
            out[name] = value
        elif name == "tok_emb":
            out[name] = quantize_matrix(value, kind).dequantize()         # (V, C) rows
        else:
            out[name] = quantize_weight(value, kind).dequantize()         # (in, out) = W^T
    return out


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_quantized_file_round_trips(tmp_path, kind):
    params = init_params(CFG, np.random.default_rng(0))
    write_source(tmp_path / "f32.gguf", params)
    counts = quantize_gguf(tmp_path / "f32.gguf", kind, tmp_path / "q.gguf")
    assert counts == {kind.upper(): 2 + 7 * CFG.n_layer, "F32": 1 + 2 * CFG.n_layer}
    model = load_pretrained(tmp_path / "q.gguf", tokenizer=False)
    wq = model.params["blocks.0.attn.wq"]
    assert isinstance(wq, QuantizedMatrix) and wq.kind == kind and wq.shape == (256, 256)
    assert isinstance(model.params["tok_emb"], QuantizedMatrix)
    want = Model(CFG, in_memory(params, kind))(IDS)
    got = model(IDS)
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL * np.abs(want).max())
    widened = load_pretrained(tmp_path / "q.gguf", tokenizer=False, dequantize=True)
    assert all(isinstance(v, np.ndarray) for v in widened.params.values())
    np.testing.assert_allclose(widened(IDS), want, rtol=0, atol=RTOL * np.abs(want).max())


def test_a_type_not_kept_quantized_is_named(tmp_path):
    params = init_params(CFG, np.random.default_rng(1))
    write_source(tmp_path / "q5.gguf", params, qtype=gguf.GGMLQuantizationType.Q5_1)
    with pytest.raises(CheckpointError, match=r"uses Q5_1, which glassformer does not keep "
                       r"quantized \(supported: Q8_0, Q4_0, Q4_1, Q4_K, Q5_0\); load it with "
                       r"--dequantize"):
        load_pretrained(tmp_path / "q5.gguf", tokenizer=False)
    assert load_pretrained(tmp_path / "q5.gguf", tokenizer=False, dequantize=True)(IDS).shape \
        == (1, 6, CFG.vocab_size)


def test_quantize_refuses_what_it_cannot_write(tmp_path):
    with pytest.raises(GlassformerError, match="reads a .gguf file for now"):
        quantize_gguf(tmp_path, "q8_0", tmp_path / "out.gguf")
    write_source(tmp_path / "f32.gguf", init_params(CFG, np.random.default_rng(2)))
    with pytest.raises(GlassformerError, match="Q6_K is not supported"):
        quantize_gguf(tmp_path / "f32.gguf", "Q6_K", tmp_path / "out.gguf")
    with pytest.raises(GlassformerError, match="FILE.gguf"):
        quantize_gguf(tmp_path / "f32.gguf", "q8_0", tmp_path / "out.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f32.gguf"]


def test_quantize_command_writes_the_file(tmp_path, capsys):
    from glassformer.cli import main

    write_source(tmp_path / "f32.gguf", init_params(CFG, np.random.default_rng(3)))
    out = tmp_path / "q.gguf"
    assert main(["quantize", "--model", str(tmp_path / "f32.gguf"), "--type", "q4_0",
                 "--out", str(out)]) == 0
    assert "5 F32, 16 Q4_0 tensors" in capsys.readouterr().err
    assert load_pretrained(out, tokenizer=False).params["lm_head"].kind == "q4_0"
    assert main(["quantize", "--model", str(tmp_path), "--type", "q4_0",
                 "--out", str(tmp_path / "x.gguf")]) == 2         # a folder: one line
    assert "reads a .gguf file for now" in capsys.readouterr().err


def test_kept_blocks_map_the_file_instead_of_copying_it(tmp_path):
    """The blocks of a loaded file are read-only views of its memory map (the file's pages, as
    llama.cpp's mmap), except q, k (their rows reordered for RoPE), and q | k | v, gate | up,
    packed into one copy each (blocks/packed.py): no second copy."""
    params = init_params(CFG, np.random.default_rng(4))
    write_source(tmp_path / "f32.gguf", params)
    quantize_gguf(tmp_path / "f32.gguf", "q8_0", tmp_path / "q.gguf")
    model = load_pretrained(tmp_path / "q.gguf", tokenizer=False)
    for name in ("tok_emb", "lm_head", "blocks.1.attn.wo", "blocks.1.mlp.w_down"):
        blocks = model.params[name].blocks
        assert not blocks.flags.owndata and not blocks.flags.writeable, name
        assert type(blocks) is np.ndarray, name          # a plain array, not np.memmap
    assert model.params["blocks.0.attn.wq"].blocks.flags.writeable   # reordered: its own copy
    assert model.params["blocks.1.attn.wv"].blocks.base is model.params[
        "blocks.1.attn.wq"].blocks.base                            # packed: q | k | v one copy
    want = Model(CFG, in_memory(params, "q8_0"))(IDS)
    np.testing.assert_allclose(model(IDS), want, rtol=0, atol=RTOL * np.abs(want).max())
