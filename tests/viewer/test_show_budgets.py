"""Issue 32: `show` budgets before work. A text past the context, a page past its attention budget
and PNG figures past theirs are one line each, refused before the forward, and the page refusal's
own advice (--layers, --heads) then works; --png makes its folder; the forward keeps only the
layers shown, so SmolLM2 on a 3,000-token text, first layer and head, stays within 2 GB (slow)."""
import subprocess
import sys

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.viewer import page_data
from glassformer.viewer.inspection import inspect
from glassformer.viewer.show import show

REFUSED_RSS_BYTES = 1 << 30        # the bound for a refused command
SMOLLM2_SHOW_RSS_BYTES = 2 << 30   # the bound for the first layer and head of SmolLM2
SAME_LENS_ATOL = 1e-5              # the lens, whole or by chunks of positions: float32 rounding
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


def run_measured(*argv, timeout=120) -> tuple[int, list[str], int]:
    """(exit status, stderr lines but the last, peak RSS in bytes) of `glassformer ARGV`."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *argv], capture_output=True,
                          text=True, timeout=timeout)
    lines = done.stderr.splitlines()
    label, kib = lines[-1].split()
    assert label == "PEAK_RSS_KIB", done.stderr
    return done.returncode, lines[:-1], int(kib) * 1024


def byte_llama(context: int = 8192, n_layer: int = 2) -> Model:
    """A tiny LLaMA reading bytes: one token per byte of ASCII text."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens={})
    cfg = llama.LlamaConfig(vocab_size=256, max_seq_len=context, n_layer=n_layer, n_head=2,
                            n_kv_head=1, d_model=16)
    return Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer)


