"""`glassformer chat` at a terminal, driven through a pseudo-terminal as a person would use it:
the loading line, /help, unknown commands refused, /reset, /system, /save, arrow-key history,
Ctrl-C stopping a reply and keeping the conversation, and a second Ctrl-C at the prompt ending.

The model is a tiny random LLaMA saved to tmp_path whose greedy reply is an endless run of 'y'
and 'z' (it never writes an end-of-turn token), so a reply runs until it is stopped."""
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import termios
import time

import numpy as np
import pytest

from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WAIT_S = 60.0       # generous: the child imports NumPy and jinja2 on a busy machine
UP = "\x1b[A"       # the arrow key as a terminal sends it
CTRL_C = "\x03"


def tiny_chat_folder(folder):
    """One token per ASCII byte; the head reads one hidden unit, so greedy picks 'y' or 'z'."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(128)}, [],
                             special_tokens={"<|im_start|>": 128, "<|im_end|>": 129})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=100_000, n_layer=1,
                            n_head=2, d_model=16)
    params = llama.init_params(cfg, np.random.default_rng(0))
    params["norm_f.w"][:] = 0.0
    params["norm_f.w"][0] = 1.0
    params["lm_head"][:] = 0.0
    params["lm_head"][0, ord("y")], params["lm_head"][0, ord("z")] = -1.0, 1.0
    save_pretrained(Model(cfg, params, tokenizer), folder)
    (folder / "chat_template.jinja").write_text(CHATML, encoding="utf-8")
    return folder


class Terminal:
    """A child process on the slave side of a pty (its controlling terminal, so Ctrl-C typed
    here reaches it as SIGINT); `expect` reads until a text appears."""

    def __init__(self, argv, cwd):
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                                     start_new_session=True, preexec_fn=self._take_terminal)
        os.close(slave)
        self.seen = ""

    @staticmethod
    def _take_terminal():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        # a person's shell starts programs with Ctrl-C at its default; a test run started in
        # the background (`cmd &` without job control) would hand its children SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def expect(self, text: str) -> str:
        """Everything read until `text` appears (after what earlier calls consumed)."""
        return self.expect_any(text)

    def expect_any(self, *texts: str) -> str:
        """Everything read until one of `texts` appears."""
        deadline = time.monotonic() + WAIT_S
        text = texts[0]
        while not any(option in self.seen for option in texts):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.master], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"waited {WAIT_S} s for {text!r}; the terminal shows:\n"
                                     f"{self.seen[-2000:]}")
            try:
                chunk = os.read(self.master, 4096).decode(errors="replace")
            except OSError:  # the child closed the terminal
                chunk = ""
            if not chunk:
                raise AssertionError(f"the chat ended before {text!r}:\n{self.seen[-2000:]}")
            self.seen += chunk
        text = next(option for option in texts if option in self.seen)
        upto = self.seen.index(text) + len(text)
        shown, self.seen = self.seen[:upto], self.seen[upto:]
        return shown

    def close(self) -> int:
        code = self.proc.wait(timeout=WAIT_S)
        os.close(self.master)
        return code


def test_chat_at_a_terminal(tmp_path):
    folder = tiny_chat_folder(tmp_path / "tiny")
    term = Terminal([sys.executable, "-m", "glassformer", "chat", "--model", str(folder),
                     "--temperature", "0", "--max-new-tokens", "50000"], cwd=tmp_path)
    try:
        assert "loading" in term.expect("ready in")
        term.expect("you> ")
        term.send("/help\r")
        assert "/save FILE" in term.expect("you> ")
        term.send("/frobnicate\r")
        assert "unknown command '/frobnicate'" in term.expect("you> ")
        # a reply that would never end: Ctrl-C stops it, the conversation stays
        term.send("tell me everything\r")
        term.expect_any("yyy", "zzz")
        term.send(CTRL_C)
        assert "[stopped]" in term.expect("you> ")
        term.send("/save chat.jsonl\r")
        term.expect("you> ")
        saved = [json.loads(line) for line in (tmp_path / "chat.jsonl").read_text().splitlines()]
        assert [m["role"] for m in saved] == ["user", "assistant"]
        assert saved[0]["content"] == "tell me everything"
        assert set(saved[1]["content"]) <= {"y", "z"} and saved[1]["content"]
        # arrow-up brings back the last line (/save), which saves again: history works
        (tmp_path / "chat.jsonl").unlink()
        term.send(UP + "\r")
        shown = term.expect("you> ")
        assert "^[[A" not in shown and "messages written to chat.jsonl" in shown
        assert (tmp_path / "chat.jsonl").is_file()
        term.send("/system Be brief.\r")
        assert "[system prompt set]" in term.expect("you> ")
        term.send("/reset\r")
        assert "[conversation reset]" in term.expect("you> ")
        term.send("/save chat.jsonl\r")
        term.expect("you> ")
        saved = [json.loads(line) for line in (tmp_path / "chat.jsonl").read_text().splitlines()]
        assert saved == [{"role": "system", "content": "Be brief."}]
        # Ctrl-C at the prompt warns; a second one in a row ends the chat
        term.send(CTRL_C)
        assert "Ctrl-C again" in term.expect("you> ")
        term.send(CTRL_C)
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()
