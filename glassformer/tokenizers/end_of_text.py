"""Which of a tokenizer's special tokens end a text or a turn, across families.

Generation stops on them (generate/stream.py, tasks/chat.py, serve/, GRPO's completions), and the
preference data closes each reply with the first of them (train/datasets/prefs.py): a fact of the
vocabulary, so it sits with the tokenizers, below everything that reads it.
"""
from __future__ import annotations

# Special tokens that end a text or a turn, across families (GPT-2, SmolLM/ChatML, LLaMA 2/3).
END_OF_TEXT_TOKENS = ("<|endoftext|>", "<|im_end|>", "</s>", "<|eot_id|>", "<|end_of_text|>")


def end_of_text_ids(tokenizer) -> list[int]:
    """Ids of the tokenizer's end-of-text specials (END_OF_TEXT_TOKENS), in that order; [] for
    char models."""
    specials = tokenizer.special_tokens
    return [specials[token] for token in END_OF_TEXT_TOKENS if token in specials]
