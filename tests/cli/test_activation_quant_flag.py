"""--activation-quant on the commands that load --model: q8 with --dequantize is one clear line
(exit 2), before any weight is read; the flag reaches load_pretrained."""
from __future__ import annotations

import pytest

from glassformer.cli import main


@pytest.mark.parametrize("command", [["generate", "--max-new-tokens", "1", "hi"],
                                     ["eval", "--data", "x.txt"]])
def test_q8_with_dequantize_is_one_line(command, capsys):
    argv = [command[0], "--model", "smollm2", "--dequantize", "--activation-quant", "q8",
            *command[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "dequantize" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_flag_reaches_the_loader(monkeypatch, capsys):
    import glassformer.cli.common as common
    seen = {}

    def fake_load(name, adapter=None, dequantize=False, activations="float32"):
        seen["activations"] = activations
        raise SystemExit(0)
    monkeypatch.setattr(common, "load_model", fake_load)
    with pytest.raises(SystemExit):
        main(["generate", "--model", "smollm2", "--activation-quant", "q8", "hi"])
    assert seen == {"activations": "q8"}
