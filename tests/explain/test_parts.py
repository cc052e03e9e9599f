"""`glassformer explain PART`: every part in both languages, stable JSON keys, the on-screen
finite-difference check, bilingual texts, values equal to the library's own ops, and the op
parts running the gradcheck cases themselves."""
import json
import string

import numpy as np
import pytest

from glassformer.blocks.attention import attention_block_forward
from glassformer.blocks.residual import block_forward
from glassformer.cli import main
from glassformer.explain.core import LANGS, Pair
from glassformer.explain.parts import PARTS, explain_part
from glassformer.explain.render import LABELS
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases import ALL_CASES, find_case
from glassformer.io.pretrained import save_pretrained
from glassformer.models import gpt2
from glassformer.models.model import Model
from glassformer.ops.activation import gelu_forward, silu_forward
from glassformer.ops.cross_entropy import cross_entropy_forward
from glassformer.ops.embedding import embedding_forward
from glassformer.ops.layer_norm import layer_norm_backward, layer_norm_forward
from glassformer.ops.rms_norm import rms_norm_forward
from glassformer.ops.rope import rope_forward, rope_tables
from glassformer.ops.softmax import softmax_forward
from glassformer.ops.swiglu import swiglu_forward
from glassformer.tokenizers.char import CharTokenizer

# A correct float64 backward matches central differences to ~1e-9; the brief's bar is 1e-6.
FD_TOL = 1e-6
# Values read back off a float32 ctx (mean, var) carry float32 rounding of O(1) numbers.
READ_OFF_ATOL = 1e-5

FORWARD_KEYS = {
    "attention": ["X", "Wq", "Wk", "Wv", "Q", "K", "V", "scale", "scores", "mask",
                  "masked_scores", "weights", "output"],
    "layer_norm": ["x", "w", "b", "mean", "centered", "var", "rstd", "xhat", "y"],
    "rms_norm": ["x", "w", "mean_square", "rstd", "xhat", "y"],
    "gelu": ["x", "slope", "out"],
    "silu": ["x", "sigmoid", "out"],
    "swiglu": ["gate", "up", "sigmoid", "activated", "out"],
    "softmax": ["x", "probs", "x_shifted", "probs_shifted"],
    "cross_entropy": ["logits", "targets", "log_probs", "picked", "n_valid", "loss", "probs",
                      "onehot"],
    "embedding": ["table", "ids", "out"],
    "lora": ["x", "w", "a", "b", "scale", "h", "delta", "base", "out"],
    "rope": ["positions", "cos", "sin", "q", "q_rot", "q_fixed", "k_fixed", "scores_fixed",
             "score_a", "score_b", "score_c"],
    "mha": ["x", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "q", "k", "v", "q_heads",
            "k_heads", "v_heads", "groups", "scale", "scores", "weights", "head_out", "merged",
            "y"],
    "mla": ["x", "wq_a", "q_norm.w", "wq_b", "wkv_a", "kv_norm.w", "wkv_b", "wo", "q_low",
            "latent", "k_pe", "q_heads", "k_heads", "v_heads", "scale", "scores_nope",
            "scores_rope", "scores", "weights", "merged", "y", "cache", "cache_v3"],
    "cross_attention": ["source", "x", "memory", "mask", "q", "k", "v", "weights", "reads",
                        "merged", "y"],
    "block": ["x", "norm1", "weights", "merged", "attn_out", "resid1", "norm2", "mlp_up",
              "mlp_act", "mlp_out", "resid2", "out"],
    "gpt2": ["ids", "tokens", "tok", "pos", "x0", "blocks.0.norm1", "blocks.0.weights",
             "blocks.0.attn_out", "blocks.0.resid1", "blocks.0.norm2", "blocks.0.mlp_act",
             "blocks.0.mlp_out", "blocks.0.resid2", "blocks.1.resid2", "norm_f", "logits",
             "next_probs", "top5"],
    "dpo": ["targets", "logits", "logp", "seq", "ref", "ratios", "delta", "out", "ln2"],
    "grpo": ["rewards", "adv", "logits", "logp", "old", "ratio", "clipped", "out"],
    "moe": ["x", "router", "logits", "probs", "chosen", "weights", "slot_token", "bounds",
            "expert.0", "y", "load", "mean_prob", "aux_loss", "z_loss"],
    "window": ["causal", "window_mask", "hidden", "scores", "weights", "out", "ring"],
    "sink": ["sinks", "plain", "weights", "row_sums", "sink_share", "out", "out_plain"],
    "quant": ["w", "q8_0_d", "q8_0_codes", "q8_0_back", "q4_0_d", "q4_0_codes", "q4_0_bytes",
              "q4_0_back", "q4_1_dm", "q4_1_codes", "q4_1_back", "k_w", "k_scales", "k_dd",
              "k_codes", "k_back", "errors", "x", "y"],
}
BACKWARD_KEYS = {
    "dpo": ["G", "dseq", "dlogits"],
    "grpo": ["G", "dlogp", "dlogits"],
    "attention": ["G", "dweights", "dV", "dscores", "dQ", "dK", "dWq", "dWk", "dWv", "dX"],
    "layer_norm": ["G", "dx", "dw", "db"],
    "rms_norm": ["G", "dx", "dw"],
    "gelu": ["G", "dx"],
    "silu": ["G", "dx"],
    "swiglu": ["G", "dup", "dgate"],
    "softmax": ["G", "dx"],
    "cross_entropy": ["G", "dlogits"],
    "embedding": ["G", "dtable", "repeated_id", "repeated_at", "repeated_G", "repeated_dtable",
                  "unused_ids"],
    "rope": ["G", "dq"],
    "lora": ["G", "g", "dB", "dh", "dA", "dx", "dW"],
    "mha": ["G", "dwo", "dbo", "dwv", "dbv", "dwk", "dbk", "dwq", "dbq", "dx"],
    "mla": ["G", "dwo", "dwkv_b", "dkv_norm.w", "dwkv_a", "dwq_b", "dq_norm.w", "dwq_a", "dx"],
    "cross_attention": ["G", "dwo", "dbo", "dwv", "dbv", "dwk", "dbk", "dwq", "dbq", "dx",
                        "dmemory"],
    "block": ["G", "dmlp.w_down", "dnorm2.w", "dattn.wq", "dattn.bk", "dnorm1.b", "dx"],
    "gpt2": ["G", "dnorm_f.w", "dblocks.1.mlp.w_down", "dblocks.0.attn.wq", "dtok_emb",
             "dpos_emb"],
    "moe": ["G", "drouter", "dw_down", "dx", "daux_logits", "aux_check"],
    "window": ["G", "dscores", "dq", "dk", "dv"],
    "sink": ["G", "dsinks", "dq"],
    "quant": ["G", "dx"],
}


