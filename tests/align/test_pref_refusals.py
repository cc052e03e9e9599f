"""Preference and prompt files refuse what SFT refuses (issue 49): an empty chosen or rejected
(a plain "" or spaces, an empty message list, messages with empty contents) and a file that mixes
conversational and plain-string records are one line naming the line, before any training."""
import pytest

from align_fixtures import FAST, LORA, pref_records, tiny_tokenizer, write_jsonl
from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.train.datasets.prefs import encode_pref_file
from glassformer.train.datasets.prompts import encode_prompt_file

EMPTY = [
    (True, "chosen", [{"role": "assistant", "content": ""}]),
    (True, "rejected", [{"role": "assistant", "content": "  \n"}]),
    (True, "chosen", []),
    (False, "chosen", ""),
    (False, "rejected", "   "),
]


def encode(path):
    tokenizer = tiny_tokenizer()
    return encode_pref_file(path, tokenizer, chat_template_of(tokenizer), block_size=48)


@pytest.mark.parametrize("conversational, side, empty", EMPTY)
def test_an_empty_completion_is_refused_naming_the_line(tmp_path, conversational, side, empty):
    records = pref_records(6, conversational)
    records[3][side] = empty
    with pytest.raises(GlassformerError) as err:
        encode(write_jsonl(tmp_path / "p.jsonl", records))
    assert str(err.value) == (f"{tmp_path / 'p.jsonl'} line 4 has an empty {side!r}: a "
                              "completion needs text to prefer or to avoid")


@pytest.mark.parametrize("first", [True, False])
def test_a_file_mixing_the_formats_is_refused_naming_both_lines(tmp_path, first):
    records = pref_records(6, first)
    records[4] = pref_records(6, not first)[4]
    with pytest.raises(GlassformerError) as err:
        encode(write_jsonl(tmp_path / "p.jsonl", records))
    formats = {True: "conversational (message lists)", False: "plain strings"}
    assert str(err.value) == (f"{tmp_path / 'p.jsonl'} line 5 is {formats[not first]} but line 1 "
                              f"is {formats[first]}; a preference file holds one format")


def test_a_pair_with_text_on_one_message_of_two_is_kept(tmp_path):
    records = pref_records(4)
    records[0]["chosen"] = [{"role": "assistant", "content": ""},
                            {"role": "assistant", "content": "yes"}]
    assert encode(write_jsonl(tmp_path / "p.jsonl", records)).n == 4


def test_finetune_dpo_refuses_an_empty_chosen_in_one_line(tiny_base, tmp_path, capsys):
    records = pref_records()
    records[5]["chosen"] = [{"role": "assistant", "content": ""}]
    data = write_jsonl(tmp_path / "prefs.jsonl", records)
    out = tmp_path / "run"
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(out),
                 "--objective", "dpo", *FAST, *LORA]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"glassformer finetune: error: {data} line 6 has an empty "
                                "'chosen': a completion needs text to prefer or to avoid"]
    assert not out.exists()


def test_a_prompt_file_mixing_the_formats_names_the_lines(tmp_path):
    records = [{"prompt": [{"role": "user", "content": "hi"}]}, {"prompt": "hi"},
               {"prompt": "yo"}]
    path = write_jsonl(tmp_path / "prompts.jsonl", records[:1] * 2 + records[1:])
    tokenizer = tiny_tokenizer()
    with pytest.raises(GlassformerError) as err:
        encode_prompt_file(path, tokenizer, chat_template_of(tokenizer), block_size=48,
                           max_completion_tokens=4)
    assert str(err.value) == (f"{path} line 3 has a plain-text prompt but line 1 a "
                              "conversational (messages) one; a prompt file holds one format")


def test_the_pairs_are_checked_before_the_model_loads(tiny_base, tmp_path, capsys, monkeypatch):
    """SmolLM2 takes a second and ~1 GB to load: a bad pair is refused without it."""
    import glassformer.train.runs.finetune as finetune_run

    def no_load(model):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(finetune_run, "load_base", no_load)
    records = pref_records()
    records[9] = pref_records(24, conversational=False)[9]
    data = write_jsonl(tmp_path / "prefs.jsonl", records)
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out",
                 str(tmp_path / "run"), "--objective", "dpo", *FAST, *LORA]) == 2
    assert "line 10 is plain strings but line 1 is conversational" in capsys.readouterr().err
