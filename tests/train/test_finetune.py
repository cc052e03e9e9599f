"""`glassformer finetune` on a tiny random LLaMA with a chat template (no downloads): LoRA runs write
PEFT's files, train only the adapters, resume exactly; --full trains everything; bad input is one
line and leaves no run folder behind."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.io.safetensors import load_safetensors
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.tokenizer_config import TokenizerConfig
from tests.train.peft_logits import assert_peft_matches

SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}
TEMPLATE = ("{% for message in messages %}"
            "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
            "{{ raise_exception('unknown role ' + message['role']) }}{% endif %}"
            "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
FAST = ["--batch-size", "4", "--block-size", "48", "--max-iters", "4", "--eval-interval", "2",
        "--eval-iters", "1", "--warmup-iters", "1", "--no-progress", "--lora-r", "4", "--target", "q_proj,v_proj"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny LLaMA with a byte tokenizer and a ChatML template, as an HF folder."""
    folder = tmp_path_factory.mktemp("base")
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    tokenizer.config = TokenizerConfig(TEMPLATE, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, n_layer=2,
                            n_head=2, n_kv_head=1, d_model=16)
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


def chat_file(path, n=24, extra=None):
    lines = [{"messages": [{"role": "user", "content": f"count {i}"},
                           {"role": "assistant", "content": "one two"}]} for i in range(n)]
    text = "".join(json.dumps(line) + "\n" for line in lines) + (extra or "")
    path.write_text(text, encoding="utf-8")
    return path


def test_lora_run_writes_peft_files_and_trains_only_adapters(base, tmp_path, capsys):
    data, run = chat_file(tmp_path / "chat.jsonl"), tmp_path / "run"
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(run),
                 *FAST]) == 0
    config = json.loads((run / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4
    assert sorted(config["target_modules"]) == ["q_proj", "v_proj"]
    tensors = load_safetensors(run / "adapter_model.safetensors")
    assert set(tensors) == {f"base_model.model.model.layers.{i}.self_attn.{m}_proj.lora_{p}.weight"
                            for i in range(2) for m in "qv" for p in "AB"}
    ckpt = load_checkpoint(run)
    assert all(key.endswith((".lora_A", ".lora_B")) for key in ckpt.params)
    # B starts at zero; after training it moved, and the file holds the trained values
    b = ckpt.params["blocks.0.attn.wq.lora_B"]
    assert np.abs(b).max() > 0
    np.testing.assert_array_equal(
        tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"], b.T)
    assert ckpt.state["train_config"]["objective"] == "sft"


def test_resume_continues_to_the_same_losses(base, tmp_path, capsys):
    data = chat_file(tmp_path / "chat.jsonl")
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    common = ["--model", str(base), "--data", str(data), *FAST, "--lr-decay-iters", "4"]
    assert main(["finetune", *common, "--out", str(straight)]) == 0
    # the last --max-iters wins: stop at 2, then resume to 4
    assert main(["finetune", *common, "--out", str(halves), "--max-iters", "2"]) == 0
    assert main(["finetune", "--out", str(halves), "--resume", "--max-iters", "4",
                 "--no-progress"]) == 0
    losses = {str(p): [r["train_loss"] for r in read_train_log(p) if "train_loss" in r]
              for p in (straight, halves)}
    np.testing.assert_allclose(losses[str(halves)], losses[str(straight)], rtol=1e-5)


def test_full_finetune_trains_every_weight(base, tmp_path, capsys):
    data, run = chat_file(tmp_path / "chat.jsonl"), tmp_path / "full"
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(run),
                 "--full", *FAST[:-4]]) == 0
    ckpt = load_checkpoint(run)
    assert "tok_emb" in ckpt.params and not (run / "adapter_config.json").exists()


def test_plain_text_trains_next_token(base, tmp_path, capsys):
    data, run = tmp_path / "text.txt", tmp_path / "text"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(run),
                 *FAST]) == 0
    assert load_checkpoint(run).state["train_config"]["objective"] == "next-token"


@pytest.mark.parametrize("extra, flags, message", [
    ("[1, 2]\n", [], "line 25 is not an object with 'messages'"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n', [],
     "line 25: the conversation has no assistant turn"),
    ('{"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}\n',
     [], "line 25: message 0 has role 'robot'; expected one of system, user, assistant, tool"),
    ("", ["--target", "q_proj,w_nope"], "target 'w_nope' names no module"),
])
def test_bad_input_is_one_line_and_writes_nothing(base, tmp_path, capsys, extra, flags, message):
    data, run = chat_file(tmp_path / "chat.jsonl", extra=extra), tmp_path / "bad"
    argv = ["finetune", "--model", str(base), "--data", str(data), "--out", str(run), *FAST,
            *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not run.exists()




def test_peft_loads_the_run_folder_with_glassformers_logits(base, tmp_path, capsys):
    data, run = chat_file(tmp_path / "chat.jsonl"), tmp_path / "run"
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(run),
                 *FAST[:-2], "--target", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,"
                 "down_proj", "--lr", "0.05"]) == 0
    assert_peft_matches(base, run, moved=1e3)   # the base alone is far from both


def test_held_out_split_is_logged_and_a_resume_across_epochs_is_exact(base, tmp_path, capsys):
    """23 train conversations in batches of 4, 2 micro-batches a step: iteration 3 crosses into
    the second epoch, and a resume at 3 draws what the straight run drew."""
    data = chat_file(tmp_path / "chat.jsonl")
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    common = ["--model", str(base), "--data", str(data), *FAST, "--grad-accum", "2",
              "--max-iters", "6", "--eval-interval", "3", "--lr-decay-iters", "6"]
    assert main(["finetune", *common, "--out", str(straight)]) == 0
    line = "held out: the last 1 of 24 conversations (4%)"
    assert read_train_log(straight)[0] == {"iter": 0, "held_out": line}
    assert line in "".join(capsys.readouterr())
    assert main(["finetune", *common, "--out", str(halves), "--max-iters", "3"]) == 0
    assert main(["finetune", "--out", str(halves), "--resume", "--max-iters", "6",
                 "--no-progress"]) == 0
    losses = {str(p): [r["train_loss"] for r in read_train_log(p) if "train_loss" in r]
              for p in (straight, halves)}
    np.testing.assert_allclose(losses[str(halves)], losses[str(straight)], rtol=1e-5)
