"""What `glassformer train` calls, whatever the objective: a new run, or a resume.

    start_training   a new run from a recipe's settings (train/recipes/): the objective names
                     its data's form (Objective.reads), and the form's `start` is the run of
                     that data (runs/forms.py): a text file's token stream (runs/text.py) or a
                     pair set (runs/pairs.py)
    resume_training  the run continues as it was: the saved training config is the default for
                     every setting; only SAFE_ON_RESUME (runs/checks.py) may be changed (and the
                     change is logged), anything else that differs is refused naming both values;
                     the checkpoint names the objective, and its form's `resume` reads the
                     data again

A fine-tuning run starts and resumes through runs/finetune.py, with its base model.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import append_train_log, load_checkpoint
from glassformer.models.registry import config_from_dict
from glassformer.tokenizers.load import load_tokenizer
from glassformer.train.loop import RunState, TrainConfig, resume_run
from glassformer.train.objectives import objective_of
from glassformer.train.recipes.neighbour_heads import with_old_held_keys
from glassformer.train.runs.checks import (check_model_flags, check_train_config, resumed_config,
                                           train_config_from_dict)
from glassformer.train.runs.defaults import fit_defaults, noted_first
from glassformer.train.runs.folder import (RunHooks, announce_resume, check_same_tokenizer,
                                           hold_run_folder, run_folder, train_in_folder)
from glassformer.train.runs.forms import Form, form_of
from glassformer.train.step import IN_PROCESS, Steps


def train_form(objective, what: str) -> Form:
    """The form of the objective's data, which `glassformer train` must know how to `what`
    ("start", "resume"); one line for chat, preference or prompt data (finetune's)."""
    form = form_of(objective.reads)
    if getattr(form, what) is None:
        raise GlassformerError(f"--objective {objective.name} reads {form.name} data, "
                               "which glassformer finetune trains on, not glassformer train")
    return form


def start_training(*, data: str | None, out_dir: str, model: dict, train_cfg: TrainConfig,
                   typed: frozenset = frozenset(), init: str | None = None,
                   tokenizer: str | None = None, after_init=None, on_note=None, on_start=None,
                   on_step=None, should_stop=None,
                   steps: Steps = IN_PROCESS) -> tuple[RunState, object]:
    """Start a new run of train_cfg.objective and train it; returns (RunState, model config).

    model: the model settings (a recipe's, with the flags given: recipes.model_config builds the
    config from them); typed: the TrainConfig fields given on the command line, whose values
    the defaults give way to (runs/defaults.py; each default changed is one on_note line, said
    as the run starts);
    init, tokenizer: runs/text.py's; after_init: the recipe's own init.
    """
    train_cfg, notes = fit_defaults(train_cfg, typed)
    on_start = noted_first(notes, on_note, on_start)
    objective = objective_of(train_cfg.objective)   # resolved once, passed on
    form = train_form(objective, "start")
    return form.start(data=data, out_dir=out_dir, model=model, train_cfg=train_cfg,
                      init=init, tokenizer=tokenizer, after_init=after_init,
                      on_start=on_start, on_step=on_step, should_stop=should_stop, steps=steps,
                      objective=objective)


def resume_training(*, out_dir: str, data: str | None = None, given: dict | None = None,
                    given_model: dict | None = None, allow_new_data: bool = False,
                    tokenizer: str | None = None,
                    on_note=None, on_start=None, on_step=None,
                    should_stop=None, steps: Steps = IN_PROCESS) -> tuple[RunState, object]:
    """Continue the run in `out_dir` from its last checkpoint; returns (RunState, model config).

    given: training settings given explicitly ({"max_iters": 4000}); the saved ones fill the
    rest (see resumed_config). given_model: model settings given explicitly, which must match the
    checkpoint's model. data: None trains on the recorded data. on_note(line) receives what the
    resume changed (also appended to the train log). tokenizer: as given on the command line; it
    must be the run's own (check_same_tokenizer).
    """
    hooks = RunHooks(on_note=on_note, on_start=on_start, on_step=on_step,
                     should_stop=should_stop, steps=steps)
    out = run_folder(out_dir)
    if not out.is_dir():
        raise GlassformerError(f"there is no run to resume: {out} does not exist")
    with hold_run_folder(out):
        ckpt = load_checkpoint(out)
        model_cfg = config_from_dict(ckpt.config)
        check_model_flags(ckpt.config, given_model or {})
        if tokenizer is not None:
            check_same_tokenizer(out, ckpt.tokenizer_json, tokenizer)
        saved = train_config_from_dict(ckpt.state["train_config"])
        saved = with_old_held_keys(saved, ckpt.config)
        train_cfg, changed = resumed_config(saved, given or {})
        check_train_config(train_cfg)
        objective = objective_of(train_cfg.objective)   # resolved once, passed on
        form = train_form(objective, "resume")
        train_data, val_data, val_tpb, data_record, data_note = form.resume(
            out, data, allow_new_data, load_tokenizer(ckpt.path), ckpt.tokenizer_json, train_cfg,
            objective)
        run = resume_run(ckpt)
        if changed or data_note:
            entry = {"iter": run.it, "resumed_with": changed}
            if data_note:
                entry["data"] = data_record
            append_train_log(out, entry)
        announce_resume(hooks, out, run.it, saved, changed, data_note)
        if form.held_out and hooks.on_note:
            hooks.on_note(form.held_out(train_data, val_data))   # the split a new run logged
        run = train_in_folder(out, model_cfg, train_cfg, run, (train_data, val_data),
                              ckpt.tokenizer_json, hooks, objective=objective,
                              val_tokens_per_byte=val_tpb)
    return run, model_cfg
