"""Issue 49: estimate, then allocate. Each entry point a user's number sizes is given a hostile
size and must refuse in one line (exit 2), before allocating: the refused command's own peak RSS
stays under 1 GiB and its time under 10 s. The sizes are past half of any usual machine, so the
refusal does not depend on where the test runs."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer

REFUSED_RSS_BYTES = 1 << 30
REFUSED_SECONDS = 10.0
# Runs glassformer's CLI, then writes its own peak RSS (Linux: VmHWM in KiB) on stderr
# (tests/cli/test_budgets.py: not ru_maxrss, which execve keeps from the forked parent).
PEAK_RSS = """
import sys
from glassformer.cli import main
status = main(sys.argv[1:])
peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("PEAK_RSS_KIB", peak, file=sys.stderr)
sys.exit(status)
"""


def refused(*argv) -> str:
    """The one error line of `glassformer ARGV`, which must exit 2 fast and small."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *map(str, argv)],
                          capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    lines = done.stderr.splitlines()
    label, kib = lines[-1].split()
    assert label == "PEAK_RSS_KIB", done.stderr
    assert done.returncode == 2, done.stderr
    assert len(lines) == 2 and "Traceback" not in done.stderr, done.stderr
    assert int(kib) * 1024 < REFUSED_RSS_BYTES and seconds < REFUSED_SECONDS, (kib, seconds)
    return lines[0]


def byte_model(folder, **sizes):
    """A LLaMA folder with a byte tokenizer (one token per byte), of these sizes."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [])
    cfg = llama.LlamaConfig(vocab_size=256, **sizes)
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """32 layers x 32 heads with a 4,096-token context: tiny weights, huge attention."""
    return byte_model(tmp_path_factory.mktemp("wide") / "m", max_seq_len=4096, n_layer=32,
                      n_head=32, d_model=64)


@pytest.mark.parametrize("argv, words", [
    (["attention", "--seq", 20000], "at --seq 20,000 would need about"),
    (["attention", "--batch", 100000], "would print 100,000 blocks per step"),
    (["attention", "--seq", 2000, "--backward"], "its finite-difference check"),
    (["explain", "mha", "--seq", 30000], "at --seq 30,000 would need about"),
])
def test_walkthroughs_past_their_budget_are_refused(argv, words):
    line = refused(*argv)
    assert words in line, line
    assert "lower --" in line.rsplit(":", 1)[-1], line    # the flag to change


def test_show_past_the_memory_budget_is_refused_naming_its_flags(wide, tmp_path):
    line = refused("show", "--model", wide, "--max-page-mb", 10 ** 7, "--out",
                   tmp_path / "p.html", "a" * 4000)
    assert "show on 4,000 tokens (32 layers x 32 heads" in line and "--max-page-mb" in line
    assert not (tmp_path / "p.html").exists()


def test_eval_past_the_memory_budget_is_refused_naming_its_flags(wide, tmp_path):
    data = tmp_path / "long.txt"
    data.write_text("the cat sat on the mat. " * 9000)
    line = refused("eval", "--model", wide, "--data", data, "--split", "all",
                   "--batch-size", 1000)
    assert "eval's forward of 52 windows x 4,096 tokens" in line
    assert "--batch-size" in line and "--block-size" in line


def test_a_declared_context_of_a_billion_does_not_size_the_cache(tmp_path):
    folder = byte_model(tmp_path / "m", max_seq_len=64, n_layer=1, n_head=2, d_model=16)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config,
                                                    "max_position_embeddings": 10 ** 9}))
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, "generate", "--model", str(folder),
                           "--max-new-tokens", "3", "hi"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stderr.splitlines()[-1].split()[1]) * 1024 < REFUSED_RSS_BYTES
    line = refused("generate", "--model", folder, "--max-new-tokens", 10 ** 8, "hi")
    assert "KV cache of 1 row(s) x 100,000,00" in line and "--max-new-tokens" in line


def test_a_declared_layer_count_past_the_weights_is_refused(tmp_path):
    folder = byte_model(tmp_path / "m", max_seq_len=64, n_layer=2, n_head=2, d_model=16)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10 ** 6}))
    line = refused("generate", "--model", folder, "hi")
    assert "config.json num_hidden_layers declares 1,000,000 layers" in line
