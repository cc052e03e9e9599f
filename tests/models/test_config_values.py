"""Config numbers are checked for type and range before any comparison or allocation: no inf, no
floats where ints belong, no booleans as counts; a bad config.json is one line and exit 2."""
import json
import math

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.io.pretrained import save_pretrained
from glassformer.models.model import Model
from glassformer.models.registry import config_from_dict, family


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("key,value,message", [
    ("n_layer", math.inf, "n_layer must be an int, got inf"),
    ("n_layer", 2.0, "n_layer must be an int, got 2.0"),
    ("n_head", True, "n_head must be a number, got the boolean True"),
    ("d_model", "128", "d_model must be an int, got '128'"),
    ("dropout", math.nan, "dropout must be a finite number, got nan"),
    ("vocab_size", None, "vocab_size must be set, got None"),
])
def test_config_values_are_checked_by_type(arch, key, value, message):
    with pytest.raises(GlassformerError, match=message):
        config_from_dict({"arch": arch, key: value})


def test_optional_fields_and_ints_for_floats_are_fine():
    cfg = config_from_dict({"arch": "llama", "d_ff": None, "rope_theta": 10000, "norm_eps": 1e-6})
    assert cfg.rope_theta == 10000 and cfg.d_ff is None


def test_hf_config_with_an_infinite_layer_count_is_one_line(tmp_path, capsys):
    folder = tmp_path / "hf"
    cfg = config_from_dict({"arch": "gpt2", "vocab_size": 16, "max_seq_len": 8, "n_layer": 1,
                            "n_head": 2, "d_model": 8})
    params = family("gpt2").init_params(cfg, np.random.default_rng(0))
    save_pretrained(Model(cfg, params), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config).replace(
        '"n_layer": 1', '"n_layer": 1e400'))
    assert main(["eval", "--model", str(folder), "--data", str(folder / "config.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "n_layer must be an int, got inf" in err
