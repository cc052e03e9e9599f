"""Streaming decoder (characters cut across byte tokens), ChatML rendering vs plain jinja2, and
the chat template the real SmolLM2 GGUF carries."""
import numpy as np
import pytest

from glassformer.generate.stream import REPLACEMENT, stream_text
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.chat_template import render_chat

from chat_templates import PLAIN_CHATML, SMOLLM2_TEMPLATE  # tests/real is on sys.path

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Answer in French."},
     {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! 😊"},
     {"role": "user", "content": "多轮对话\nsecond line"}],
]


def byte_tokenizer() -> BPETokenizer:
    """One token per byte and no merges: every multi-byte character is cut across tokens."""
    return BPETokenizer({bytes([b]): b for b in range(256)}, [])


def test_stream_prints_only_complete_characters():
    tokenizer = byte_tokenizer()
    text = "héllo 猫🙂!"
    ids = tokenizer.encode(text)
    steps = list(stream_text(tokenizer, ids))
    assert "".join(step.text for step in steps) == text
    assert all(REPLACEMENT not in step.text for step in steps)
    assert [step.token_id for step in steps] == ids
    # The emoji's four bytes print nothing until the fourth completes it.
    emoji_end = len("héllo 猫🙂".encode())
    assert [step.text for step in steps[emoji_end - 4:emoji_end]] == ["", "", "", "🙂"]


def test_stream_holds_back_a_character_cut_at_the_end():
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode("ab猫")[:-1]           # the last character's final byte is missing
    steps = list(stream_text(tokenizer, ids))
    assert steps[-1].token_id is None
    assert "".join(step.text for step in steps) == "ab"  # no trailing U+FFFD (issue 32)
    assert tokenizer.decode(ids) == "ab" + REPLACEMENT


def test_stream_char_tokenizer():
    tokenizer = CharTokenizer.from_text("to be or not")
    ids = tokenizer.encode("not to be")
    assert [step.text for step in stream_text(tokenizer, ids)] == list("not to be")


@pytest.mark.parametrize("template", [SMOLLM2_TEMPLATE, PLAIN_CHATML])
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chatml_rendering_equals_plain_jinja2(template, messages):
    jinja2 = pytest.importorskip("jinja2")
    for add_generation_prompt in (True, False):
        expected = jinja2.Template(template).render(messages=messages,
                                                    add_generation_prompt=add_generation_prompt)
        assert render_chat(template, messages, add_generation_prompt) == expected


def test_chat_template_in_the_real_gguf_is_smollm2s(smollm2_path):
    from glassformer import load_tokenizer

    config = load_tokenizer(smollm2_path).config
    assert config.chat_template == SMOLLM2_TEMPLATE
    assert config.named_tokens == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                                   "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>"}


def test_stream_ids_are_python_ints():
    steps = list(stream_text(CharTokenizer.from_text("ab"), np.array([0, 1])))
    assert all(type(step.token_id) is int for step in steps)
