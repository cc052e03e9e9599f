"""train/datasets/chat.py: chat JSONL -> ids with loss on the replies only, found by diffing renders; typed
control tokens stay text; bad lines are one clear error naming the line; padded batches."""
import json

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import ChatTemplate, chat_prompt_ids
from glassformer.train.datasets.chat import (PAD_ID, encode_chat_file, encode_conversation,
                                             split_chat)
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.sft import draw_chat

SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nbe brief<|im_end|>\\n' }}{% endif %}"
          "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Llama-2 style: [INST] user [/INST] reply </s>, and only user/assistant roles
INST = ("{% for message in messages %}"
        "{% if message['role'] not in ['user', 'assistant'] %}"
        "{{ raise_exception('only user and assistant roles are supported') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% else %}{{ ' ' + message['content'] + '<|endoftext|>' }}{% endif %}{% endfor %}")


def byte_tokenizer() -> BPETokenizer:
    return BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)


def learned_text(ids, in_reply) -> list[str]:
    """The runs of ids flagged as reply, decoded (control ids shown by name)."""
    names = {v: k for k, v in SPECIALS.items()}
    runs, current = [], []
    for token, flag in zip(ids, in_reply):
        if flag:
            current.append(names.get(token, chr(token)))
        elif current:
            runs.append("".join(current))
            current = []
    if current:
        runs.append("".join(current))
    return runs


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


TWO_TURNS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
             {"role": "user", "content": "more"}, {"role": "assistant", "content": "ok!"}]


def test_only_the_replies_and_their_end_token_are_learned():
    ids, in_reply = encode_conversation(byte_tokenizer(), ChatTemplate(CHATML, {}), TWO_TURNS)
    assert learned_text(ids, in_reply) == ["yo<|im_end|>\n", "ok!<|im_end|>\n"]
    assert ids.count(256) == 5   # system, user, assistant, user, assistant: control ids


def test_a_template_without_header_and_other_tokens_works_too():
    ids, in_reply = encode_conversation(byte_tokenizer(), ChatTemplate(INST, {}), TWO_TURNS)
    assert learned_text(ids, in_reply) == [" yo<|endoftext|>", " ok!<|endoftext|>"]


def test_the_prompt_part_is_exactly_what_chat_feeds_the_model():
    tokenizer, template = byte_tokenizer(), ChatTemplate(CHATML, {})
    ids, in_reply = encode_conversation(tokenizer, template, TWO_TURNS[:2])
    prompt = chat_prompt_ids(tokenizer, template, TWO_TURNS[:1])
    assert ids[:len(prompt)] == prompt and not any(in_reply[:len(prompt)])
    assert all(in_reply[len(prompt):])


def test_control_tokens_typed_in_a_message_stay_text():
    typed = [{"role": "user", "content": "<|im_end|>"},
             {"role": "assistant", "content": "a<|im_start|>b"}]
    ids, in_reply = encode_conversation(byte_tokenizer(), ChatTemplate(CHATML, {}), typed)
    assert [t for t in ids if t >= 256] == [256, 257, 256, 257, 256, 257]   # template's only
    assert learned_text(ids, in_reply) == ["a<|im_start|>b<|im_end|>\n"]
    assert ids[-16:-3] == list(b"a<|im_start|>")   # then b, <|im_end|>, \n


def test_targets_shift_by_one_and_ignore_prompt_and_padding(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": TWO_TURNS},
                                               {"messages": TWO_TURNS[:2]}])
    data = encode_chat_file(path, byte_tokenizer(), ChatTemplate(CHATML, {}), block_size=200)
    ids, in_reply = encode_conversation(byte_tokenizer(), ChatTemplate(CHATML, {}), TWO_TURNS)
    assert data.lengths.tolist()[0] == len(ids)
    expected = [ids[t + 1] if in_reply[t + 1] else IGNORE_INDEX for t in range(len(ids) - 1)]
    assert data.targets[0, :len(ids) - 1].tolist() == expected
    short = int(data.lengths[1])
    assert (data.targets[1, short - 1:] == IGNORE_INDEX).all()
    assert (data.ids[1, short:] == PAD_ID).all()


def test_batches_are_cut_to_their_longest_row_and_to_block_size(tmp_path):
    records = [{"messages": [{"role": "user", "content": "q" * n},
                             {"role": "assistant", "content": "a"}]} for n in (1, 5, 40)]
    path = write_jsonl(tmp_path / "c.jsonl", records)
    data = encode_chat_file(path, byte_tokenizer(), ChatTemplate(CHATML, {}), block_size=50)
    assert data.truncated == 1 and data.lengths.max() == 51
    rng = np.random.default_rng(0)
    x, y = draw_chat(data, TrainConfig(batch_size=8, block_size=50), rng)
    assert x.shape == y.shape == (8, 50) and x.dtype == y.dtype == np.int64
    small = data._replace(ids=data.ids[:2], targets=data.targets[:2], lengths=data.lengths[:2])
    x, y = draw_chat(small, TrainConfig(batch_size=3, block_size=50), rng)
    assert x.shape[1] == int(small.lengths.max()) - 1


def test_val_split_is_the_last_conversations(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": TWO_TURNS[:2]}] * 40)
    data = encode_chat_file(path, byte_tokenizer(), ChatTemplate(CHATML, {}), block_size=200)
    train, val = split_chat(data)
    assert len(train.ids) == 38 and len(val.ids) == 2


@pytest.mark.parametrize("line, message", [
    ('["not", "an", "object"]', "line 2 is not an object with 'messages'"),
    ('{"text": "hello"}', "line 2 is not an object with 'messages'"),
    ('{"messages": [', "line 2 is not valid JSON"),
    ('{"messages": [{"content": "x"}]}', "line 2: message 0 must be a dict with a string 'role'"),
    ('{"messages": [{"role": "user", "content": "x"}]}', "line 2: the conversation has no "
                                                         "assistant turn"),
    ('{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}',
     "line 2: the chat template refuses this conversation: only user and assistant roles"),
])
def test_bad_lines_are_one_line_naming_the_line(tmp_path, line, message):
    good = json.dumps({"messages": TWO_TURNS})
    path = tmp_path / "c.jsonl"
    path.write_text(good + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(GlassformerError) as err:
        encode_chat_file(path, byte_tokenizer(), ChatTemplate(INST, {}), block_size=100)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_template_that_rewrites_earlier_turns_is_refused():
    # shows only the last message: renders do not extend each other
    last_only = "{{ messages[-1]['content'] }}"
    with pytest.raises(GlassformerError, match="cannot be found by diffing"):
        encode_conversation(byte_tokenizer(), ChatTemplate(last_only, {}), TWO_TURNS)
