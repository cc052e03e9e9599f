"""Helpers of the alignment tests: the tiny model's tokenizer, the flags of a short run, data files."""
import json

from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}
TEMPLATE = ("{% for message in messages %}"
            "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
FAST = ["--batch-size", "4", "--block-size", "48", "--max-iters", "2", "--eval-interval", "2",
        "--eval-iters", "1", "--warmup-iters", "1", "--no-progress"]
LORA = ["--lora-r", "4", "--target", "q_proj,v_proj"]


def tiny_tokenizer() -> BPETokenizer:
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    tokenizer.config = TokenizerConfig(TEMPLATE, {"eos_token": "<|im_end|>"})
    return tokenizer


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def chat_records(n=24):
    return [{"messages": [{"role": "user", "content": f"count {i}"},
                          {"role": "assistant", "content": "one two"}]} for i in range(n)]


def pref_records(n=24, conversational=True):
    """Preference pairs: conversational message lists, or plain strings."""
    if conversational:
        return [{"prompt": [{"role": "user", "content": f"say {i}"}],
                 "chosen": [{"role": "assistant", "content": f"{i} yes"}],
                 "rejected": [{"role": "assistant", "content": f"no {i} no"}]} for i in range(n)]
    return [{"prompt": f"say {i}:", "chosen": f" {i} yes", "rejected": f" no {i}"}
            for i in range(n)]


def prompt_records(n=12):
    """Conversational prompts asking for a quatrain, as tang_sft.jsonl's user turns."""
    return [{"messages": [{"role": "user", "content": f"五言「{c}」"},
                          {"role": "assistant", "content": "x"}]} for c in "春江花月夜山水風雲雨天地"[:n]]


GRPO_FLAGS = ["--objective", "grpo", "--reward", "tang-form", "--num-generations", "3",
              "--max-completion-tokens", "6", "--block-size", "64"]