def placeholders(text: str) -> set[str]:
    """The {names} a text expects."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def run_json(capsys, *argv) -> dict:
    assert main(["explain", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def setup_of(name: str, seed: int = 0, **given):
    """The part's Setup for `seed`: the same draw the command makes."""
    part = PARTS[name]
    options = {**part.defaults, **given}
    return part.make_inputs(options, np.random.default_rng(seed))


def inputs_of(name: str, seed: int = 0, **given) -> dict:
    return setup_of(name, seed, **given).inputs


def values(result, direction: str = "forward") -> dict:
    steps = result.forward if direction == "forward" else result.backward
    return {step.key: step.value for step in steps}


def test_every_part_is_listed():
    assert set(PARTS) == set(FORWARD_KEYS) == set(BACKWARD_KEYS)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", list(PARTS))
def test_every_part_runs_in_both_languages(capsys, name, lang):
    assert main(["explain", name, "--lang", lang]) == 0
    text = capsys.readouterr().out
    assert PARTS[name].text[lang]["title"] in text
    assert LABELS[lang]["forward"] in text
    assert f"[1] {FORWARD_KEYS[name][0]}" in text


@pytest.mark.parametrize("name", list(PARTS))
def test_json_keys_and_finite_difference_check(capsys, name):
    result = run_json(capsys, name, "--backward", "--grad", "random")
    assert result["part"] == name
    assert set(FORWARD_KEYS[name]) <= set(result["forward"])
    assert set(BACKWARD_KEYS[name]) <= set(result["backward"])
    assert result["check"]["ok"]
    assert result["check"]["max_rel_err"] < FD_TOL
    assert all(err < FD_TOL for err in result["check"]["zero_err"].values())


@pytest.mark.parametrize("lang", LANGS)
def test_backward_prose_shows_the_check(capsys, lang):
    assert main(["explain", "layer_norm", "--backward", "--lang", lang]) == 0
    text = capsys.readouterr().out
    assert LABELS[lang]["backward"] in text
    assert f"{LABELS[lang]['check']} " in text and LABELS[lang]["check_ok"] in text
    assert PARTS["layer_norm"].text[lang]["dx"] in text


