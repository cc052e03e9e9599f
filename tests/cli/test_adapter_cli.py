"""`--adapter DIR` on generate, chat and convert (`--merge OUT`): the adapter is merged on load."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.peft import LoraConfig, init_adapters, save_adapter
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tasks.chat import open_chat
from glassformer.tokenizers.char import CharTokenizer

TEXT = "the quick brown fox jumps over the lazy dog\n"


@pytest.fixture(scope="module")
def base_and_adapter(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    # ChatML's two tokens let `chat` fall back on ChatML
    tokenizer = CharTokenizer.from_text(TEXT, special_tokens=["<|im_start|>", "<|im_end|>"])
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, d_model=16,
                            max_seq_len=64)
    model = Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer)
    save_pretrained(model, root / "base")
    lora_cfg = LoraConfig(r=2, alpha=4.0, targets=("q_proj", "v_proj", "down_proj"))
    rng = np.random.default_rng(1)
    adapters = {k: rng.standard_normal(v.shape).astype(np.float32)   # non-zero A and B
                for k, v in init_adapters(model, lora_cfg, rng).items()}
    save_adapter(root / "adapter", model, adapters, lora_cfg)
    return root / "base", root / "adapter"


def test_convert_merge_writes_the_merged_model(base_and_adapter, tmp_path):
    base, adapter = base_and_adapter
    assert main(["convert", "--model", str(base), "--adapter", str(adapter),
                 "--merge", str(tmp_path / "merged")]) == 0
    merged = load_pretrained(tmp_path / "merged")
    expected = load_pretrained(base, adapter=adapter)
    for name, value in expected.params.items():
        np.testing.assert_array_equal(merged.params[name], value)
    plain = load_pretrained(base).params["blocks.0.attn.wq"]
    assert not np.array_equal(merged.params["blocks.0.attn.wq"], plain)
    # the merged weight keeps the loaded one's memory order (column-major: decoding's fast order)
    assert expected.params["blocks.0.attn.wq"].flags.f_contiguous == plain.flags.f_contiguous


def test_generate_uses_the_adapter(base_and_adapter, capsys):
    base, adapter = base_and_adapter
    argv = ["generate", "--model", str(base), "--temperature", "0", "--max-new-tokens", "12",
            "the "]
    assert main(argv + ["--adapter", str(adapter)]) == 0
    with_adapter = capsys.readouterr().out
    model = load_pretrained(base, adapter=adapter)
    ids = np.array([model.tokenizer.encode("the ")])
    expected = ""
    for _ in range(12):   # greedy by hand, on the merged model, without a KV cache
        next_id = int(model(ids)[0, -1].argmax())
        expected += model.tokenizer.decode([next_id])
        ids = np.concatenate([ids, [[next_id]]], axis=1)
    assert with_adapter == expected + "\n"


def test_chat_opens_the_merged_model(base_and_adapter, capsys):
    base, adapter = base_and_adapter
    assert main(["chat", "--model", str(base), "--adapter", str(adapter), "--message", "hi",
                 "--max-new-tokens", "3"]) == 0
    capsys.readouterr()
    session = open_chat(base, adapter=adapter)
    merged = load_pretrained(base, adapter=adapter)
    np.testing.assert_array_equal(session.model.params["blocks.1.mlp.w_down"],
                                  merged.params["blocks.1.mlp.w_down"])


def test_adapter_errors_are_one_line(base_and_adapter, tmp_path, capsys):
    base, adapter = base_and_adapter
    assert main(["convert", "--model", str(base), "--merge", str(tmp_path / "x")]) == 2
    assert "--merge OUT merges an adapter: give it with --adapter DIR" in capsys.readouterr().err
    assert main(["generate", "--model", str(base), "--adapter", str(base), "hi"]) == 2
    err = capsys.readouterr().err
    assert "has no adapter_config.json" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
    assert main(["generate", "--model", str(adapter), "hi"]) == 2   # an adapter is not a model
    err = capsys.readouterr().err
    expected = (f"{adapter} is a LoRA adapter, not a model: load it on its base model, as "
                f"--model BASE --adapter {adapter}")
    assert expected in err and len(err.strip().splitlines()) == 1
