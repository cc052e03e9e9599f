"""No lost work (issue 49): a line on chat's input that is not UTF-8 is skipped with one warning
and the conversation goes on (piped and at a prompt); `convert` writes only into a new or empty
folder unless --force is given, and says so before loading the model."""
import io
import json
import sys

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
REPLY = ["--temperature", "0", "--max-new-tokens", "2"]


@pytest.fixture
def chat_model(tmp_path):
    """A tiny LLaMA with a byte-level tokenizer and a ChatML template (no downloads)."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    tokenizer.config = TokenizerConfig(CHATML, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=128, n_layer=1,
                            n_head=2, n_kv_head=1, d_model=16)
    folder = tmp_path / "tiny"
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


def saved_roles(path) -> list[tuple[str, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(m["role"], m["content"]) for m in map(json.loads, lines)]


def test_piped_chat_skips_a_line_that_is_not_utf8(chat_model, tmp_path, monkeypatch, capsys):
    saved = tmp_path / "chat.jsonl"
    piped = b"hello\n\xff\xfe not text\nagain \xe4\xbd\xa0\n/save " + bytes(saved) + b"\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(piped), encoding="utf-8"))
    assert main(["chat", "--model", str(chat_model), *REPLY]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: skipped input line 2: not UTF-8 text (byte 0xff at byte 1); "
                        "the conversation goes on"]
    roles = saved_roles(saved)
    assert [role for role, _ in roles] == ["user", "assistant", "user", "assistant"]
    assert roles[0][1] == "hello" and roles[2][1] == "again 你"


def test_a_prompt_line_that_is_not_utf8_keeps_the_conversation(chat_model, tmp_path,
                                                                monkeypatch, capsys):
    """At a terminal input() raises UnicodeDecodeError for such a line (its bytes are read)."""
    saved = tmp_path / "chat.jsonl"
    typed = iter(["hi", None, "/save " + str(saved)])

    def fake_input(prompt):
        line = next(typed, EOFError)
        if line is EOFError:
            raise EOFError
        if line is None:
            raise UnicodeDecodeError("utf-8", b"\xc3(", 0, 1, "invalid continuation byte")
        return line

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr("builtins.input", fake_input)
    assert main(["chat", "--model", str(chat_model), *REPLY]) == 0
    err = capsys.readouterr().err
    assert "warning: skipped input line 2: not UTF-8 text (byte 0xc3 at byte 1)" in err
    assert [role for role, _ in saved_roles(saved)] == ["user", "assistant"]


def test_convert_refuses_a_folder_that_is_not_empty_before_loading(chat_model, tmp_path,
                                                                   monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_log.jsonl").write_text('{"iter": 0}\n', encoding="utf-8")
    (run / "ckpt.safetensors").write_bytes(b"weights")

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the folder was checked")

    import glassformer.cli.convert as convert_command
    monkeypatch.setattr(convert_command, "load_model_shown", no_load)
    for flag in ("--out", "--merge"):
        adapter = ["--adapter", str(tmp_path)] if flag == "--merge" else []
        assert main(["convert", "--model", str(chat_model), *adapter, flag, str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert (f"{run} is not empty (it holds ckpt.safetensors, train_log.jsonl); give a new or "
                "empty folder, or --force") in err
    assert sorted(p.name for p in run.iterdir()) == ["ckpt.safetensors", "train_log.jsonl"]
    file = tmp_path / "model.bin"
    file.write_bytes(b"x")
    assert main(["convert", "--model", str(chat_model), "--out", str(file)]) == 2
    assert f"{file} is a file" in capsys.readouterr().err


def test_convert_writes_into_an_empty_folder_or_with_force(chat_model, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["convert", "--model", str(chat_model), "--out", str(empty)]) == 0
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("kept", encoding="utf-8")
    assert main(["convert", "--model", str(chat_model), "--out", str(run), "--force"]) == 0
    assert (run / "notes.txt").read_text(encoding="utf-8") == "kept"
    np.testing.assert_array_equal(load_pretrained(run).params["tok_emb"],
                                  load_pretrained(chat_model).params["tok_emb"])
