"""load_tokenizer: every layout it recognises, and a clear error for each kind of bad input."""
import json
import shutil

import pytest

import glassformer
from glassformer import load_tokenizer
from glassformer.errors import GlassformerError
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.bpe_train import train_bpe
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.wordpiece import WordPieceTokenizer

TEXT = "hug hug hug pug pun bun hugs"


def test_exported_from_the_package():
    assert glassformer.load_tokenizer is load_tokenizer


def test_char_tokenizer_json(tmp_path):
    CharTokenizer.from_text("abc").save(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, CharTokenizer) and tok.encode("cab") == [2, 0, 1]
    assert load_tokenizer(tmp_path / "tokenizer.json").encode("cab") == [2, 0, 1]


def test_saved_bpe_folder_and_its_files(tmp_path):
    trained = train_bpe(TEXT, vocab_size=266)
    trained.save(tmp_path)
    for path in (tmp_path, tmp_path / "tokenizer.json"):
        assert load_tokenizer(path).encode("hug pug") == [257, 264]
    (tmp_path / "tokenizer.json").unlink()  # now only vocab.json + merges.txt are left
    for path in (tmp_path, tmp_path / "vocab.json", tmp_path / "merges.txt"):
        tok = load_tokenizer(path)
        assert isinstance(tok, BPETokenizer) and tok.encode("hug pug") == [257, 264]


def test_openai_gpt2_layout(gpt2_dir):
    tok = load_tokenizer(gpt2_dir / "vocab.bpe")
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.special_tokens == {"<|endoftext|>": 50256}


def test_wordpiece_folder_and_vocab_txt(tmp_path, minilm_dir):
    assert isinstance(load_tokenizer(minilm_dir), WordPieceTokenizer)
    shutil.copy(minilm_dir / "vocab.txt", tmp_path / "vocab.txt")
    tok = load_tokenizer(tmp_path)
    assert tok.encode("Hello world") == [101, 7592, 2088, 102]


def test_installed_names_resolve(gpt2_dir):
    assert load_tokenizer("gpt2").encode("Hello world") == [15496, 995]


def test_pattern_override(tmp_path):
    train_bpe(TEXT, vocab_size=266).save(tmp_path)
    assert load_tokenizer(tmp_path, pattern="smollm").pretokenizer.name == "smollm"


# --- bad input ------------------------------------------------------------------------------

def test_missing_path(tmp_path):
    with pytest.raises(GlassformerError, match="no such file or folder"):
        load_tokenizer(tmp_path / "absent")


def test_unknown_folder_layout(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(GlassformerError, match=r"unknown tokenizer layout .*found \['weights.bin'\]"):
        load_tokenizer(tmp_path)


def test_unknown_file_kind(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("hi", encoding="utf-8")
    with pytest.raises(GlassformerError, match="unknown tokenizer file"):
        load_tokenizer(path)


def test_missing_merges(tmp_path):
    (tmp_path / "vocab.json").write_text('{"a": 0}', encoding="utf-8")
    with pytest.raises(GlassformerError, match="missing its merges file merges.txt"):
        load_tokenizer(tmp_path)


def test_merges_without_vocab(tmp_path):
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n", encoding="utf-8")
    with pytest.raises(GlassformerError, match="has merges.txt but no vocab.json"):
        load_tokenizer(tmp_path)


def test_empty_merges(tmp_path):
    train_bpe(TEXT, vocab_size=260).save(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    with pytest.raises(GlassformerError, match="holds no merges"):
        load_tokenizer(tmp_path)


def test_malformed_merge_line(tmp_path):
    train_bpe(TEXT, vocab_size=260).save(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "merges.txt").write_text("#version: 0.2\nu g\nh ug extra\n", encoding="utf-8")
    with pytest.raises(GlassformerError, match=r"merges.txt:3: a merge is two tokens"):
        load_tokenizer(tmp_path)


def test_merge_of_unknown_tokens(tmp_path):
    train_bpe(TEXT, vocab_size=260).save(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "merges.txt").write_text("#version: 0.2\nq z\n", encoding="utf-8")
    with pytest.raises(GlassformerError, match=r"merge 0 \(b'q', b'z'\) uses b'qz'"):
        load_tokenizer(tmp_path)


def test_tokenizer_json_without_merges(tmp_path):
    path = train_bpe(TEXT, vocab_size=260).save(tmp_path)
    layout = json.loads(path.read_text(encoding="utf-8"))
    del layout["model"]["merges"]
    path.write_text(json.dumps(layout), encoding="utf-8")
    with pytest.raises(GlassformerError, match="BPE model has no merges"):
        load_tokenizer(tmp_path)


def test_unsupported_model_type(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Unigram"}}', encoding="utf-8")
    with pytest.raises(GlassformerError, match="unsupported tokenizer model type 'Unigram'"):
        load_tokenizer(tmp_path)


def test_unsupported_pre_tokenizer(tmp_path):
    path = train_bpe(TEXT, vocab_size=260).save(tmp_path)
    layout = json.loads(path.read_text(encoding="utf-8"))
    layout["pre_tokenizer"] = {"type": "Whitespace"}
    path.write_text(json.dumps(layout), encoding="utf-8")
    with pytest.raises(GlassformerError, match="unsupported pre_tokenizer"):
        load_tokenizer(tmp_path)


def test_invalid_json(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(GlassformerError, match="is not valid JSON"):
        load_tokenizer(tmp_path)


def test_bad_tiktoken_line(tmp_path):
    path = tmp_path / "x.tiktoken"
    path.write_text("YQ== 0\nnot-base64!! 1\n", encoding="ascii")
    with pytest.raises(GlassformerError, match=r"x.tiktoken:2: expected 'base64 rank'"):
        load_tokenizer(path)


def test_not_a_gguf_file(tmp_path):
    pytest.importorskip("gguf")
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"this is not gguf")
    with pytest.raises(GlassformerError, match="is not a GGUF file"):
        load_tokenizer(path)


def test_unknown_pattern_name(tmp_path):
    train_bpe(TEXT, vocab_size=260).save(tmp_path)
    with pytest.raises(GlassformerError, match="unknown pre-tokenizer 'gpt5'"):
        load_tokenizer(tmp_path, pattern="gpt5")


def test_unknown_installed_name_is_treated_as_a_missing_path():
    with pytest.raises(GlassformerError, match="no such file or folder"):
        load_tokenizer("gpt5")


@pytest.mark.parametrize("bad_id", [-1, 266, 10**6])
def test_bpe_decode_rejects_ids_outside_the_vocabulary(bad_id):
    tok = train_bpe(TEXT, vocab_size=266)
    with pytest.raises(GlassformerError, match=f"id {bad_id} at position 2 is outside"):
        tok.decode([257, 258, bad_id])


def test_wordpiece_decode_rejects_ids_outside_the_vocabulary(minilm_dir):
    with pytest.raises(GlassformerError, match="id 30522 at position 0 is outside"):
        load_tokenizer(minilm_dir).decode([30522])


def test_bpe_encode_rejects_lone_surrogates(gpt2):
    with pytest.raises(GlassformerError, match=r"lone surrogate U\+D800"):
        gpt2.encode("ok \ud800")
