"""`glassformer explain eval` scores its ARC-Easy item with SmolLM2 when the package is installed
(slow: the real model loads)."""
import json

import pytest

from glassformer.cli import main


@pytest.mark.slow
def test_eval_defaults_to_smollm2(capsys, smollm2_path):
    assert main(["explain", "eval", "--lang", "en", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["forward"]
    assert result["model"] == ["SmolLM2-135M-Instruct"]
    assert "' hands'" in result["choices"][0]
    sums, norm = result["sums"], result["norm"]   # the item shows acc and acc_norm disagree
    assert max(range(4), key=sums.__getitem__) != max(range(4), key=norm.__getitem__)
