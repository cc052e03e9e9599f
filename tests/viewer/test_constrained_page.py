"""The constrained generation page in Chromium (`glassformer generate --json-schema S --html FILE`
on a tiny random LLaMA with SmolLM2's 49,152-token tokenizer): each reply token with the number
of tokens the schema's mask allowed (recounted here on a new table), the model's top choices
with the refused ones struck through, English and 中文, no request, no console error."""
import json

import numpy as np
import pytest

import glassformer.cli.generate as generate_cli
from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.generate.constrain import RowConstraint, advance_rows
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.packaged import TOKENIZER, packaged_path
from glassformer.tokenizers.load import load_tokenizer

V = "window.glassformerViewer"
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["x", "color"],
          "properties": {"x": {"type": "integer", "minimum": 1, "maximum": 9},
                         "color": {"type": "string", "enum": ["red", "green", "blue"]},
                         "note": {"type": "string", "maxLength": 6}}}


@pytest.fixture(scope="module")
def tiny():
    try:
        tokenizer = load_tokenizer(packaged_path("smollm2", TOKENIZER))
    except GlassformerError as err:
        pytest.skip(str(err))
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=256, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16, d_ff=24)
    params = llama.init_params(cfg, np.random.default_rng(5))
    params = {k: (v * 8.0 if v.ndim == 2 else v).astype(np.float32) for k, v in params.items()}
    return Model(cfg, params, tokenizer)


def test_page_shows_each_steps_mask_and_struck_choices(tiny, tmp_path, monkeypatch, open_page,
                                                       capsys):
    monkeypatch.setattr(generate_cli, "load_model_shown", lambda *a, **k: tiny)
    schema, out = tmp_path / "s.json", tmp_path / "gen.html"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    assert main(["generate", "--model", "tiny", "A point:", "--json-schema", str(schema),
                 "--html", str(out), "--lang", "en", "--max-new-tokens", "24",
                 "--temperature", "1", "--seed", "3"]) == 0
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.err
    watched = open_page(out)
    page = watched.page
    steps = page.evaluate(f"{V}.steps()")
    reply = page.evaluate(f"{V}.reply()")
    assert captured.out == reply + "\n" and len(steps) > 0
    table = generate_cli.schema_table(tiny, SCHEMA)               # recounted on a new table
    row = RowConstraint.start(table)
    ids = [step["id"] for step in steps]
    assert tiny.tokenizer.decode([i for i in ids if i not in table.eos_ids]) == reply
    struck_somewhere = False
    for i, step in enumerate(steps):
        allowed = table.allowed(row.state)
        assert step["allowed"] == int(allowed.sum()) and allowed[step["id"]]
        candidates = page.evaluate(f"{V}.candidates({i})")
        assert [c["allowed"] for c in candidates] == [bool(allowed[c["id"]]) for c in candidates]
        refused = [c["id"] for c in candidates if not c["allowed"]]
        assert page.evaluate(f"{V}.struck({i})") == refused
        struck_somewhere |= bool(refused)
        assert 0.0 <= step["p"] <= step["q"] <= 1.0 + 1e-9
        advance_rows([row], np.array([step["id"]]))
    assert struck_somewhere
    assert steps[0]["allowed"] == 1                      # '{"x":' is forced: one token at a time
    if ids[-1] in table.eos_ids:                         # ended: the value is whole and valid
        assert set(json.loads(reply)) >= {"x", "color"}
    assert "Step by step" in page.inner_text("#steps")
    page.click("#lang-zh")
    assert "逐步查看" in page.inner_text("#steps") and "词表 49,152" in page.inner_text("#gen-meta")
    watched.checked()


@pytest.mark.parametrize("extra,message", [
    (["--html", "p.html"], "--html shows a constrained generation: give --json-schema"),
    (["--json-schema", "json_object", "--html", "/nonexistent/p.html"], "cannot write"),
])
def test_bad_page_arguments_are_one_line(extra, message, capsys):
    assert main(["generate", "--model", "nothing-loaded", "x"] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
