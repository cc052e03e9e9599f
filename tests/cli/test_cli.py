"""The command line: entry points, gradcheck output, one-line errors with exit code 2."""
import argparse
import json
import re
import subprocess
import sys

from glassformer.cli import build_parser, main
from glassformer.cli.common import detect_lang, loading_line


def test_python_dash_m_runs_the_walkthrough():
    done = subprocess.run([sys.executable, "-m", "glassformer", "attention", "--lang", "en"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "weights" in done.stdout


def test_gradcheck_json_lists_every_attention_mode(capsys):
    assert main(["gradcheck", "attention", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    modes = {row["mode"] for row in rows}
    assert {"plain", "causal", "padding", "cross", "fully-masked-row"} <= modes
    for row in rows:
        assert set(row) == {"name", "mode", "max_rel_err", "ok"}
        assert row["ok"] and row["max_rel_err"] < 1e-6


def test_gradcheck_fails_loudly_when_tolerance_is_impossible(capsys):
    assert main(["gradcheck", "attention", "--tolerance", "0"]) == 1
    assert "NO" in capsys.readouterr().out


def test_unknown_gradcheck_name_is_a_one_line_error(capsys):
    assert main(["gradcheck", "no_such_op"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown op or block no_such_op" in err


def test_bad_size_is_a_one_line_error_not_a_traceback():
    done = subprocess.run([sys.executable, "-m", "glassformer", "attention", "--seq", "0"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--seq must be at least 1" in done.stderr


def sub_parsers(parser, prefix=""):
    """(name, parser) of every command and every command's action, depth first."""
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, child in action.choices.items():
            found.append((prefix + name, child))
            found.extend(sub_parsers(child, prefix=f"{prefix}{name} "))
    return found


def test_every_command_takes_seed_and_every_flag_has_help():
    parsers = sub_parsers(build_parser())
    names = {name for name, _ in parsers}
    assert {"generate", "eval", "convert", "chat", "embed", "train", "tokenizer encode",
            "tokenizer train"} <= names
    assert "sample" not in names and "tokenize" not in names  # folded into generate, tokenizer
    for name, parser in parsers:
        flags = {flag for action in parser._actions for flag in action.option_strings}
        assert "--seed" in flags, name
        for action in parser._actions:
            assert action.help, f"{name}: {action.dest} has no help text"


def test_every_command_prints_its_help():
    """argparse formats help text with %: a stray one crashes `--help` only, so format them all."""
    for name, parser in sub_parsers(build_parser()):
        assert f"usage: glassformer {name}" in parser.format_help(), name


def test_loading_line_at_a_terminal_only(monkeypatch, capsys):
    with loading_line("tiny"):
        pass
    assert capsys.readouterr().err == ""                       # piped: quiet
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with loading_line("tiny"):
        pass
    assert re.fullmatch(r"loading tiny \.\.\. ready in \d+\.\d s\n", capsys.readouterr().err)
    try:
        with loading_line("broken"):
            raise ValueError("bad file")
    except ValueError:
        pass
    assert capsys.readouterr().err == "loading broken ...\n"   # the error's line stands alone


def test_detect_lang_reads_the_first_locale_variable_set():
    assert detect_lang({}) == "en"
    assert detect_lang({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert detect_lang({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}) == "en"
    assert detect_lang({"LC_ALL": "", "LANGUAGE": "zh_TW"}) == "zh"


def test_no_command_imports_another_command():
    """Commands share helpers through cli/common.py (and training's ranks through cli/launch.py),
    never by importing another command's module (CONTRIBUTING, "Adding a CLI command")."""
    import ast
    from pathlib import Path

    from glassformer.cli import COMMANDS
    commands = {module.__name__ for module in COMMANDS}
    for module in COMMANDS:
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        assert not (imported & commands) - {module.__name__}, module.__name__
