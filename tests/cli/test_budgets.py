"""Issue 32: budgets before work. A LoRA rank past min(in, out) of a target, a chat template that
would render without end (a huge range, repetition, power or call, a loop that never ends) and
`show` past its page budget are each one line, exit 2, nothing written, refused before they
allocate: the refused command's own peak RSS stays under REFUSED_RSS_BYTES."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import glassformer.tokenizers.chat_template as templates
from glassformer.errors import GlassformerError
from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import render_chat
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

REFUSED_RSS_BYTES = 1 << 30   # the bound for a refused command
SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}
CHATML = ("{% for message in messages %}"
          "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Runs glassformer's CLI, then writes its own peak RSS (Linux: VmHWM in KiB) on stderr.
# note: not ru_maxrss, which execve keeps from the forked parent: under a 3 GB pytest it reads 3 GB
PEAK_RSS = """
import sys
from glassformer.cli import main
status = main(sys.argv[1:])
peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("PEAK_RSS_KIB", peak, file=sys.stderr)
sys.exit(status)
"""


def run_measured(*argv) -> tuple[int, list[str], int]:
    """(exit status, stderr lines but the last, peak RSS in bytes) of `glassformer ARGV`."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *argv], capture_output=True,
                          text=True, timeout=120)
    lines = done.stderr.splitlines()
    label, kib = lines[-1].split()
    assert label == "PEAK_RSS_KIB", done.stderr
    return done.returncode, lines[:-1], int(kib) * 1024


def tiny_llama(folder, template: str = CHATML):
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    tokenizer.config = TokenizerConfig(template, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16)
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


def test_a_lora_rank_past_the_targets_is_refused_before_allocating(tmp_path):
    base = tiny_llama(tmp_path / "base")
    data = tmp_path / "chat.jsonl"
    line = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "yo"}]}
    data.write_text(json.dumps(line) + "\n", encoding="utf-8")
    status, err, peak = run_measured("finetune", "--model", str(base), "--data", str(data),
                                     "--out", str(tmp_path / "run"), "--lora-r", "100000", "--block-size", "32",
                                     "--no-progress")
    assert status == 2 and len(err) == 1, err
    assert "--lora-r 100000 is larger than" in err[0] and "choose --lora-r 8 or less" in err[0]
    assert not (tmp_path / "run").exists()
    assert peak < REFUSED_RSS_BYTES


@pytest.mark.parametrize("template, message", [
    ("{% for i in range(10**9) %}x{% endfor %}", "a range of 1,000,000,000 numbers"),
    ("{{ 'x' * 10**8 }}", "repeats 1 items 100,000,000 times"),
    ("{{ [1, 2] * 10**8 }}", "repeats 2 items 100,000,000 times"),
    ("{{ 2 ** (10**9) }}", "2 ** 1000000000"),
    ("{{ 'a'.ljust(10**9) }}", "calls ljust with 1,000,000,000"),
    ("{% for i in range(99999) %}{{ 'x' * 1000 }}{% endfor %}", "its text passed 4,000,000"),
])
def test_templates_past_their_budget_are_one_line(template, message):
    with pytest.raises(GlassformerError, match=re.escape(message)) as raised:
        render_chat(template, [{"role": "user", "content": "hi"}])
    assert str(raised.value).startswith("the chat template was stopped: ")


def test_a_template_that_never_ends_is_stopped_in_time():
    endless = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    with pytest.raises(GlassformerError, match="still rendering after"):
        render_chat(endless, [{"role": "user", "content": "hi"}],
                    budget=templates.RenderBudget(max_s=0.2))


def test_ranges_keep_working_in_templates():
    template = ("{% for i in range(3) %}{{ i }}{{ loop.length }}{% endfor %}"
                "{{ range(4)|list }}{{ range(3)|length }}{{ 'ab' * 2 }}{{ 2 ** 10 }}")
    assert render_chat(template, [{"role": "user", "content": "hi"}]) == \
        "031323[0, 1, 2, 3]3abab1024"


def test_a_hostile_template_in_a_model_is_one_line_within_the_budget(tmp_path):
    base = tiny_llama(tmp_path / "base", template="{% for i in range(10**9) %}x{% endfor %}")
    status, err, peak = run_measured("chat", "--model", str(base), "--message", "hi",
                                     "--max-new-tokens", "2")
    assert status == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert "range of 1,000,000,000 numbers" in err[0]
    assert peak < REFUSED_RSS_BYTES
