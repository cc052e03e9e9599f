"""Issue 32: messages a learner can act on. Training errors name the flags typed (never
TrainConfig or field names), a fine-tune past the context says which --block-size fits, a
fill-mask candidate that is a newline is shown escaped, and the READMEs write --target as the
flag reads it (comma-separated)."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.cli.fill_mask import format_candidates
from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

ROOT = Path(__file__).resolve().parents[2]
SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = tmp_path_factory.mktemp("base")
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    tokenizer.config = TokenizerConfig(None, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16)
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


def one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_finetune_max_iters_3_adapts_the_recipes_warmup(base, tmp_path, capsys):
    """The first run anyone makes: the recipe's --warmup-iters 10 gives way to --max-iters 3 in
    one line; two typed flags that conflict are refused naming both."""
    data = tmp_path / "text.txt"
    data.write_text("some text to learn from. " * 40, encoding="utf-8")
    out = tmp_path / "run"
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(out),
                 "--max-iters", "3", "--block-size", "32", "--lora-r", "4",
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert ("note: --warmup-iters 10 (a default) is longer than the run's --max-iters 3; a "
            "tenth of the run: using 0") in err
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out",
                 str(tmp_path / "both"), "--max-iters", "2", "--warmup-iters", "5",
                 "--block-size", "32", "--no-progress"]) == 2
    error = one_error(capsys)
    assert "--warmup-iters 5 and --max-iters 2 were both given" in error
    assert not (tmp_path / "both").exists()
    assert main(["finetune", "--model", str(base), "--data", str(data), "--out", str(out),
                 "--lr", "nan", "--block-size", "32", "--no-progress"]) == 2
    error = one_error(capsys)
    assert error.endswith("--lr must be a finite number, got nan") and "TrainConfig" not in error


def test_finetune_past_the_context_fits_the_default_and_refuses_a_typed_block(base, tmp_path,
                                                                              capsys):
    data = tmp_path / "text.txt"
    data.write_text("some text to learn from. " * 40, encoding="utf-8")
    assert main(["finetune", "--model", str(base), "--data", str(data), "--max-iters", "1",
                 "--lora-r", "4", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert ("note: --block-size 256 (a default) is longer than the model's context of 64 "
            "positions: using 64") in capsys.readouterr().err
    assert main(["finetune", "--model", str(base), "--data", str(data), "--block-size", "128",
                 "--out", str(tmp_path / "typed"), "--no-progress"]) == 2
    assert one_error(capsys).endswith("max_seq_len=64: give --block-size 64 or less")


def test_a_newline_candidate_is_shown_escaped():
    shown = format_candidates("a [MASK] b", [[("\n", 0.5), ("x", 0.25), (" ", 0.125)]])
    lines = shown.splitlines()
    assert lines[-3:] == ['  1. "\\n"  0.5000', "  2. x  0.2500", '  3. " "  0.1250']


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_readmes_write_target_comma_separated(readme):
    text = (ROOT / readme).read_text(encoding="utf-8")
    assert "c_attn,c_proj,c_fc" in text and "query,key,value,dense" in text
    assert not re.search(r"`c_attn c_proj", text)


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_readmes_show_example_reads_the_run_they_train(readme):
    """`show ... --png figures/` runs on the run the README trained (`--out out`); --png makes
    figures/ itself (tests/viewer/test_show_budgets.py)."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    assert "glassformer train --data tinyshakespeare --out out" in text
    assert "glassformer show --model out --layers 0,3 --heads 0-1 --png figures/" in text
    assert "runs/shakespeare" not in text
