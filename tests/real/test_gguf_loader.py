"""GGUF loading on tiny files written here with gguf.GGUFWriter: layouts, RoPE rows, errors.

The files are built the way llama.cpp's convert_hf_to_gguf.py builds them: HF (out, in) matrices,
q and k rows permuted for the pair-wise RoPE layout, `output.weight` left out when tied.
"""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package reads GGUF files: pip install gguf")

from glassformer.errors import CheckpointError  # noqa: E402
from glassformer.io.gguf import LAYER_TENSORS, unpermute_rope_rows  # noqa: E402
from glassformer.io.pretrained import load_pretrained  # noqa: E402
from glassformer.models.llama import LlamaConfig, init_params  # noqa: E402

# norm_eps is a power of two: GGUF stores it as float32, so it round-trips exactly.
CFG = LlamaConfig(vocab_size=40, max_seq_len=32, n_layer=2, n_head=4, n_kv_head=2, d_model=32,
                  d_ff=64, norm_eps=2.0 ** -16, rope_theta=500.0, tie_embeddings=False)
# A tied tok_emb is loaded column-major (faster LM head); BLAS then sums in another order.
LAYOUT_TOLERANCE = 1e-6
# Q8_0 keeps one float16 scale per 32 weights and 8-bit values: error <= scale / 2 ~ max|w| / 254.
Q8_TOLERANCE = 1e-3


def llama_cpp_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: half-layout rows -> pair-layout rows."""
    rows = weight.shape[0]
    return (weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def gguf_tensors(cfg: LlamaConfig, params: dict) -> dict[str, np.ndarray]:
    """glassformer params -> GGUF tensors in NumPy order (HF's (out, in)), q/k permuted."""
    tensors = {"token_embd.weight": params["tok_emb"], "output_norm.weight": params["norm_f.w"]}
    if not cfg.tie_embeddings:
        tensors["output.weight"] = params["lm_head"].T
    for i in range(cfg.n_layer):
        for suffix, (name, transpose, heads) in LAYER_TENSORS.items():
            weight = params[f"blocks.{i}.{name}"]
            weight = weight.T if transpose else weight
            if heads is not None:
                weight = llama_cpp_permute(weight, getattr(cfg, heads))
            tensors[f"blk.{i}.{suffix}"] = weight
    return tensors


def write_gguf(path, cfg: LlamaConfig, tensors: dict, *, arch: str = "llama",
               qtype=None) -> None:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(cfg.n_layer)
    writer.add_context_length(cfg.max_seq_len)
    writer.add_embedding_length(cfg.d_model)
    writer.add_feed_forward_length(cfg.d_ff)
    writer.add_head_count(cfg.n_head)
    writer.add_head_count_kv(cfg.n_kv_head)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.norm_eps)
    writer.add_token_list([f"t{k}" for k in range(cfg.vocab_size)])
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


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_unpermute_inverts_llama_cpp_permute(n_heads):
    weight = np.random.default_rng(0).standard_normal((n_heads * 8, 5)).astype(np.float32)
    assert np.array_equal(unpermute_rope_rows(llama_cpp_permute(weight, n_heads), n_heads), weight)


@pytest.mark.parametrize("tied", [False, True])
def test_f32_file_loads_exact_params_and_logits(tmp_path, tied):
    cfg = _with(tie_embeddings=tied)
    params = init_params(cfg, np.random.default_rng(1))
    write_gguf(tmp_path / "tiny.gguf", cfg, gguf_tensors(cfg, params))
    model = load_pretrained(tmp_path / "tiny.gguf", tokenizer=False)
    assert model.cfg == cfg
    assert sorted(model.params) == sorted(params)
    for name, value in params.items():
        assert model.params[name].dtype == np.float32
        assert np.array_equal(model.params[name], value), name
        assert model.params[name].flags.writeable, name
    ids = np.array([[1, 5, 9, 3, 7]])
    assert np.allclose(model(ids), _reference_logits(cfg, params, ids), rtol=0.0,
                       atol=LAYOUT_TOLERANCE)


def test_q8_0_file_dequantises_close_to_the_float_weights(tmp_path):
    params = init_params(CFG, np.random.default_rng(2))
    write_gguf(tmp_path / "q8.gguf", CFG, gguf_tensors(CFG, params),
               qtype=gguf.GGMLQuantizationType.Q8_0)
    # dequantize=True: widened to float32 (by default Q8_0 matrices stay quantized: ops/quant/)
    model = load_pretrained(tmp_path / "q8.gguf", tokenizer=False, dequantize=True)
    for name, value in params.items():
        assert model.params[name].shape == value.shape, name
        assert np.abs(model.params[name] - value).max() <= Q8_TOLERANCE, name


def test_other_architecture_is_refused(tmp_path):
    write_gguf(tmp_path / "g.gguf", CFG, gguf_tensors(CFG, init_params(CFG, _rng())),
               arch="gpt2")
    with pytest.raises(CheckpointError, match="only 'llama'"):
        load_pretrained(tmp_path / "g.gguf", tokenizer=False)


def test_missing_tensor_is_named(tmp_path):
    tensors = gguf_tensors(CFG, init_params(CFG, _rng()))
    del tensors["blk.1.ffn_up.weight"]
    write_gguf(tmp_path / "m.gguf", CFG, tensors)
    with pytest.raises(CheckpointError, match=r"missing \['blk\.1\.ffn_up\.weight'\]"):
        load_pretrained(tmp_path / "m.gguf", tokenizer=False)


def test_wrong_shape_names_tensor_and_both_shapes(tmp_path):
    tensors = gguf_tensors(CFG, init_params(CFG, _rng()))
    tensors["blk.0.attn_v.weight"] = np.zeros((4, 32), np.float32)
    write_gguf(tmp_path / "s.gguf", CFG, tensors)
    expected = r"blk\.0\.attn_v\.weight .*\(4, 32\), expected \(16, 32\)"
    with pytest.raises(CheckpointError, match=expected):
        load_pretrained(tmp_path / "s.gguf", tokenizer=False)


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"this is not a GGUF file at all" * 10)
    with pytest.raises(CheckpointError, match="is not a GGUF file"):
        load_pretrained(path, tokenizer=False)


def _with(**changes) -> LlamaConfig:
    fields = {k: v for k, v in CFG.to_dict().items() if k != "arch"}
    return LlamaConfig(**{**fields, **changes})


def _rng() -> np.random.Generator:
    return np.random.default_rng(3)


def _reference_logits(cfg, params, ids):
    from glassformer.models.llama import forward
    return forward(params, ids, cfg)[0]
