"""Chat: render a conversation with the model's chat template, generate the reply, stream it.

Chat models are trained on conversations laid out in one exact format; SmolLM2-Instruct (like
Qwen2) uses ChatML:

    <|im_start|>system
    You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
    <|im_start|>user
    What is the capital of France?<|im_end|>
    <|im_start|>assistant
    ...the model writes here, and ends its turn with <|im_end|>

The model files store the format as a Jinja template (GGUF: `tokenizer.chat_template`; HF folders:
`chat_template` in tokenizer_config.json). We do not run Jinja (no runtime dependency, and no
code from a checkpoint is executed): when the template is ChatML-shaped (it writes
`<|im_start|>` and `<|im_end|>`) we render ChatML in plain Python, adding the default system
prompt the template inserts when the conversation has none (found as the literal text after
`<|im_start|>system` in the template). Other template shapes are refused with a clear error.
The tests check our rendering against jinja2 running the real template.

Each turn re-renders the whole conversation and prefills it (simple and exact; a 135M model
prefills a few hundred tokens in well under a second). Generation stops at `<|im_end|>` or the
tokenizer's other end-of-text tokens, which are not printed or kept in the history.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

from glassformer.errors import GlassformerError
from glassformer.generate.stream import (StreamStep, end_of_text_ids, generated_ids,
                                         stream_text)
from glassformer.io.gguf import chat_template, gguf_model, open_gguf
from glassformer.io.pretrained import load_pretrained
from glassformer.packaged import MODEL, resolve_path

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
ROLES = ("system", "user", "assistant")
# A ChatML template's literal default system prompt: '<|im_start|>system\n' TEXT '<|im_end|>'
# ("\n" may be a real newline or the two characters backslash-n inside the Jinja string).
DEFAULT_SYSTEM = re.compile(r"<\|im_start\|>system(?:\n|\\n)(.*?)<\|im_end\|>", re.DOTALL)


class ChatFormat(NamedTuple):
    """What we need from a chat template: ChatML, plus its default system prompt (or None)."""
    default_system: str | None


def chat_format(template: str | None) -> ChatFormat:
    """Read a Jinja chat template; GlassformerError unless it is ChatML-shaped."""
    if not template:
        raise GlassformerError("this model has no chat template, so it was not trained to chat; "
                               "use `glassformer generate` to continue a text instead")
    if IM_START not in template or IM_END not in template:
        raise GlassformerError("only ChatML chat templates (<|im_start|> ... <|im_end|>) are "
                               f"supported; this template starts {template[:80]!r}")
    match = DEFAULT_SYSTEM.search(template)
    default = None if match is None else match.group(1).replace("\\n", "\n")
    return ChatFormat(default_system=default)


def render_chatml(messages: list[dict], fmt: ChatFormat, *,
                  add_generation_prompt: bool = True) -> str:
    """messages [{"role": ..., "content": ...}] -> the ChatML text the model reads."""
    parts = []
    if fmt.default_system is not None and (not messages or messages[0]["role"] != "system"):
        parts.append(f"{IM_START}system\n{fmt.default_system}{IM_END}\n")
    for message in messages:
        if message.get("role") not in ROLES:
            raise GlassformerError(f"message role must be one of {ROLES}, got "
                                   f"{message.get('role')!r}")
        parts.append(f"{IM_START}{message['role']}\n{message['content']}{IM_END}\n")
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


def open_chat(name_or_path: str | Path, *, system: str | None = None) -> "ChatSession":
    """Load a chat model (a .gguf file, an HF folder, or a named model such as smollm2) and its
    chat template; the template is checked before the weights are read.

    system: a system prompt replacing the template's default one.
    """
    path = resolve_path(name_or_path, MODEL)
    if path.is_file() and path.suffix == ".gguf":
        reader = open_gguf(path)  # one read of the file serves the template and the weights
        fmt = chat_format(chat_template(reader, path))
        model = gguf_model(reader, path)
    else:
        fmt = chat_format(folder_chat_template(path))
        model = load_pretrained(path)
    messages = [] if system is None else [{"role": "system", "content": system}]
    return ChatSession(model, fmt, messages)


def folder_chat_template(folder: Path) -> str | None:
    """The chat_template of an HF folder's tokenizer_config.json (or a chat_template.jinja)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = folder / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
            named = {entry.get("name"): entry.get("template") for entry in template}
            template = named.get("default")
        return template
    return None


@dataclass
class ChatSession:
    """A conversation with one model: the messages so far, and a way to add a turn."""
    model: object                      # a glassformer Model with a tokenizer
    fmt: ChatFormat
    messages: list[dict] = field(default_factory=list)

    def send(self, text: str, **generate_kwargs) -> Iterator[StreamStep]:
        """Add a user message, stream the assistant's reply; the reply joins `messages` at the end.

        generate_kwargs: max_new_tokens, temperature, top_k, top_p, seed, use_cache.
        """
        tokenizer = self.model.tokenizer
        if tokenizer is None:
            raise GlassformerError("this model has no tokenizer, so it cannot chat")
        messages = self.messages + [{"role": "user", "content": text}]
        prompt_ids = tokenizer.encode(render_chatml(messages, self.fmt))
        stop = set(end_of_text_ids(tokenizer))
        stop.add(tokenizer.special_tokens.get(IM_END, -1))
        stop.discard(-1)
        reply = []
        ids = generated_ids(self.model, prompt_ids, stop_ids=stop, **generate_kwargs)
        for step in stream_text(tokenizer, ids):
            reply.append(step.text)
            yield step
        self.messages = messages + [{"role": "assistant", "content": "".join(reply)}]
