"""GGUF files of the new families (io/gguf_hf.py, io/gguf_names/): Qwen3-Next, Qwen3.5, Gemma 3.

- Qwen3-Next / Qwen3.5: a random transformers model written as GGUF by a test-side writer
  (tests/io/gguf_writer.py: the gguf package's tensor map and add_* keys, llama.cpp's conversions
  spelled out separately) loads in glassformer with transformers' logits (<= 1e-4) and greedy ids;
  glassformer's own save_gguf writes the same tensors and loads back the same model.
- Gemma 3: save_gguf's file is read by transformers' own GGUF loader with the reference's logits,
  and by glassformer with its windows, RoPE bases, scalar and soft cap intact.
- Bad input, one line naming the field: a hybrid without a state tensor (ssm_a, ssm_conv1d), a
  missing metadata key, a gpt-oss file (MXFP4)."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", minversion="5.24")

from glassformer.errors import CheckpointError, GlassformerError  # noqa: E402
from glassformer.io.gguf import load_gguf  # noqa: E402
from glassformer.io.gguf_hf import save_gguf  # noqa: E402
from glassformer.io.gguf_write import quantize_gguf  # noqa: E402
from glassformer.io.pretrained import load_pretrained  # noqa: E402

from tests.io.gguf_writer import rewrite, write_hf_as_gguf  # noqa: E402
from tests.models.hf_check import assert_logits_and_greedy_match  # noqa: E402
from tests.models.window_check import left_padded, spread_out  # noqa: E402

ATOL = 1e-4
V = 97
LIN, FULL = "linear_attention", "full_attention"
_COMMON = dict(vocab_size=V, hidden_size=24, intermediate_size=40, num_attention_heads=3,
               num_key_value_heads=1, head_dim=8, linear_num_key_heads=2,
               linear_num_value_heads=4, linear_key_head_dim=6, linear_value_head_dim=5,
               linear_conv_kernel_dim=4, max_position_embeddings=256, rms_norm_eps=1e-5,
               initializer_range=0.2, bos_token_id=None, eos_token_id=None)
HYBRIDS = {
    # an MoE with a gated shared expert in every layer; full attention every 2nd layer
    "qwen3next": ("Qwen3Next", dict(layer_types=[LIN, FULL, LIN, FULL], num_hidden_layers=4,
                                    num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=7, shared_expert_intermediate_size=9)),
    # dense, tied head, Hv = 2 Hk: llama.cpp's tiled value heads
    "qwen35": ("Qwen3_5", dict(layer_types=[LIN, LIN, LIN, FULL], num_hidden_layers=4,
                               tie_word_embeddings=True)),
}


def hybrid(arch: str, **overrides):
    torch.manual_seed(0)
    prefix, extra = HYBRIDS[arch]
    config = getattr(transformers, "Qwen3_5TextConfig" if prefix == "Qwen3_5"
                     else f"{prefix}Config")(**{**_COMMON, **overrides}, **extra)
    model = spread_out(torch, getattr(transformers, f"{prefix}ForCausalLM")(config))
    model.config._experts_implementation = "eager"
    return model


@pytest.fixture(scope="module")
def qwen35_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "qwen35.gguf"
    write_hf_as_gguf(path, hybrid("qwen35"), "qwen35")
    return path


@pytest.mark.parametrize("arch", ["qwen3next", "qwen35"])
def test_hybrid_gguf_loads_with_transformers_logits_and_greedy_ids(arch, tmp_path):
    reference = hybrid(arch)
    write_hf_as_gguf(tmp_path / "m.gguf", reference, arch)
    model = load_gguf(tmp_path / "m.gguf", with_tokenizer=False)
    assert model.arch == {"qwen3next": "qwen3_next", "qwen35": "qwen3_5"}[arch]
    ids, mask = left_padded(V, 70)          # past one 64-token chunk
    assert_logits_and_greedy_match(model, reference, ids, mask, atol=ATOL, new_tokens=8)
    # glassformer's writer: the same tensors, and a file that loads back the same model
    reference.save_pretrained(tmp_path / "hf")
    ours = load_pretrained(tmp_path / "hf", tokenizer=False)
    save_gguf(ours, tmp_path / "ours.gguf")
    theirs = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(tmp_path / "m.gguf")).tensors}
    mine = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(tmp_path / "ours.gguf")).tensors}
    assert sorted(mine) == sorted(theirs)
    for name, data in theirs.items():
        np.testing.assert_allclose(mine[name], data, atol=1e-6, err_msg=name)
    again = load_gguf(tmp_path / "ours.gguf")
    assert again.cfg == ours.cfg
    np.testing.assert_allclose(again(ids, attention_mask=mask), ours(ids, attention_mask=mask),
                               atol=1e-5)


def test_the_mtp_layers_after_the_decoder_are_skipped(qwen35_file, tmp_path):
    # convert_hf_to_gguf.py appends Qwen3.5's multi-token-prediction layer as blk.4
    rewrite(qwen35_file, tmp_path / "mtp.gguf",
            set_keys={"qwen35.block_count": 5, "qwen35.nextn_predict_layers": 1},
            add_tensors={"blk.4.nextn.eh_proj.weight": np.ones((24, 48), np.float32)})
    ids, _ = left_padded(V, 6)
    plain, mtp = load_gguf(qwen35_file), load_gguf(tmp_path / "mtp.gguf")
    assert mtp.cfg == plain.cfg and mtp.cfg.n_layer == 4
    np.testing.assert_array_equal(mtp(ids), plain(ids))


def gemma3(layer_types, **extra):
    torch.manual_seed(0)
    cfg = transformers.Gemma3TextConfig(
        vocab_size=V, hidden_size=40, intermediate_size=56, num_hidden_layers=len(layer_types),
        num_key_value_heads=1, max_position_embeddings=128, sliding_window=5,
        layer_types=layer_types, initializer_range=0.2, pad_token_id=None, bos_token_id=None,
        eos_token_id=None, attn_implementation="eager", **extra)
    return spread_out(torch, transformers.Gemma3ForCausalLM(cfg))


def test_gemma3_gguf_reads_in_transformers_and_in_glassformer(tmp_path):
    # llama.cpp's defaults: 5 local layers to 1 global, bases 1e4 / 1e6, scalar = head width
    reference = gemma3(["sliding_attention"] * 5 + ["full_attention"], num_attention_heads=2,
                       head_dim=256, query_pre_attn_scalar=256)
    reference.save_pretrained(tmp_path / "hf")
    save_gguf(load_pretrained(tmp_path / "hf", tokenizer=False), tmp_path / "g.gguf")
    ids, mask = left_padded(V, 15)
    with torch.no_grad():
        want = reference(torch.from_numpy(ids)).logits.numpy()
        theirs = transformers.AutoModelForCausalLM.from_pretrained(
            tmp_path, gguf_file="g.gguf", attn_implementation="eager")
        np.testing.assert_allclose(theirs(torch.from_numpy(ids)).logits.numpy(), want, atol=1e-5)
    # the layer pattern as llama.cpp assumes it when a file does not say
    rewrite(tmp_path / "g.gguf", tmp_path / "plain.gguf",
            drop_keys=("gemma3.attention.sliding_window_pattern",))
    model = load_gguf(tmp_path / "plain.gguf")
    assert model.cfg.full_layers == (5,) and model.cfg.sliding_window == 5
    assert np.abs(model(ids) - want).max() <= ATOL


def test_gemma3_gguf_keeps_its_windows_rope_scalar_and_soft_cap(tmp_path):
    reference = gemma3(
        ["sliding_attention", "sliding_attention", "full_attention"], num_attention_heads=4,
        head_dim=10, query_pre_attn_scalar=12, final_logit_softcapping=4.0,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 5000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}})
    reference.save_pretrained(tmp_path / "hf")
    ours = load_pretrained(tmp_path / "hf", tokenizer=False)
    save_gguf(ours, tmp_path / "g.gguf")
    model = load_gguf(tmp_path / "g.gguf")
    assert model.cfg == ours.cfg
    ids, mask = left_padded(V, 15)          # 3x the window
    assert_logits_and_greedy_match(model, reference, ids, mask, atol=ATOL, new_tokens=8)


@pytest.mark.parametrize("tensor,says", [
    ("blk.0.ssm_a", "no tensor blk.0.ssm_a: expected A = -exp(A_log), one per value head, "
                    "shape (4,) (layer 0 is a linear-attention layer by "
                    "qwen35.full_attention_interval=4)"),
    ("blk.1.ssm_conv1d.weight", "no tensor blk.1.ssm_conv1d.weight: expected the short causal "
                                "conv's taps (channels, conv_kernel), shape (44, 4)"),
])
def test_a_hybrid_gguf_without_a_state_tensor_is_one_line(qwen35_file, tmp_path, tensor, says):
    rewrite(qwen35_file, tmp_path / "bad.gguf", drop_tensors=(tensor,))
    with pytest.raises(CheckpointError) as err:
        load_gguf(tmp_path / "bad.gguf")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_missing_metadata_key_or_gpt_oss_file_is_one_line(qwen35_file, tmp_path, capsys):
    from glassformer.cli import main

    rewrite(qwen35_file, tmp_path / "nokey.gguf", drop_keys=("qwen35.ssm.conv_kernel",))
    with pytest.raises(CheckpointError, match=r"has no qwen35\.ssm\.conv_kernel metadata "
                                              r"\(expected the short conv's taps W"):
        load_gguf(tmp_path / "nokey.gguf")
    rewrite(qwen35_file, tmp_path / "noa.gguf", drop_tensors=("blk.2.ssm_a",))
    assert main(["generate", "--model", str(tmp_path / "noa.gguf"), "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no tensor blk.2.ssm_a" in err and "\n" not in err and "Traceback" not in err
    writer = gguf.GGUFWriter(str(tmp_path / "oss.gguf"), "gpt-oss")
    writer.add_block_count(1)
    writer.add_tensor("blk.0.ffn_up_exps.weight", np.zeros((2, 4, 17), np.uint8),
                      raw_dtype=gguf.GGMLQuantizationType.MXFP4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(CheckpointError, match="experts stored as MXFP4; glassformer does not "
                                              "read MXFP4"):
        load_gguf(tmp_path / "oss.gguf")


def test_save_gguf_refuses_what_llama_cpp_cannot_hold(tmp_path):
    from glassformer.models.llama import LlamaConfig, init_params
    from glassformer.models.model import Model
    from glassformer.models.qwen3_5 import Qwen35Config
    from glassformer.models.qwen3_next import init_params as init_hybrid

    llama = Model(LlamaConfig(n_layer=1), init_params(LlamaConfig(n_layer=1),
                                                      np.random.default_rng(0)))
    with pytest.raises(GlassformerError, match="save_gguf writes gemma3, qwen3_next, qwen3_5"):
        save_gguf(llama, tmp_path / "x.gguf")
    cfg = Qwen35Config(n_layer=3, full_layers=(0,))
    with pytest.raises(GlassformerError, match="full attention at layers \\[0\\]"):
        save_gguf(Model(cfg, init_hybrid(cfg, np.random.default_rng(0))), tmp_path / "x.gguf")
    assert list(tmp_path.iterdir()) == []


def test_convert_writes_a_gguf_file_that_quantize_shrinks(tmp_path, capsys):
    from glassformer.cli import main

    hybrid("qwen35", hidden_size=32).save_pretrained(tmp_path / "hf")
    out = tmp_path / "m.gguf"
    assert main(["convert", "--model", str(tmp_path / "hf"), "--out", str(out)]) == 0
    assert main(["convert", "--model", str(tmp_path / "hf"), "--out", str(out)]) == 2
    assert "exists; give a new file, or --force" in capsys.readouterr().err
    assert main(["quantize", "--model", str(out), "--type", "q8_0",
                 "--out", str(tmp_path / "q8.gguf")]) == 0
    assert " Q8_0 tensors" in capsys.readouterr().err
    ids, _ = left_padded(V, 6)
    want = load_pretrained(tmp_path / "hf", tokenizer=False)(ids)
    np.testing.assert_allclose(load_pretrained(out)(ids), want, atol=1e-5)
    q8_rounded(out, tmp_path / "rounded.gguf")
    np.testing.assert_allclose(load_pretrained(tmp_path / "q8.gguf")(ids),
                               load_gguf(tmp_path / "rounded.gguf")(ids), atol=1e-4)


def test_a_wrong_shape_a_non_negative_a_or_a_bad_count_is_one_line(qwen35_file, tmp_path):
    cases = {
        "shape": (dict(drop_tensors=("blk.0.ssm_a",),
                       add_tensors={"blk.0.ssm_a": -np.ones(5, np.float32)}),
                  r"tensor blk\.0\.ssm_a \(5,\) does not make "
                  r"layers\.0\.linear_attn\.A_log \(4,\)"),
        "sign": (dict(drop_tensors=("blk.0.ssm_a",),
                      add_tensors={"blk.0.ssm_a": np.ones(4, np.float32)}),
                 r"blk\.0\.ssm_a \(as layers\.0\.linear_attn\.A_log: A = -exp\(A_log\)"),
        "interval": (dict(set_keys={"qwen35.full_attention_interval": 0}),
                     r"qwen35\.full_attention_interval is 0, expected K >= 1"),
        "layers": (dict(set_keys={"qwen35.block_count": 1_000_000}),
                   r"qwen35\.block_count"),
    }
    for name, (change, says) in cases.items():
        rewrite(qwen35_file, tmp_path / f"{name}.gguf", **change)
        with pytest.raises(CheckpointError, match=says):
            load_gguf(tmp_path / f"{name}.gguf")


def test_qwen35_rope_sections_cover_every_rotary_pair():
    from glassformer.io.gguf_names.qwen3_next_meta import _sections

    assert _sections(64) == [11, 11, 10, 0]          # the released Qwen3.5's, as llama.cpp writes
    for dims in (2, 4, 8, 30, 128):
        sections = _sections(dims)
        assert all(j < 3 * sections[j % 3] for j in range(dims // 2))


def q8_rounded(source, dest) -> None:
    """`source` with every matrix whose rows hold whole Q8_0 blocks rounded through Q8_0 and back
    to float32 in memory: what a Q8_0 file of it must load as. (The random hybrids are too
    sensitive for a tolerance against the float32 model: one matrix's 0.4% rounding moves their
    logits by up to 25%.)"""
    q8 = gguf.GGMLQuantizationType.Q8_0
    rounded = {}
    for tensor in gguf.GGUFReader(str(source)).tensors:
        shape = tuple(int(d) for d in reversed(tensor.shape))
        if len(shape) == 2 and shape[1] % 32 == 0:
            values = np.array(tensor.data).reshape(shape)
            rounded[tensor.name] = gguf.quants.dequantize(gguf.quants.quantize(values, q8), q8)
    rewrite(source, dest, drop_tensors=tuple(rounded), add_tensors=rounded)


def test_quantize_takes_a_hybrid_hf_folder(tmp_path):
    hybrid("qwen35", hidden_size=32).save_pretrained(tmp_path / "hf")   # rows of 32: Q8_0
    counts = quantize_gguf(tmp_path / "hf", "q8_0", tmp_path / "q8.gguf")
    assert counts["Q8_0"] >= 20 and sorted(p.name for p in tmp_path.iterdir()) == ["hf", "q8.gguf"]
    save_gguf(load_pretrained(tmp_path / "hf", tokenizer=False), tmp_path / "f32.gguf")
    q8_rounded(tmp_path / "f32.gguf", tmp_path / "rounded.gguf")
    ids, _ = left_padded(V, 6)
    want = load_gguf(tmp_path / "rounded.gguf")(ids)
    np.testing.assert_allclose(load_gguf(tmp_path / "q8.gguf")(ids), want,
                               atol=1e-5 * np.abs(want).max())
