"""`glassformer chat --stats` on a saved Qwen3.5-shaped model: one line per turn on stderr says
how many ids it prefilled and that the later turns came back from a turn checkpoint of the
state (tasks/chat_checkpoints.py), with the checkpoints' bytes."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from glassformer.io.pretrained import save_pretrained
from glassformer.models import qwen3_5, qwen3_next
from glassformer.models.model import Model
from tests.tasks.test_chat_hybrid import MESSAGES, QWEN35, sharpened, tokenizer

ROOT = Path(__file__).resolve().parents[2]   # this tree's glassformer, in the child too


def test_stats_log_one_line_per_turn_with_the_checkpoint(tmp_path):
    cfg = qwen3_5.Qwen35Config(vocab_size=133, max_seq_len=512, n_layer=4, full_layers=(3,))
    model = Model(cfg, sharpened(qwen3_next.init_params(cfg, np.random.default_rng(0))),
                  tokenizer())
    folder = save_pretrained(model, tmp_path / "q35")
    (folder / "chat_template.jinja").write_text(QWEN35.source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "glassformer", "chat", "--model", str(folder), "--stats",
         "--temperature", "0", "--max-new-tokens", "6"],
        input="".join(m + "\n" for m in MESSAGES), capture_output=True, text=True,
        timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("[prefill:")]
    assert len(lines) == len(MESSAGES)
    counts = [tuple(map(int, re.match(r"\[prefill: (\d+) tokens \((\d+) reused", line).groups()))
              for line in lines]
    assert counts[0][1] == 0 and all(reused > 0 for _, reused in counts[1:])
    assert all("reused from a turn checkpoint of the state" in line for line in lines[1:])
    assert all("turn checkpoints hold" in line for line in lines)
