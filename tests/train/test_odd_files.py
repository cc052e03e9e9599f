"""Issue 32: files as people have them. A byte-order mark and CRLF line ends are read as editors
mean them (eval, training text, TSV pairs, chat JSONL); a TSV line with more than one tab is
refused naming the line; a chat role outside system/user/assistant/tool is refused naming the
line; a conversation with an empty assistant turn is left out and counted; an adapter_config.json
that disagrees with its tensors (r, target_modules) is refused naming both."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.peft import ADAPTER_CONFIG, LoraConfig, init_adapters, load_adapter, \
    save_adapter
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import CHATML_TEMPLATE, ChatTemplate
from glassformer.train.data import read_text
from glassformer.train.datasets.chat import encode_chat_file, read_conversations
from glassformer.train.datasets.pairs import read_tsv

BOM = "\ufeff"
SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257}


def tiny_llama() -> Model:
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16)
    return Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer)


def test_read_text_drops_a_bom_and_crlf(tmp_path):
    path = tmp_path / "notepad.txt"
    path.write_bytes((BOM + "one\r\ntwo\r\n").encode("utf-8"))
    assert read_text(path) == "one\ntwo\n"
    path.write_bytes(BOM.encode("utf-8"))
    with pytest.raises(GlassformerError, match="is empty"):
        read_text(path)


def test_eval_reads_a_file_with_a_bom(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be\n" * 50, encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "--data", str(corpus), "--n-layer", "1", "--n-head", "2",
                 "--d-model", "16", "--block-size", "8", "--batch-size", "2", "--max-iters", "1",
                 "--eval-iters", "1", "--no-progress", "--workers", "1", "--out", str(run)]) == 0
    windows = tmp_path / "windows.txt"
    windows.write_bytes((BOM + "to be or not to be\r\n" * 40).encode("utf-8"))
    capsys.readouterr()
    assert main(["eval", "--model", str(run), "--data", str(windows)]) == 0
    assert "error" not in capsys.readouterr().err


def test_tsv_bom_crlf_and_extra_tabs(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes((BOM + "cat\tkat\r\ndog\tdog\r\n").encode("utf-8"))
    pairs = read_tsv(path)
    assert pairs.sources == ["cat", "dog"] and pairs.targets == ["kat", "dog"]
    path.write_text("cat\tkat\ndog\tdo\tg\t\n", encoding="utf-8")
    with pytest.raises(GlassformerError, match=r"line 2 has 3 tabs: expected one"):
        read_tsv(path)


def chat_line(*turns) -> str:
    return json.dumps({"messages": [{"role": r, "content": c} for r, c in turns]})


def test_chat_jsonl_bom_crlf_unknown_roles_and_empty_replies(tmp_path):
    path = tmp_path / "chat.jsonl"
    lines = [chat_line(("user", "hi"), ("assistant", "yo")),
             chat_line(("user", "hi"), ("assistant", "  ")),
             chat_line(("user", "and?"), ("assistant", "so"))]
    path.write_bytes((BOM + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    assert [number for number, _ in read_conversations(path)] == [1, 2, 3]
    data = encode_chat_file(path, tiny_llama().tokenizer, ChatTemplate(CHATML_TEMPLATE, {}),
                            block_size=48)
    assert data.skipped == 1 and data.ids.shape[0] == 2
    path.write_text(lines[0] + "\n" + chat_line(("user", "hi"), ("asistant", "yo")) + "\n",
                    encoding="utf-8")
    with pytest.raises(GlassformerError, match=r"line 2: message 1 has role 'asistant'; "
                                               r"expected one of system, user, assistant, tool"):
        read_conversations(path)


@pytest.fixture
def adapter(tmp_path):
    model = tiny_llama()
    lora_cfg = LoraConfig(r=4, targets=("q_proj", "v_proj"))
    save_adapter(tmp_path / "adapter", model,
                 init_adapters(model, lora_cfg, np.random.default_rng(1)), lora_cfg)
    return model, tmp_path / "adapter"


@pytest.mark.parametrize("change, message", [
    ({"r": 8}, "says r 8, but the tensors of model.layers.0.self_attn.q_proj have rank 4"),
    ({"target_modules": ["q_proj"]}, "target_modules ['q_proj'], but the tensors adapt "
                                     "model.layers.0.self_attn.v_proj"),
    ({"target_modules": ["q_proj", "v_proj", "k_proj"]}, "no tensor adapts k_proj"),
])
def test_an_adapter_config_that_disagrees_with_its_tensors_is_refused(adapter, change, message):
    model, folder = adapter
    load_adapter(folder, model)   # as saved: they agree
    config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    (folder / ADAPTER_CONFIG).write_text(json.dumps({**config, **change}), encoding="utf-8")
    with pytest.raises(CheckpointError) as raised:
        load_adapter(folder, model)
    assert message in str(raised.value) and "\n" not in str(raised.value)
