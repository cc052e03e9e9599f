"""Defaults give way to what was typed (train/runs/defaults.py): a recipe default that cannot
hold with the flags given adapts and says so in one line; two typed flags that conflict are
refused naming both."""
import pytest

from glassformer.errors import GlassformerError
from glassformer.train.loop import TrainConfig
from glassformer.train.recipes import TANG_SFT, recipe_train_config
from glassformer.train.runs.defaults import fit_defaults

SFT = recipe_train_config(TANG_SFT, {}, {})   # warmup 10, decay 300, 300 iterations, eval 50


def fit(typed: dict, base: TrainConfig = SFT, **options):
    cfg = TrainConfig(**{**base.to_dict(), **typed,
                         "objective_settings": base.objective_settings})
    return fit_defaults(cfg, frozenset(typed), **options)


def test_the_recipes_warmup_gives_way_to_a_short_run_in_one_line():
    cfg, notes = fit({"max_iters": 1}, decay_spans_run=True)
    assert (cfg.warmup_iters, cfg.lr_decay_iters, cfg.eval_interval) == (0, 1, 1)
    assert notes == ["note: --warmup-iters 10 (a default) is longer than the run's --max-iters "
                     "1; a tenth of the run: using 0"]
    cfg, notes = fit({"max_iters": 50})
    assert (cfg.warmup_iters, cfg.lr_decay_iters) == (10, 300) and notes == []


def test_two_typed_flags_that_conflict_are_refused_naming_both():
    with pytest.raises(GlassformerError, match="--warmup-iters 5 and --max-iters 2 were both "
                                               "given"):
        fit({"warmup_iters": 5, "max_iters": 2})
    with pytest.raises(GlassformerError, match="--warmup-iters 20 and --lr-decay-iters 20 were "
                                               "both given"):
        fit({"warmup_iters": 20, "lr_decay_iters": 20})


def test_a_typed_value_moves_the_default_it_conflicts_with():
    cfg, notes = fit({"warmup_iters": 400})
    assert (cfg.max_iters, cfg.lr_decay_iters) == (400, 401) and len(notes) == 2
    assert notes[0].startswith("note: --max-iters 300 (a default) is shorter than "
                               "--warmup-iters 400")
    cfg, notes = fit({"lr_decay_iters": 5})
    assert (cfg.warmup_iters, cfg.lr_decay_iters) == (0, 5) and len(notes) == 1


def test_a_block_longer_than_the_models_context_gives_way_unless_typed():
    cfg, notes = fit({}, context=64)
    assert cfg.block_size == 64 and "longer than the model's context of 64" in notes[0]
    cfg, notes = fit({"block_size": 128}, context=64)
    assert cfg.block_size == 128 and notes == []     # check_context then refuses it


def test_what_holds_already_is_left_alone():
    assert fit({}) == (SFT, [])
    cfg, notes = fit({"max_iters": 0})               # a run that only evaluates
    assert cfg.warmup_iters == 10 and notes == []
    inverse = TrainConfig(schedule="inverse-sqrt", warmup_iters=100)
    cfg, _ = fit({"max_iters": 3}, base=inverse)
    assert cfg.warmup_iters == 1                      # the paper's schedule needs one step
