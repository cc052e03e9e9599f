"""`glassformer tokenizer encode` and `glassformer tokenizer train`: output and error handling."""
import json

from glassformer.cli import build_parser, main
from glassformer.tokenizers.bpe import BPETokenizer


def test_encode_gpt2_shows_readable_chinese(gpt2_dir, capsys):
    assert main(["tokenizer", "encode", "--tokenizer", str(gpt2_dir), "Hello 汉"]) == 0
    out = capsys.readouterr().out
    assert "Ġæ" in out and '" 汉" 1/3' in out and "20 e6" in out
    assert "ids: [15496, 10545, 109, 231]" in out


def test_encode_json_by_installed_name(gpt2_dir, capsys):
    assert main(["tokenizer", "encode", "--tokenizer", "gpt2", "--json", "Hello world"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ids"] == [15496, 995]
    assert shown["pieces"] == ["Hello", "Ġworld"]
    assert shown["texts"] == ["Hello", " world"]
    assert shown["bytes"] == ["48 65 6c 6c 6f", "20 77 6f 72 6c 64"]


def test_encode_wordpiece(minilm_dir, capsys):
    assert main(["tokenizer", "encode", "--tokenizer", "minilm", "unaffable"]) == 0
    out = capsys.readouterr().out
    assert "[CLS]" in out and "##" in out


def test_encode_reads_a_file(tmp_path, gpt2_dir, capsys):
    path = tmp_path / "text.txt"
    path.write_text("Hello world", encoding="utf-8")
    assert main(["tokenizer", "encode", "--tokenizer", "gpt2", "--json", "--file", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["ids"] == [15496, 995]


def test_encode_bad_path_is_one_line_exit_2(tmp_path, capsys):
    assert main(["tokenizer", "encode", "--tokenizer", str(tmp_path / "absent"), "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("glassformer tokenizer: error: no tokenizer at") and err.count("\n") == 1


def test_encode_needs_exactly_one_text_source(capsys):
    assert main(["tokenizer", "encode", "--tokenizer", "gpt2"]) == 2
    assert "either as an argument or with --file" in capsys.readouterr().err


def test_train_writes_a_loadable_tokenizer(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text("hug hug hug pug pun bun hugs", encoding="utf-8")
    out_dir = tmp_path / "tok"
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "262",
                 "--out", str(out_dir), "--pattern", "llama3", "--special", "<|endoftext|>"]) == 0
    out = capsys.readouterr().out
    assert "262 ids: 256 bytes + 5 merges + 1 special" in out
    tok = BPETokenizer.load(out_dir)
    assert tok.pretokenizer.name == "llama3"
    assert tok.special_tokens == {"<|endoftext|>": 261}


def test_train_missing_data_is_an_error(tmp_path, capsys):
    assert main(["tokenizer", "train", "--data", str(tmp_path / "none.txt"), "--vocab-size", "300",
                 "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_seed_is_taken_before_or_after_the_action():
    parser = build_parser()
    for argv, seed in ((["tokenizer", "--seed", "3", "encode"], 3),
                       (["tokenizer", "encode", "--seed", "4"], 4),
                       (["tokenizer", "encode"], 0)):
        assert parser.parse_args([*argv, "--tokenizer", "gpt2", "x"]).seed == seed


def test_encode_marks_control_tokens_and_reads_typed_ones_as_text(gpt2_dir, capsys):
    text = "hi <|endoftext|>"
    assert main(["tokenizer", "encode", "--tokenizer", "gpt2", "--json", text]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert 50256 not in shown["ids"] and not any(shown["control"])
    assert main(["tokenizer", "encode", "--tokenizer", "gpt2", "--allow-special", text]) == 0
    out = capsys.readouterr().out
    assert '"<|endoftext|>"  control' in out and "(1 control)" in out
    assert main(["tokenizer", "encode", "--tokenizer", "gpt2", text]) == 0
    assert "read as plain text; --allow-special" in capsys.readouterr().out
