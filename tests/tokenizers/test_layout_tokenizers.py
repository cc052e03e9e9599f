"""base.LayoutTokenizer: the char and pair tokenizers save, load and check their one-file layouts
through the same code, so each refuses the other's file, a missing file and a layout without its
vocabulary in one line."""
import json

import pytest

from glassformer.errors import GlassformerError
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.pairs import PairTokenizer

TOKENIZERS = {"char": CharTokenizer(list("abc"), ["<|endoftext|>"]),
              "pair": PairTokenizer(["AA", "b", "c"], target_split="space")}


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_save_then_load_gives_the_same_tokenizer(tmp_path, kind):
    tok = TOKENIZERS[kind]
    written = tok.save(tmp_path / "folder")
    assert written == tmp_path / "folder" / "tokenizer.json"
    assert json.loads(written.read_text(encoding="utf-8"))["type"] == tok.LAYOUT_TYPE
    again = type(tok).load(tmp_path / "folder")
    assert again.fields() == tok.fields()
    assert type(tok).load(written).fields() == tok.fields()   # the .json file itself


def test_each_refuses_the_others_file_naming_the_type_found(tmp_path):
    TOKENIZERS["char"].save(tmp_path / "char")
    TOKENIZERS["pair"].save(tmp_path / "pair")
    with pytest.raises(GlassformerError, match="is not a pair tokenizer: expected "
                                               "{\"type\": \"pairs\", ...}, found type 'char'"):
        PairTokenizer.load(tmp_path / "char")
    with pytest.raises(GlassformerError, match="is not a char tokenizer: .* found type 'pairs'"):
        CharTokenizer.load(tmp_path / "pair")


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_missing_file_and_missing_vocabulary_are_one_line(tmp_path, kind):
    cls = type(TOKENIZERS[kind])
    with pytest.raises(GlassformerError, match=f"no {kind} tokenizer at .*: file not found"):
        cls.load(tmp_path / "nowhere")
    with pytest.raises(GlassformerError, match=f'{kind} tokenizer layout has no "{cls.VOCAB}" '
                                               "list"):
        cls.from_layout({"type": cls.LAYOUT_TYPE}, "x.json")
