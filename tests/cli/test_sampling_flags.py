"""`glassformer generate` (and chat, which shares the flags) takes --min-p, the penalties and
--logit-bias: each reaches generate(), and a bad value is one line."""
import sys
from pathlib import Path

import pytest

from glassformer.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_models import save_chat_model  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_chat_model(tmp_path_factory.mktemp("tiny") / "tinychat")


def out(capsys, folder, *flags) -> str:
    capsys.readouterr()
    assert main(["generate", "--model", str(folder), "hello hello", "--temperature", "0",
                 "--max-new-tokens", "12", *flags]) == 0
    return capsys.readouterr().out


def test_flags_change_the_greedy_text_and_bias_forces_a_token(folder, capsys):
    plain = out(capsys, folder)
    assert out(capsys, folder, "--repetition-penalty", "3", "--presence-penalty", "2") != plain
    assert out(capsys, folder, "--logit-bias", f"{ord('z')}=100") == "z" * 12 + "\n"
    # greedy keeps the likeliest token, which min-p always keeps
    assert out(capsys, folder, "--min-p", "0.2", "--frequency-penalty", "0") == plain


@pytest.mark.parametrize("flags, words", [
    (["--logit-bias", "5"], "ID=BIAS"), (["--logit-bias", "5=200"], "[-100, 100]"),
    (["--logit-bias", "99999=1"], "outside this model's vocabulary"),
    (["--min-p", "1.5"], "min_p"), (["--repetition-penalty", "-1"], "repetition_penalty"),
])
def test_bad_flags_are_one_line(folder, capsys, flags, words):
    capsys.readouterr()
    assert main(["generate", "--model", str(folder), "hi", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "Traceback" not in err and len(err.splitlines()) <= 2