def test_softmax_under_ones_has_an_exactly_zero_gradient_checked_absolutely():
    result = explain_part("softmax", {}, seed=0, grad="ones")
    assert np.max(np.abs(values(result, "backward")["dx"])) < 1e-6
    assert set(result.check.zero_err) == {"x"} and result.check.ok


@pytest.mark.parametrize("name", list(PARTS))
def test_every_text_key_exists_in_both_languages_with_the_same_placeholders(name):
    assert set(LABELS["en"]) == set(LABELS["zh"])
    text = PARTS[name].text
    assert set(text["en"]) == set(text["zh"])
    for key, english in text["en"].items():
        assert placeholders(english) == placeholders(text["zh"][key]), key


@pytest.mark.parametrize("name", list(PARTS))
def test_every_step_has_a_text_in_both_languages(name):
    part = PARTS[name]
    setup = setup_of(name)
    out, ctx = setup.pair.forward(setup.inputs)
    steps = part.forward_steps(setup.inputs, out, ctx, setup.static)
    dout = np.ones(np.shape(out), dtype=np.float32)
    grads = setup.pair.backward(dout, ctx)
    steps += part.backward_steps(dout, grads, ctx, setup.static)
    assert [s.key for s in steps[:3]] == FORWARD_KEYS[name][:3]
    for step in steps:
        for lang in LANGS:
            assert step.text[lang] and "{" not in step.text[lang], (step.key, lang)


# Which gradcheck case each op part runs (blocks build theirs with attention_block.case and
# residual_block.case at the sizes asked for; gpt2 and the seed's attention have none).
OP_CASES = {"layer_norm": ("layer_norm", "bias"), "rms_norm": ("rms_norm", "eps-1e-6"),
            "gelu": ("gelu", "erf"), "silu": ("silu", "plain"), "swiglu": ("swiglu", "batched"),
            "softmax": ("softmax", "rows"), "cross_entropy": ("cross_entropy", "plain-BTV"),
            "embedding": ("embedding", "repeated-ids"), "rope": ("rope", "theta-100"),
            "lora": ("lora", "no-bias")}


@pytest.mark.parametrize("name", list(OP_CASES))
def test_op_parts_run_the_registered_gradcheck_case_which_passes(name):
    case = find_case(*OP_CASES[name])
    assert setup_of(name).pair is case and case in ALL_CASES
    assert run_case(case).ok


def test_block_parts_run_the_blocks_gradcheck_case_with_the_key_bias():
    for name, case_name in (("mha", "attention_block"), ("block", "residual_block")):
        setup = setup_of(name)
        assert setup.pair.name == case_name and setup.checked is None
        out, ctx = setup.pair.forward(setup.inputs)
        grads = setup.pair.backward(np.ones_like(out), ctx)
        assert set(grads) == set(setup.inputs)          # the key bias's (zero) gradient too
        assert np.max(np.abs(grads["attn.bk"])) < 1e-5
    assert isinstance(setup_of("gpt2").pair, Pair) and isinstance(setup_of("attention").pair, Pair)


def test_find_case_names_what_is_missing():
    with pytest.raises(Exception, match="no gradcheck case layer_norm nope"):
        find_case("layer_norm", "nope")


def test_layer_norm_values_are_the_ops():
    inputs = inputs_of("layer_norm")
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    result = explain_part("layer_norm", {}, seed=0, grad="ones")
    shown, grads = values(result), values(result, "backward")
    y, ctx = layer_norm_forward(x, w, b, eps=1e-5)
    np.testing.assert_array_equal(shown["y"], y)
    np.testing.assert_array_equal(shown["xhat"], ctx.xhat)
    np.testing.assert_array_equal(shown["rstd"], ctx.rstd)
    dx, dw, db = layer_norm_backward(np.ones_like(y), ctx)
    np.testing.assert_array_equal(grads["dx"], dx)
    np.testing.assert_array_equal(grads["dw"], dw)
    np.testing.assert_array_equal(grads["db"], db)
    # The read-off mean and var are the op's: biased variance (divided by C, not C - 1).
    np.testing.assert_allclose(shown["mean"], x.mean(-1, keepdims=True), atol=READ_OFF_ATOL)
    np.testing.assert_allclose(shown["var"], x.var(-1, keepdims=True), atol=READ_OFF_ATOL)
    assert not np.allclose(shown["var"], x.var(-1, ddof=1, keepdims=True), atol=1e-3)


