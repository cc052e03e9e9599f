"""The benchmark item page in Chromium (`glassformer eval --task T --view LINE --html FILE` on a
tiny model): each option's tokens with the probabilities `glassformer eval` scores, the sums and
the picks, English and 中文, no request, no console error."""
import math
from pathlib import Path

import numpy as np
import pytest

import glassformer.cli.eval_tasks as eval_tasks
from glassformer.cli import main
from glassformer.io.jsonl import read_text
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tasks.evaluate.items import read_items
from glassformer.tasks.evaluate.run_task import encode_item, item_record
from glassformer.tasks.evaluate.score import score_requests
from glassformer.tasks.evaluate.tasks_table import TASKS
from glassformer.tokenizers.char import CharTokenizer

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "eval"
V = "window.glassformerViewer"


@pytest.fixture(scope="module")
def tiny():
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    tokenizer = CharTokenizer.from_text(read_text(DATA / "arc_easy.jsonl") + "\n")
    cfg = llama.LlamaConfig(vocab_size=len(tokenizer.chars), max_seq_len=512, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16, d_ff=24)
    params = llama.init_params(cfg, np.random.default_rng(3))
    params = {k: (v * 8.0 if v.ndim == 2 else v).astype(np.float32) for k, v in params.items()}
    return Model(cfg, params, tokenizer)


def test_item_page_shows_each_options_token_probabilities(tiny, tmp_path, monkeypatch,
                                                          open_page, capsys):
    monkeypatch.setattr(eval_tasks, "load_model_shown", lambda name, adapter=None, *rest: tiny)
    out = tmp_path / "item.html"
    assert main(["eval", "--model", "tiny", "--task", "arc_easy", "--data-dir", str(DATA),
                 "--shots", "2", "--view", "4", "--html", str(out), "--lang", "en"]) == 0
    assert "wrote" in capsys.readouterr().out
    items = read_items(DATA / "arc_easy.jsonl", "multiple_choice")
    spec = TASKS["arc_easy"]                                           # line 4 = index 3
    record = item_record(spec, items[3], score_requests(tiny, encode_item(tiny, spec, items, 3, 2)))
    watched = open_page(out)
    page = watched.page
    assert page.evaluate(f"{V}.options()") == list(items[3].options)
    for o, logps in enumerate(record["token_logps"]):
        tokens = page.evaluate(f"{V}.tokens({o})")
        assert "".join(tok["text"] for tok in tokens) == " " + items[3].options[o]
        assert np.allclose([tok["logp"] for tok in tokens], logps, atol=1e-5)
        assert np.allclose([tok["prob"] for tok in tokens], [math.exp(lp) for lp in logps],
                           atol=1e-5)
    assert np.allclose(page.evaluate(f"{V}.sums()"), record["logliks"], atol=1e-5)
    assert page.evaluate(f"{V}.picks()") == {"gold": record["gold"], "acc": record["pred"],
                                              "acc_norm": record["pred_norm"]}
    assert "right answer" in page.inner_text(f"#marks-{record['gold']}")
    page.click("#lang-zh")
    assert "正确答案" in page.inner_text(f"#marks-{record['gold']}")
    assert "任务 arc_easy" in page.inner_text("#item-meta")
    watched.checked()


@pytest.mark.parametrize("extra,message", [
    (["--task", "arc_easy", "--view", "99999"], "--view 99999: arc_easy.jsonl has items on "
                                                "lines 1-"),
    (["--task", "arc_easy,copa", "--view", "1"], "--view shows one item of one scored task"),
    (["--task", "arc_easy", "--view", "1", "--html", "/nonexistent/p.html"], "cannot write"),
])
def test_bad_view_is_one_line(extra, message, capsys):
    assert main(["eval", "--model", "nothing-loaded", "--data-dir", str(DATA)] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
