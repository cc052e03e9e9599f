"""The chat page at `/`: one self-contained HTML file (its CSS and JS inlined, nothing fetched
from anywhere but this server), as the viewer's pages are.

static/chat.html holds the layout with two markers where static/chat.css and static/chat.js go;
the model's name is filled in as escaped text. The script talks to /v1/chat/completions with
stream, logprobs and top_logprobs=5, and draws each reply token as a <span> tinted by its
probability (`data-p`), with its top-5 alternatives on hover.

A model without a chat template (every `glassformer train` run) cannot chat: its page opens in
completion mode instead (`data-mode="complete"`: the typed text is a prompt that
/v1/completions continues, its tokens drawn the same way), and says why (`data-chat="false"`).
The mode select switches either way.
"""
from __future__ import annotations

import html
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


def chat_page(model_name: str, has_template: bool = True) -> str:
    """The page for `model_name`; has_template picks the mode it opens in."""
    page = (STATIC / "chat.html").read_text(encoding="utf-8")
    css = (STATIC / "chat.css").read_text(encoding="utf-8")
    script = (STATIC / "chat.js").read_text(encoding="utf-8")
    return (page.replace("/*CSS*/", css).replace("/*JS*/", script)
            .replace("{{MODE}}", "chat" if has_template else "complete")
            .replace("{{CHAT}}", "true" if has_template else "false")
            .replace("{{MODEL}}", html.escape(model_name)))
