"""Issue 49: a model file's declared sizes are checked against its tensors before anything is
built per layer, and every weight must be finite. Each hostile file is refused in one line,
fast and small (the loader never builds the per-layer table a 10^9-layer header asks for)."""
import json
import time
import tracemalloc

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from glassformer.errors import CheckpointError
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer

HUGE = 10 ** 9
LIMIT_BYTES = 64 << 20     # Python allocations while refusing: far below one per-layer table
LIMIT_S = 10.0
D, F, V = 8, 16, 4


def tiny_folder(path, n_layer=2):
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [])
    cfg = llama.LlamaConfig(vocab_size=256, max_seq_len=64, n_layer=n_layer, n_head=2,
                            n_kv_head=1, d_model=16)
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer), path)
    return path


def patch_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def refused(load, match: str):
    """Run load(); it must raise a one-line CheckpointError matching `match`, quickly and
    without allocating much."""
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=match) as info:
        load()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "\n" not in str(info.value)
    assert seconds < LIMIT_S and peak < LIMIT_BYTES, (seconds, peak)
    return str(info.value)


def write_gguf(path, *, block_count=1, nan_in=None, context=64):
    """A 1-layer llama GGUF (float32) declaring `block_count` layers; nan_in: a tensor whose
    first 4 bytes are 0xFF (a NaN)."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(block_count)
    writer.add_context_length(context)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(F)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([chr(97 + i) for i in range(V)])
    writer.add_token_types([1] * V)
    writer.add_token_merges([])
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (V, D), "output_norm.weight": (D,),
              "blk.0.attn_norm.weight": (D,), "blk.0.attn_q.weight": (D, D),
              "blk.0.attn_k.weight": (D, D), "blk.0.attn_v.weight": (D, D),
              "blk.0.attn_output.weight": (D, D), "blk.0.ffn_norm.weight": (D,),
              "blk.0.ffn_gate.weight": (F, D), "blk.0.ffn_up.weight": (F, D),
              "blk.0.ffn_down.weight": (D, F)}
    for name, shape in shapes.items():
        array = rng.standard_normal(shape).astype(np.float32)
        if name == nan_in:
            array.view(np.uint32).reshape(-1)[0] = 0xFFFFFFFF       # 4 bytes of 0xFF: a NaN
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_config_declaring_a_million_layers_is_refused_before_any_table(tmp_path):
    folder = tiny_folder(tmp_path / "m")
    patch_config(folder, num_hidden_layers=10 ** 6)
    line = refused(lambda: load_pretrained(folder), "num_hidden_layers declares 1,000,000")
    assert "2 layers (layers.0 .. layers.1)" in line


def test_a_glassformer_folder_declaring_a_million_layers_is_refused(tmp_path):
    cfg = llama.LlamaConfig(vocab_size=16, max_seq_len=8, n_layer=2, n_head=2, d_model=8)
    params = llama.init_params(cfg, np.random.default_rng(0))
    folder = tmp_path / "ours"
    folder.mkdir()
    save_file(params, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**cfg.to_dict(), "n_layer": 10 ** 6}))
    refused(lambda: load_pretrained(folder), "n_layer declares 1,000,000 layers")


def test_a_gguf_declaring_a_billion_blocks_is_refused_before_any_table(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", block_count=HUGE)
    line = refused(lambda: load_pretrained(path), "llama.block_count declares 1,000,000,000")
    assert "1 layers (blk.0 .. blk.0)" in line


def test_a_gguf_with_a_layer_missing_names_it(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", block_count=2)
    refused(lambda: load_pretrained(path), "declares 2 layers, but the weights hold tensors "
                                           "of 1 layers")


def test_the_honest_files_still_load(tmp_path):
    assert load_pretrained(write_gguf(tmp_path / "m.gguf"), tokenizer=False).cfg.n_layer == 1
    assert load_pretrained(tiny_folder(tmp_path / "hf")).cfg.n_layer == 2


def test_nan_weights_in_safetensors_are_named(tmp_path):
    folder = tiny_folder(tmp_path / "m")
    tensors = load_file(str(folder / "model.safetensors"))
    key = "model.layers.1.mlp.down_proj.weight"
    tensors[key][3, 4] = np.nan
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    line = refused(lambda: load_pretrained(folder), f"tensor '{key}' holds 1 non-finite")
    assert "index (3, 4)" in line


def test_0xff_bytes_in_gguf_tensor_data_are_named(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", nan_in="blk.0.ffn_up.weight")
    refused(lambda: load_pretrained(path), "tensor 'blk.0.ffn_up.weight' holds 1 non-finite")


def test_an_infinite_weight_in_a_run_folder_is_named(tmp_path):
    cfg = llama.LlamaConfig(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=8)
    params = llama.init_params(cfg, np.random.default_rng(0))
    params["tok_emb"][0, 0] = np.inf
    folder = tmp_path / "ours"
    folder.mkdir()
    save_file(params, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    refused(lambda: load_pretrained(folder), "tensor 'tok_emb' holds 1 non-finite value")