def text_of(tokens: int) -> str:
    return ("the cat sat on the mat. " * (tokens // 24 + 1))[:tokens]


def test_past_the_page_budget_the_advice_fits(tmp_path, monkeypatch):
    monkeypatch.setattr(page_data, "ATTENTION_BUDGET_BYTES", 300_000)  # one head of 500 fits
    model = byte_llama()
    with pytest.raises(GlassformerError) as raised:
        show(model, text_of(500), tmp_path / "page.html", name="tiny")
    message = str(raised.value)
    assert "past the page budget" in message and "e.g. --layers 0 --heads 0" in message
    assert not (tmp_path / "page.html").exists()
    show(model, text_of(500), tmp_path / "page.html", name="tiny", layers="0", heads="0")
    assert (tmp_path / "page.html").stat().st_size > 0


def test_the_page_budget_is_a_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(page_data, "ATTENTION_BUDGET_BYTES", 300_000)
    with pytest.raises(GlassformerError, match=r"\(--max-page-mb\)"):
        show(byte_llama(), text_of(500), tmp_path / "page.html", name="tiny")
    show(byte_llama(), text_of(500), tmp_path / "page.html", name="tiny", max_page_mb=1.0)
    assert (tmp_path / "page.html").is_file()
    save_pretrained(byte_llama(), tmp_path / "model")
    assert main(["show", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "p.html"),
                 "--max-page-mb", "0", "hi"]) == 2
    assert "--max-page-mb must be more than 0, got 0.0" in capsys.readouterr().err


def test_a_text_too_long_for_one_head_says_how_long_fits(tmp_path):
    with pytest.raises(GlassformerError, match=r"even one head of one layer does not fit: "
                                               r"shorten the text to about \d+ tokens"):
        show(byte_llama(), text_of(6000), tmp_path / "page.html", name="tiny", layers="0",
             heads="0")


def test_a_text_past_the_context_is_refused(tmp_path):
    with pytest.raises(GlassformerError, match="the text is 100 tokens, past this model's "
                                               "context of 64: shorten it"):
        show(byte_llama(context=64), text_of(100), tmp_path / "page.html", name="tiny")


def test_png_figures_past_their_budget_are_refused_and_png_makes_its_folder(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(GlassformerError, match=r"--png: the figures of 2000 tokens would be "
                                               r"44,200 x 44,200 pixels .* up to \d+ tokens"):
        show(byte_llama(), text_of(2000), tmp_path / "page.html", name="tiny", layers="0",
             heads="0", png_dir=tmp_path / "figures")
    assert not (tmp_path / "figures").exists() and not (tmp_path / "page.html").exists()
    show(byte_llama(), text_of(12), tmp_path / "page.html", name="tiny",
         png_dir=tmp_path / "new" / "figures")
    assert (tmp_path / "new" / "figures" / "model_view.png").is_file()


def test_the_png_budget_is_a_flag_named_in_its_one_line(tmp_path, capsys):
    """--max-png-mpixels: past it one line, exit 2, naming the flag and a value that fits;
    that value then draws. 12 tokens make 464 x 464 = 215,296 pixels."""
    pytest.importorskip("matplotlib")
    save_pretrained(byte_llama(), tmp_path / "model")
    argv = ["show", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "p.html"),
            "--layers", "0", "--heads", "0", "--png", str(tmp_path / "figures")]
    assert main([*argv, "--max-png-mpixels", "0.1", text_of(12)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "464 x 464 pixels" in err and "budget of 0.1 M pixels" in err
    assert err.rstrip().endswith("--max-png-mpixels 1"), err
    assert not (tmp_path / "figures").exists() and not (tmp_path / "p.html").exists()
    assert main([*argv, "--max-png-mpixels", "-1", text_of(12)]) == 2
    assert "--max-png-mpixels must be more than 0, got -1.0" in capsys.readouterr().err
    assert main([*argv, "--max-png-mpixels", "1", text_of(12)]) == 0
    assert (tmp_path / "figures" / "model_view.png").is_file()


def test_the_layers_shown_are_the_layers_kept_with_the_same_numbers():
    model = byte_llama(n_layer=3)
    whole = inspect(model, text_of(300))
    kept = inspect(model, text_of(300), layers=[1])
    assert [a is None for a in kept.attentions] == [True, False, True]
    np.testing.assert_array_equal(kept.attentions[1], whole.attentions[1])
    for ours, theirs in zip(kept.residual, whole.residual):
        np.testing.assert_array_equal(ours, theirs)
    lens, all_lens = kept.logit_lens(3, [1]), whole.logit_lens(3)
    assert lens.layers == (1,) and all_lens.layers == (0, 1, 2)
    np.testing.assert_array_equal(lens.final, all_lens.final)
    np.testing.assert_allclose(lens.probs[0], all_lens.probs[1], atol=SAME_LENS_ATOL)


def test_a_refused_show_stays_within_its_budget(tmp_path):
    save_pretrained(byte_llama(), tmp_path / "model")
    status, err, peak = run_measured("show", "--model", str(tmp_path / "model"),
                                     "--out", str(tmp_path / "page.html"), text_of(6000))
    assert status == 2 and len(err) == 1 and "past the page budget" in err[0], err
    assert peak < REFUSED_RSS_BYTES and not (tmp_path / "page.html").exists()


@pytest.mark.slow
def test_smollm2_first_layer_and_head_of_3000_tokens_within_2_gb(tmp_path):
    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, resolve_path
    try:
        resolve_path("smollm2", MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))
    tokenizer = load_model("smollm2").tokenizer
    words = ("Once upon a time there was a little model that read every word of a long "
             "story and remembered where each one came from. ").split()
    text = " ".join(words * 200)
    ids = tokenizer.encode(text)
    text = tokenizer.decode(ids[:3000])
    status, err, peak = run_measured("show", "--model", "smollm2", "--layers", "0", "--heads",
                                     "0", "--out", str(tmp_path / "page.html"), text,
                                     timeout=1200)
    assert status == 0, err
    assert peak < SMOLLM2_SHOW_RSS_BYTES, f"peak RSS {peak / 1e9:.2f} GB"