def test_rms_norm_and_activation_values_are_the_ops():
    inputs = inputs_of("rms_norm")
    y, _ = rms_norm_forward(inputs["x"], inputs["w"], eps=1e-6)
    np.testing.assert_array_equal(values(explain_part("rms_norm", {}, seed=0))["y"], y)
    x = inputs_of("gelu")["x"]
    for mode in ("none", "tanh"):
        shown = values(explain_part("gelu", {"approximate": mode}, seed=0))
        np.testing.assert_array_equal(shown["out"], gelu_forward(x, approximate=mode)[0])
    np.testing.assert_array_equal(values(explain_part("silu", {}, seed=0))["out"],
                                  silu_forward(inputs_of("silu")["x"])[0])
    gate_up = inputs_of("swiglu")
    np.testing.assert_array_equal(values(explain_part("swiglu", {}, seed=0))["out"],
                                  swiglu_forward(gate_up["gate"], gate_up["up"])[0])


def test_softmax_and_cross_entropy_values_are_the_ops():
    x = inputs_of("softmax")["x"]
    shown = values(explain_part("softmax", {}, seed=0))
    np.testing.assert_array_equal(shown["probs"], softmax_forward(x)[0])
    np.testing.assert_allclose(shown["probs_shifted"], shown["probs"], atol=1e-4)
    inputs = inputs_of("cross_entropy")
    result = explain_part("cross_entropy", {}, seed=0, grad="ones")
    shown, grads = values(result), values(result, "backward")
    loss, _ = cross_entropy_forward(inputs["logits"], inputs["targets"])
    assert shown["loss"] == loss
    np.testing.assert_allclose(shown["loss"], -shown["picked"].mean(), rtol=1e-6)
    # The fused gradient: probabilities minus one-hot, over the N positions.
    expected = (shown["probs"] - shown["onehot"]) / shown["n_valid"]
    np.testing.assert_allclose(grads["dlogits"], expected, atol=1e-7)


def test_embedding_backward_adds_the_repeated_rows():
    inputs = inputs_of("embedding")
    result = explain_part("embedding", {}, seed=0, grad="random")
    shown, grads = values(result), values(result, "backward")
    np.testing.assert_array_equal(shown["out"],
                                  embedding_forward(inputs["ids"], inputs["table"])[0])
    assert len(grads["repeated_at"]) >= 2
    np.testing.assert_allclose(grads["repeated_dtable"], grads["repeated_G"].sum(axis=0),
                               rtol=1e-6)
    assert np.all(grads["dtable"][grads["unused_ids"]] == 0.0)


def test_rope_scores_depend_only_on_the_offset():
    q = inputs_of("rope")["x"]
    shown = values(explain_part("rope", {}, seed=0))
    cos, sin = rope_tables(q.shape[-2], q.shape[-1], theta=100.0, dtype=np.float32)
    np.testing.assert_array_equal(shown["q_rot"], rope_forward(q, cos, sin)[0])
    assert shown["score_a"] == pytest.approx(float(shown["score_b"]), abs=1e-5)
    assert shown["score_a"] != pytest.approx(float(shown["score_c"]), abs=1e-3)
    scores = shown["scores_fixed"]
    for offset in range(-len(scores) + 1, len(scores)):
        diagonal = np.diagonal(scores, offset)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-5)


def test_mha_values_are_the_blocks_with_gqa_shapes():
    setup = setup_of("mha", heads=4, kv_heads=2)
    static = setup.static
    y, _ = attention_block_forward(static["params"], setup.inputs["x"], static["cfg"],
                                   causal=True)
    shown = values(explain_part("mha", {"heads": 4, "kv_heads": 2}, seed=0))
    np.testing.assert_array_equal(shown["y"], y)
    assert shown["q_heads"].shape == (1, 4, 4, 2) and shown["k_heads"].shape == (1, 2, 4, 2)
    assert shown["groups"].tolist() == [[0, 1], [2, 3]]
    weights = shown["weights"]
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert np.all(weights[..., np.triu_indices(4, k=1)[0], np.triu_indices(4, k=1)[1]] == 0.0)


