"""`finetune`'s default --target follows the model's family (issue 49): every linear layer of the
blocks (PEFT's "all-linear"), so a GPT-2 model gets c_attn, c_proj and c_fc and a LLaMA the seven
projections, with no --target given; adapter_config.json lists the names, as PEFT writes them,
and peft loads the GPT-2 adapter with glassformer's logits."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.lora_modules import ALL_LINEAR, family_targets, select_modules
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.io.safetensors import load_safetensors
from glassformer.models import gpt2, llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from tests.train.peft_logits import assert_peft_matches

FAST = ["--batch-size", "2", "--block-size", "16", "--max-iters", "2", "--eval-interval", "2",
        "--eval-iters", "1", "--warmup-iters", "1", "--no-progress", "--lora-r", "2",
        "--lr", "0.05"]


def byte_model(folder, family, cfg_class):
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [],
                             special_tokens={"<|endoftext|>": 256})
    cfg = cfg_class(vocab_size=tokenizer.vocab_size, max_seq_len=32, n_layer=2, n_head=2,
                    d_model=16)
    save_pretrained(Model(cfg, family.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "text.txt"
    path.write_text("to be or not to be, that is the question. " * 20, encoding="utf-8")
    return path


@pytest.mark.parametrize("arch, names", [
    ("gpt2", ["c_attn", "c_fc", "c_proj"]),
    ("llama", ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]),
])
def test_the_default_targets_are_the_familys_linear_layers(tmp_path, text, capsys, arch, names):
    family, cfg_class = {"gpt2": (gpt2, gpt2.GPT2Config),
                         "llama": (llama, llama.LlamaConfig)}[arch]
    base = byte_model(tmp_path / "base", family, cfg_class)
    run = tmp_path / "run"
    assert main(["finetune", "--model", str(base), "--data", str(text), "--out", str(run),
                 *FAST]) == 0
    config = json.loads((run / "adapter_config.json").read_text())
    assert config["target_modules"] == names
    model = load_pretrained(base)
    adapted = {key.split(".lora_")[0] for key in load_safetensors(run / "adapter_model.safetensors")}
    every = {"base_model.model." + m.hf_module for m in select_modules(model, ALL_LINEAR)}
    assert adapted == every and len(every) == 2 * (4 if arch == "gpt2" else 7)
    assert sorted(family_targets(model.arch, model.cfg)) == names
    # the run resumes with the same modules
    assert main(["finetune", "--out", str(run), "--resume", "--max-iters", "3",
                 "--no-progress"]) == 0


def test_target_all_linear_is_the_default_spelled_out(tmp_path, text, capsys):
    base = byte_model(tmp_path / "base", gpt2, gpt2.GPT2Config)
    assert main(["finetune", "--model", str(base), "--data", str(text), "--out",
                 str(tmp_path / "run"), *FAST, "--target", "all-linear"]) == 0
    config = json.loads((tmp_path / "run" / "adapter_config.json").read_text())
    assert config["target_modules"] == ["c_attn", "c_fc", "c_proj"]


def test_peft_loads_the_gpt2_default_adapter_with_our_logits(tmp_path, text, capsys):
    base = byte_model(tmp_path / "base", gpt2, gpt2.GPT2Config)
    run = tmp_path / "run"
    assert main(["finetune", "--model", str(base), "--data", str(text), "--out", str(run),
                 *FAST]) == 0
    assert_peft_matches(base, run, moved=10)