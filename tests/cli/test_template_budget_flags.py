"""Issue 32: the limits of a chat template's render are flags a user may raise
(`--template-max-chars`, `--template-timeout` on chat, finetune, eval and serve;
tokenizers/template_budget.py). Past either: one line, exit 2, no traceback, naming the flag (and,
for the size, the value that fits); the value named then renders; a bad value is one line."""
import json
import re

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import render_chat
from glassformer.tokenizers.template_budget import RenderBudget
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}
CHATML = ("{% for message in messages %}"
          "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
HI = [{"role": "user", "content": "hi"}]
# ChatML of HI with the generation prompt: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
HI_CHARS = 52
NO_TIME_S = "0.000000001"   # a render always takes longer than one nanosecond


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chatml")
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    tokenizer.config = TokenizerConfig(CHATML, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16)
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_the_size_limit_names_the_size_that_fits_and_that_size_renders():
    loop = "{% for i in range(2000) %}{{ 'abcdefghij' }}{% endfor %}"   # 20,000 characters
    with pytest.raises(GlassformerError, match=re.escape(
            "its text passed 1,000 characters: it is 20,000 (--template-max-chars 20000 lets "
            "it render)")):
        render_chat(loop, HI, budget=RenderBudget(max_chars=1000))
    assert len(render_chat(loop, HI, budget=RenderBudget(max_chars=20000))) == 20000
    with pytest.raises(GlassformerError, match=re.escape("--template-max-chars 3000 lets")):
        render_chat("{{ 'x' * 3000 }}", HI, budget=RenderBudget(max_chars=1000))
    assert render_chat("{{ 'x' * 3000 }}", HI, budget=RenderBudget(max_chars=3000)) == "x" * 3000


def test_the_time_limit_names_its_flag_and_the_default_renders():
    loop = "{% for i in range(3000) %}{{ i }}{% endfor %}"
    with pytest.raises(GlassformerError, match=r"still rendering after 1e-09 s "
                                               r"\(--template-timeout 2e-09 or more"):
        render_chat(loop, HI, budget=RenderBudget(max_s=float(NO_TIME_S)))
    assert render_chat(loop, HI).startswith("012")


def test_chat_past_each_limit_is_one_line_and_the_flag_raises_it(chat_model, capsys):
    argv = ["chat", "--model", str(chat_model), "--message", "hi", "--max-new-tokens", "2",
            "--temperature", "0"]
    assert main([*argv, "--template-max-chars", "20"]) == 2
    line = one_line(capsys)
    assert line.endswith(f"its text passed 20 characters: it is {HI_CHARS} "
                         f"(--template-max-chars {HI_CHARS} lets it render)"), line
    assert main([*argv, "--template-max-chars", str(HI_CHARS)]) == 0
    capsys.readouterr()
    assert main([*argv, "--template-timeout", NO_TIME_S]) == 2
    assert "(--template-timeout 2e-09 or more may let it finish)" in one_line(capsys)
    assert main([*argv, "--template-timeout", "30"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("flag, value, message", [
    ("--template-max-chars", "0", "--template-max-chars must be at least 1, got 0"),
    ("--template-timeout", "-1", "--template-timeout must be more than 0 seconds, got -1.0"),
    ("--template-timeout", "nan", "--template-timeout must be more than 0 seconds, got nan"),
])
def test_a_bad_limit_is_one_line(chat_model, capsys, flag, value, message):
    assert main(["chat", "--model", str(chat_model), "--message", "hi", flag, value]) == 2
    assert one_line(capsys).endswith(message)


def test_finetune_past_the_limit_is_one_line_and_writes_nothing(chat_model, tmp_path, capsys):
    data = tmp_path / "chat.jsonl"
    line = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "yo"}]}
    data.write_text((json.dumps(line) + "\n") * 4, encoding="utf-8")
    argv = ["finetune", "--model", str(chat_model), "--data", str(data), "--block-size", "32",
            "--lora-r", "2", "--max-iters", "1", "--warmup-iters", "0", "--eval-interval", "1",
            "--eval-iters", "1", "--batch-size", "2", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "refused"), "--template-max-chars", "20"]) == 2
    assert "--template-max-chars" in one_line(capsys)
    assert not (tmp_path / "refused").exists()
    assert main([*argv, "--out", str(tmp_path / "run"), "--template-max-chars", "200"]) == 0
    assert (tmp_path / "run" / "adapter_model.safetensors").is_file()


def test_serve_renders_chat_prompts_within_its_budget(chat_model):
    from glassformer.io.pretrained import load_pretrained
    from glassformer.serve.prompts import chat_prompt
    model = load_pretrained(chat_model)
    with pytest.raises(GlassformerError, match=f"--template-max-chars {HI_CHARS} lets it render"):
        chat_prompt(model, {"messages": HI}, RenderBudget(max_chars=20))
    prompt, _ = chat_prompt(model, {"messages": HI}, RenderBudget(max_chars=HI_CHARS))
    assert prompt[0] == SPECIALS["<|im_start|>"]
