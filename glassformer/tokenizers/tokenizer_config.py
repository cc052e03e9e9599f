"""What a chat model's tokenizer carries besides its vocabulary: the chat template and the named
special tokens (`bos_token`, `eos_token`, ...) the template reads.

Hugging Face keeps them beside tokenizer.json, and so do we, in the same files:

    chat_template.jinja       the Jinja chat template (transformers >= 4.50 writes it here)
    tokenizer_config.json     "bos_token", "eos_token", "unk_token", "pad_token",
                              "added_tokens_decoder" (the special tokens by id), and, in older
                              files, "chat_template" (a string, or a list of named templates)

Reading follows transformers' precedence: chat_template.jinja wins over tokenizer_config.json's
"chat_template"; of named templates, "default" is taken. A GGUF file stores the same two things as
metadata (`tokenizer.chat_template`, `tokenizer.ggml.bos_token_id`, ...), read in bpe_files.py.
Writing follows transformers' save_pretrained: the template goes to chat_template.jinja, never
into tokenizer_config.json. Only text is read: the template is rendered later, in a sandbox
(tokenizers/chat_template.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.json_object import read_json_object

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"
# The named special tokens a chat template may read, as transformers passes them to it.
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token")


class TokenizerConfig(NamedTuple):
    """A tokenizer's chat template (or None) and named special tokens ({"eos_token": "</s>"})."""
    chat_template: str | None = None
    named_tokens: dict[str, str] | None = None

    def is_empty(self) -> bool:
        return self.chat_template is None and not self.named_tokens


def token_text(value) -> str | None:
    """A named token as tokenizer_config.json spells it: a string, or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def pick_template(template, source: Path) -> str | None:
    """The template of a tokenizer_config.json "chat_template": a string, or the "default" one
    of a list of named templates [{"name": ..., "template": ...}]."""
    if template is None or isinstance(template, str):
        return template
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template
                 if isinstance(entry, dict)}
        return named.get("default")
    raise GlassformerError(f"{source}: chat_template is a {type(template).__name__}, expected a "
                           "string or a list of named templates")


def read_tokenizer_config(folder: str | Path) -> TokenizerConfig:
    """The chat template and named tokens stored in `folder` (empty when it has neither file)."""
    folder = Path(folder)
    config_path = folder / CONFIG_FILE
    config = {}
    if config_path.is_file():
        config = read_json_object(config_path)
    template = pick_template(config.get("chat_template"), config_path)
    if (folder / CHAT_TEMPLATE_FILE).is_file():   # transformers: the .jinja file wins
        template = (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    named = {name: token_text(config.get(name)) for name in NAMED_TOKENS}
    return TokenizerConfig(template, {name: text for name, text in named.items() if text})


def write_tokenizer_config(folder: str | Path, config: TokenizerConfig,
                           special_tokens: dict[str, int]) -> None:
    """tokenizer_config.json (+ chat_template.jinja) as transformers' save_pretrained writes them,
    so that AutoTokenizer.from_pretrained(folder) gets the same template and special tokens."""
    folder = Path(folder)
    decoder = {str(token_id): {"content": token, "lstrip": False, "normalized": False,
                               "rstrip": False, "single_word": False, "special": True}
               for token, token_id in sorted(special_tokens.items(), key=lambda item: item[1])}
    layout = {"added_tokens_decoder": decoder, "clean_up_tokenization_spaces": False,
              **(config.named_tokens or {}), "tokenizer_class": "PreTrainedTokenizerFast"}
    (folder / CONFIG_FILE).write_text(json.dumps(layout, ensure_ascii=False, indent=2) + "\n",
                                      encoding="utf-8")
    if config.chat_template is not None:
        (folder / CHAT_TEMPLATE_FILE).write_text(config.chat_template, encoding="utf-8")