def test_mla_values_are_the_blocks_and_the_cache_counts_add_up():
    from glassformer.blocks.mla import latent_cache, mla_block_forward
    setup = setup_of("mla")
    static = setup.static
    cfg = static["cfg"]
    y, _ = mla_block_forward(static["params"], setup.inputs["x"], cfg)
    result = explain_part("mla", {}, seed=0, grad="random")
    shown = values(result)
    np.testing.assert_array_equal(shown["y"], y)
    np.testing.assert_allclose((shown["scores_nope"] + shown["scores_rope"]) * shown["scale"],
                               shown["scores"], atol=READ_OFF_ATOL)
    dn = cfg.mla.qk_nope_head_dim
    for head in range(cfg.n_head):      # the RoPE part of every head's key is the one k_pe
        np.testing.assert_array_equal(shown["k_heads"][:, head, :, dn:], shown["k_pe"])
    cache = latent_cache(cfg, n_layer=1, batch=1, max_len=4)
    mla_floats, mha_floats, gqa_floats = shown["cache"].tolist()
    assert cache.nbytes_per_token() == 4 * mla_floats
    assert (mha_floats, gqa_floats) == (4 * (4 + 2), 2 * (4 + 2))   # H=4, K=2, Dn+Dr=4, Dv=2
    assert result.check.ok


def test_block_residual_adds_reach_the_blocks_output():
    setup = setup_of("block")
    inputs, static = setup.inputs, setup.static
    params = {name: inputs[name] for name in static["names"]}
    out, _ = block_forward(params, inputs["x"], static["cfg"], causal=True)
    shown = values(explain_part("block", {}, seed=0))
    np.testing.assert_array_equal(shown["out"], out)
    np.testing.assert_array_equal(shown["resid2"], out)


def test_gpt2_values_are_the_models(capsys):
    setup = setup_of("gpt2")
    inputs, static = setup.inputs, setup.static
    params = {name: inputs[name] for name in static["names"]}
    logits, _ = gpt2.forward(params, inputs["ids"], static["cfg"])
    shown = values(explain_part("gpt2", {}, seed=0))
    np.testing.assert_array_equal(shown["logits"], logits)
    # The last layer's output, through the model's final norm, is what the LM head read.
    normed, _ = layer_norm_forward(shown["blocks.1.resid2"], params["norm_f.w"],
                                   params["norm_f.b"], eps=1e-5)
    np.testing.assert_allclose(normed, shown["norm_f"], atol=1e-5)
    probs = [row["prob"] for row in shown["top5"]]
    assert probs == sorted(probs, reverse=True)
    assert probs[0] == pytest.approx(float(shown["next_probs"].max()))


def test_gpt2_loads_a_saved_model_and_skips_the_check(capsys, tmp_path):
    tokenizer = CharTokenizer.from_text("hello world")
    cfg = gpt2.GPT2Config(vocab_size=tokenizer.vocab_size, max_seq_len=8, n_layer=1, n_head=2,
                          d_model=8)
    model = Model(cfg, gpt2.init_params(cfg, np.random.default_rng(1)), tokenizer)
    save_pretrained(model, tmp_path)
    result = run_json(capsys, "gpt2", "--ckpt", str(tmp_path), "--prompt", "hello",
                      "--backward")
    assert result["check"] is None
    assert result["forward"]["tokens"] == [repr(ch) for ch in "hello"]
    expected, _ = gpt2.forward(model.params, np.array([tokenizer.encode("hello")]), cfg)
    np.testing.assert_allclose(result["forward"]["logits"], expected, atol=1e-6)
    assert main(["explain", "gpt2", "--ckpt", str(tmp_path), "--backward", "--lang", "en"]) == 0
    assert LABELS["en"]["check_skipped"] in capsys.readouterr().out


def test_sizes_and_seed(capsys):
    argv = ["layer_norm", "--batch", "2", "--seq", "5", "--d-model", "6", "--seed", "3"]
    result = run_json(capsys, *argv)
    assert np.array(result["forward"]["y"]).shape == (2, 5, 6)
    assert run_json(capsys, *argv) == result
    assert run_json(capsys, "layer_norm", "--seed", "4")["forward"]["x"] != result["forward"]["x"]
    mqa = run_json(capsys, "mha", "--heads", "2", "--kv-heads", "1", "--d-model", "4")
    assert np.array(mqa["forward"]["k_heads"]).shape == (1, 1, 4, 2)


@pytest.mark.parametrize("argv, message", [
    (["layer_norm", "--heads", "2"], "--heads does not apply to layer_norm"),
    (["mha", "--heads", "3"], "must divide"),
    (["rope", "--seq", "2"], "--seq >= 4"),
    (["gelu", "--seq", "0"], "at least 1"),
    (["gpt2", "--prompt", "HELLO"], "not in the vocabulary"),
])
def test_bad_options_are_one_line_errors(capsys, argv, message):
    assert main(["explain", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_locale_picks_chinese(monkeypatch, capsys):
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert main(["explain", "softmax"]) == 0
    assert LABELS["zh"]["forward"] in capsys.readouterr().out


def test_cross_attention_reads_only_real_source_tokens_and_memory_sums_two_paths():
    result = explain_part("cross_attention", {}, seed=0, grad="random")
    forward, backward = values(result), values(result, "backward")
    weights, mask = forward["weights"], forward["mask"]              # (B, H, T, S), (B, S)
    assert np.allclose(weights.sum(axis=-1), 1.0, atol=READ_OFF_ATOL)
    assert np.all(weights[..., ~mask[0]] == 0.0)                     # padding is never read
    assert len(forward["reads"]) == weights.shape[2]
    assert np.all(backward["dmemory"][:, ~mask[0]] == 0.0) and result.check.ok


def test_cross_attention_on_a_trained_encoder_decoder_shows_its_tokens(tmp_path):
    """--ckpt RUN --prompt TEXT: the last decoder layer of a saved encoder-decoder, over the
    prompt's characters and the model's own greedy output (a random model here: the steps, not
    the alignment, are what is tested)."""
    from glassformer.errors import GlassformerError
    from glassformer.io.safetensors import save_safetensors
    from glassformer.models import seq2seq
    from glassformer.tokenizers.pairs import PairTokenizer
    tokenizer = PairTokenizer.from_pairs(["hello"], ["HH AH L OW"], target_split="space")
    cfg = seq2seq.Seq2SeqConfig(vocab_size=tokenizer.vocab_size, max_seq_len=8, n_layer=1,
                                n_dec_layer=2, n_head=2, d_model=8, pad_id=0, eos_id=1,
                                decoder_start_id=2)
    save_safetensors(tmp_path / "model.safetensors",
                     seq2seq.init_params(cfg, np.random.default_rng(0)))
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    tokenizer.save(tmp_path)
    result = explain_part("cross_attention", {"ckpt": str(tmp_path), "prompt": "hello"}, seed=0,
                          grad="ones")
    forward = values(result)
    assert forward["source"] == list("hello") and result.check is None
    assert forward["weights"].shape[:2] == (1, 2) and forward["weights"].shape[3] == 5
    assert len(forward["reads"]) == forward["weights"].shape[2]
    assert "decoder layer 1" in result.forward[0].text["en"]
    with pytest.raises(GlassformerError, match="needs --prompt"):
        explain_part("cross_attention", {"ckpt": str(tmp_path)}, seed=0)


def test_moe_reads_the_block_and_checks_the_balance_loss():
    from glassformer.blocks.moe import moe_forward
    from glassformer.blocks.names import sub_params
    from glassformer.explain.parts.moe import PREFIX
    from glassformer.ops.load_balance import load_balance_forward
    setup = setup_of("moe")
    result = explain_part("moe", {}, seed=0, grad="random")
    forward, backward = values(result), values(result, "backward")
    y, ctx = moe_forward(sub_params(setup.inputs, PREFIX), setup.inputs["x"], setup.static["cfg"])
    assert np.array_equal(forward["y"], y)
    assert np.isclose(forward["load"].sum(), 1.0)
    aux, _ = load_balance_forward(ctx.logits[None], ctx.router.indices[None])
    assert forward["aux_loss"] == aux
    assert backward["aux_check"] < FD_TOL and result.check.ok


def test_quant_blocks_are_the_formats_and_y_is_their_product():
    from glassformer.ops.quant import q4_1, q4_k

    result = explain_part("quant", {}, seed=0, grad="ones")
    forward, backward = values(result), values(result, "backward")
    w = inputs_of("quant")["w"].astype(np.float32)
    back = q4_1.dequantize(q4_1.quantize(w[None, :32]))[0]
    np.testing.assert_array_equal(forward["q4_1_back"], back)
    np.testing.assert_allclose(forward["y"], forward["x"] @ back[:, None], rtol=1e-5)
    np.testing.assert_allclose(backward["dx"], back[None], rtol=1e-6)        # G = 1: dx = W
    assert forward["errors"][0] < forward["errors"][1]                     # Q8_0 finer than Q4_0
    np.testing.assert_array_equal(forward["k_back"],
                                  q4_k.dequantize(q4_k.quantize(w[None]))[0, :32])
