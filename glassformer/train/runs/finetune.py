"""Fine-tuning a pretrained causal LM: LoRA adapters in PEFT's format, or every weight (full).

This is what `glassformer finetune` calls.

    run_finetune     a new run: the model is loaded, the data encoded and every setting checked
                     before anything is written; then the run folder is locked and filled
    resume_finetune  continue the run in a folder with its own base model, LoRA and settings
                     (only train/runs/checks.py's SAFE_ON_RESUME may change)

Data. A `.jsonl`/`.json` file is chat data, `{"messages": [...]}` a line, rendered with the base
model's chat template with loss on the replies only (train/datasets/chat.py, objective "sft");
any other file is plain text with loss on every token (objective "next-token": random windows,
as `glassformer train`); --objective dpo / grpo read preference pairs / prompts. Each is a form
of train/runs/forms.py, which reads, checks and splits it: the last 5% of the records (10% of a
text's tokens) are the val split, stated in the log as the run starts. Records are batched in
seeded shuffled epochs (train/datasets/epochs.py).

LoRA. The adapters (io/peft.py: A (C_in, r) uniform, B (r, C_out) zeros, on the PEFT modules
named by `targets`) are the run's only params: the optimizer, its moments and the checkpoints
hold them alone. The base weights and the adapters' constants (scale, dropout) are `frozen`
(train/objectives/objective.py): the forward reads them, nothing updates them, and the blocks compute no
gradient for them. Full fine-tuning (lora None) trains every weight, as `train --init` does.

The run folder:

    RUN/finetune.json               the base model, LoRA settings (or "full"), data format
    RUN/data.json                   path, size and sha256 of the data file (runs/folder.py)
    RUN/tokenizer/                  the base model's tokenizer
    RUN/latest, RUN/ckpt-*/         the training loop's checkpoints (train/loop.py)
    RUN/train_log.jsonl
    RUN/adapter_config.json         PEFT's two files, rewritten after every checkpoint, so
    RUN/adapter_model.safetensors   peft.PeftModel.from_pretrained(base, RUN) loads the run

Use a LoRA run with `--model BASE --adapter RUN` (generate, chat, convert --merge); a full run is
a model folder of its own (`--model RUN`).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from glassformer.blocks.lora import is_adapter_key
from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import load_checkpoint
from glassformer.io.named_models import load_model
from glassformer.io.peft import (LoraConfig, adapter_constants, init_adapters, load_adapter,
                                 save_adapter)
from glassformer.io.safetensors import write_atomically
from glassformer.models.family import CAUSAL
from glassformer.models.registry import family as family_of
from glassformer.ops.quant import is_quantized
from glassformer.packaged import MODEL, hub_id, resolve_path
from glassformer.train.data import file_fingerprint
from glassformer.train.datasets.chat import is_chat_file
from glassformer.train.loop import (RunState, TrainConfig, check_context, new_run,
                                    resume_run)
from glassformer.train.objectives import objective_of
from glassformer.train.objectives.next_token import NEXT_TOKEN
from glassformer.train.objectives.objective import CHAT, TEXT, Objective
from glassformer.train.objectives.ranks import check_whole_units
from glassformer.train.objectives.sft import SFT
from glassformer.train.objectives.dpo import reference_weights
from glassformer.train.runs.defaults import fit_defaults, noted_first
from glassformer.train.runs.checks import (check_train_config, check_training_memory,
                                           resumed_config, train_config_from_dict)
from glassformer.train.runs.folder import (RunHooks, announce_resume, hold_run_folder,
                                           log_held_out, refuse_existing_run, run_folder,
                                           tokenizer_layout, train_in_folder, write_data_record)
from glassformer.train.runs.forms import Read, form_of, read_for
from glassformer.train.runs.text import resume_data
from glassformer.train.step import IN_PROCESS, Steps

RECORD = "finetune.json"


class Base(NamedTuple):
    """The loaded base model and what a run of it trains and freezes."""
    model: object          # glassformer Model (float32 params)
    params: dict           # trained: the adapters (LoRA) or every weight (full)
    frozen: dict           # read, never updated: base weights and adapter constants, or {}


def load_base(name_or_path: str, *, keep_quantized: bool = False):
    """The base model, float32, with its tokenizer; only causal LMs can be fine-tuned here.
    keep_quantized: a GGUF's quantized matrices stay in their blocks (ops/quant/): a LoRA run's
    frozen base (QLoRA), whose products read the blocks and whose adapters are float32."""
    model = load_model(name_or_path, dequantize=not keep_quantized)
    if family_of(model.arch).kind != CAUSAL:
        raise GlassformerError(f"finetune needs a causal LM (gpt2 or llama family), got "
                               f"{model.arch}")
    if model.tokenizer is None:
        raise GlassformerError(f"{name_or_path} has no tokenizer, so the data cannot be encoded")
    model.params = {key: value if is_quantized(value) else
                    np.ascontiguousarray(value, dtype=np.float32)
                    for key, value in model.params.items()}
    return model


def lora_setup(model, lora_cfg: LoraConfig, params: dict | None, seed: int) -> Base:
    """Base for a LoRA run: fresh adapters (params None) or the checkpoint's, base frozen."""
    if params is None:
        rng = np.random.default_rng([seed, 0x10_4A])   # the adapters' own stream
        params = init_adapters(model, lora_cfg, rng)   # refuses a target the model lacks
    frozen = {**model.params, **adapter_constants(params, lora_cfg)}
    return Base(model, params, frozen)


def adapter_setup(model, folder: str) -> tuple[Base, LoraConfig]:
    """Base for a LoRA run that continues an existing PEFT adapter (`finetune --adapter DIR`):
    its A and B train, its constants (scale, dropout) and the base weights stay frozen."""
    loaded, lora_cfg = load_adapter(folder, model)   # checked against the model, or one line
    params = {key: value for key, value in loaded.items() if is_adapter_key(key)}
    constants = {key: value for key, value in loaded.items() if not is_adapter_key(key)}
    return Base(model, params, {**model.params, **constants}), lora_cfg


def finetune_objective(path: str | Path, objective: Objective) -> Objective:
    """The objective a fine-tune of `path` runs: one given by --objective that reads its own
    form of data (dpo: preference pairs, grpo: prompts); else the file's suffix chooses, chat
    JSONL for SFT and any other file as text for NEXT_TOKEN (both decoders' objectives, which
    load_base has checked the model for)."""
    if objective.reads not in (TEXT, CHAT):
        return objective
    return SFT if is_chat_file(path) else NEXT_TOKEN


def check_data_lines(path: str | Path, objective: Objective) -> None:
    """What the data's form checks without a tokenizer (Form.check: a preference file's empty
    completions, mixed formats), before the model loads: a bad line is refused in one line
    without the base model's memory and time."""
    form = form_of(objective.reads)
    if form.check:
        form.check(path)


def encode_data(path: str | Path, model, train_cfg: TrainConfig, objective: Objective,
                template_budget=None) -> tuple[Read, str | None]:
    """(the data file read by its objective's form (runs/forms.py): train, val, notes; the
    line that states the held-out split), all in memory; a --batch-size whose units would not
    split over --workers is refused first (objectives/ranks.py)."""
    check_whole_units(objective, train_cfg.batch_size, train_cfg.workers)
    form = form_of(objective.reads)
    read = read_for(form, path, model.tokenizer, train_cfg, template_budget)
    held_out = form.held_out(read.train, read.val) if form.held_out else None
    return read, held_out


def _record(model_given: str, lora_cfg: LoraConfig | None, objective: str,
            adapter: str | None = None) -> dict:
    lora = None
    if lora_cfg is not None:
        targets = lora_cfg.targets   # a list of module names, or one regex string
        lora = {**dataclasses.asdict(lora_cfg),
                "targets": targets if isinstance(targets, str) else list(targets)}
    record = {"model": model_given, "model_path": str(resolve_path(model_given, MODEL).resolve()),
              "full": lora_cfg is None, "lora": lora, "objective": objective}
    if adapter is not None:
        record["adapter"] = str(Path(adapter).resolve())   # the adapter the run started from
    return record


def _write_json(path: Path, value: dict) -> None:
    text = (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    write_atomically(path, lambda f: f.write(text))


def adapter_saver(out: Path, base: Base, lora_cfg: LoraConfig | None, run_of: Callable,
                  on_step=None):
    """on_step for the loop: after each record that comes with a checkpoint (it has val_loss),
    write PEFT's files from the run's current adapters; then pass the record on."""
    def on_record(record: dict) -> None:
        if lora_cfg is not None and "val_loss" in record:
            save_adapter(out, base.model, run_of().params, lora_cfg)
        if on_step:
            on_step(record)
    return on_record


def _train(out: Path, base: Base, lora_cfg, train_cfg, objective: Objective, run: RunState,
           data, layout, hooks: RunHooks) -> RunState:
    """The loop, with the adapter files kept beside each checkpoint."""
    saver = adapter_saver(out, base, lora_cfg, lambda: run, hooks.on_step)
    run = train_in_folder(out, base.model.cfg, train_cfg, run, data, layout, hooks,
                          objective=objective, on_step=saver, frozen=base.frozen)
    if lora_cfg is not None and hooks.steps.writes_files:
        save_adapter(out, base.model, run.params, lora_cfg)  # also after a stop between evals
    return run


def run_finetune(*, model: str, data: str, out_dir: str, train_cfg: TrainConfig,
                 lora_cfg: LoraConfig | None, typed: frozenset = frozenset(), on_note=None,
                 on_start=None, on_step=None, should_stop=None, steps: Steps = IN_PROCESS,
                 adapter: str | None = None, template_budget=None) -> tuple[RunState, object]:
    """Start a fine-tuning run and train it; returns (final RunState, model config).

    model: a name (packaged.py) or path load_pretrained reads. lora_cfg None: full fine-tuning.
    train_cfg: the run's settings, its objective's own among them (train_cfg.objective "sft" on
    a text file trains next-token: the data file decides between those two). typed: the
    TrainConfig fields given on the command line, whose values the defaults give way to
    (runs/defaults.py; one on_note line per default changed, said as the run starts).
    adapter: a PEFT LoRA folder to continue training (its own LoRA settings replace lora_cfg).
    template_budget: the chat template's render limits (tokenizers/template_budget.RenderBudget).
    Everything is checked (model, targets, every data line, settings) before the run folder is
    touched, so a refused run leaves nothing behind.
    """
    out = run_folder(out_dir)
    objective = finetune_objective(data, objective_of(train_cfg.objective))   # resolved once
    train_cfg = dataclasses.replace(train_cfg, objective=objective.name)
    check_data_lines(data, objective)
    fit_defaults(train_cfg, typed, decay_spans_run=True)   # two typed flags that conflict: now
    base_model = load_base(model, keep_quantized=lora_cfg is not None)
    train_cfg, notes = fit_defaults(train_cfg, typed, context=base_model.cfg.max_seq_len,
                                    decay_spans_run=True)
    hooks = RunHooks(on_note, noted_first(notes, on_note, on_start), on_step, should_stop, steps)
    check_train_config(train_cfg)
    check_context(base_model.cfg, train_cfg)
    settings = train_cfg.objective_settings.resolved(from_adapter=adapter is not None)
    train_cfg = dataclasses.replace(train_cfg, objective_settings=settings)
    if adapter is not None:
        base, lora_cfg = adapter_setup(base_model, adapter)
        known = hub_id(model) or str(resolve_path(model, MODEL).resolve())
        lora_cfg = dataclasses.replace(lora_cfg, base_model=lora_cfg.base_model or known)
    elif lora_cfg is not None:
        # PEFT records the base model's hub id (base_model_name_or_path) where one is known
        known = hub_id(model) or str(resolve_path(model, MODEL).resolve())
        lora_cfg = dataclasses.replace(lora_cfg, base_model=lora_cfg.base_model or known)
        base = lora_setup(base_model, lora_cfg, None, train_cfg.seed)
    else:
        check_training_memory(base_model.cfg, train_cfg)
        base = Base(base_model, dict(base_model.params), {})
    read, held_out = encode_data(data, base_model, train_cfg, objective, template_budget)
    if settings.needs_reference:
        base = with_reference(base, settings.reference, lora_cfg)
    for note in read.notes:
        if on_note:
            on_note(note)
    with hold_run_folder(out):  # note: nothing is written into `out` before this line
        refuse_existing_run(out)
        _write_json(out / RECORD, _record(model, lora_cfg, objective.name, adapter))
        write_data_record(out, file_fingerprint(data))
        if held_out:
            log_held_out(out, held_out, on_note)
        layout = tokenizer_layout(base_model.tokenizer, out)
        run = new_run(base_model.cfg, train_cfg, base.params)
        run = _train(out, base, lora_cfg, train_cfg, objective, run, (read.train, read.val),
                     layout, hooks)
    return run, base_model.cfg


def with_reference(base: Base, ref: str, lora_cfg: LoraConfig | None) -> Base:
    """base with the reference's own weights added to `frozen` (objectives/dpo.py reference_weights)."""
    constants = {key: value for key, value in base.frozen.items()
                 if key.rsplit(".", 1)[-1] in ("lora_scale", "lora_dropout")}
    extra = reference_weights(ref, full=lora_cfg is None, start=base.params,
                              adapter_constants=constants)
    return Base(base.model, base.params, {**base.frozen, **extra})


def starting_params(record: dict, model, lora_cfg: LoraConfig | None, seed: int) -> dict:
    """The trained params as a run started: its adapter (given or fresh) or the base weights."""
    if lora_cfg is None:
        return model.params
    if record.get("adapter"):
        return adapter_setup(model, record["adapter"])[0].params
    return lora_setup(model, lora_cfg, None, seed).params


def with_old_ref(saved: dict, record: dict) -> dict:
    """A saved train_config with the reference of a run from before objectives owned their
    settings (0db0b93 kept DPO's in finetune.json's "ref"), for train_config_from_dict to fold."""
    if "objective_settings" in saved or "ref" not in record:
        return saved
    return {**saved, "ref": record["ref"]}


def read_record(out: Path) -> dict:
    """The run's finetune.json; GlassformerError when the folder holds no fine-tuning run."""
    path = out / RECORD
    if not path.is_file():
        raise GlassformerError(f"{out} holds no fine-tuning run ({RECORD} is missing)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise GlassformerError(f"{path} is not valid JSON") from None


def resume_finetune(*, out_dir: str, data: str | None = None, given: dict | None = None,
                    allow_new_data: bool = False, on_note=None, on_start=None, on_step=None,
                    should_stop=None, steps: Steps = IN_PROCESS,
                    template_budget=None) -> tuple[RunState, object]:
    """Continue the fine-tuning run in `out_dir` from its last checkpoint, on its own base model
    and LoRA; given: the training settings given explicitly (see train/runs/checks.py);
    template_budget: the chat template's render limits (not part of the run's settings)."""
    hooks = RunHooks(on_note, on_start, on_step, should_stop, steps)
    out = run_folder(out_dir)
    if not out.is_dir():
        raise GlassformerError(f"there is no run to resume: {out} does not exist")
    with hold_run_folder(out):
        record = read_record(out)
        ckpt = load_checkpoint(out)
        saved = train_config_from_dict(with_old_ref(ckpt.state["train_config"], record))
        train_cfg, changed = resumed_config(saved, given or {})
        check_train_config(train_cfg)
        data_record, data_note = resume_data(out, data, allow_new_data)
        base_model = load_base(record["model_path"], keep_quantized=not record["full"])
        run = resume_run(ckpt)
        if record["full"]:
            base, lora_cfg = Base(base_model, run.params, {}), None
        else:
            lora = dict(record["lora"])
            targets = lora["targets"]
            lora_cfg = LoraConfig(**{**lora, "targets": targets if isinstance(targets, str)
                                     else tuple(targets)})
            base = lora_setup(base_model, lora_cfg, run.params, train_cfg.seed)
        if train_cfg.objective_settings.needs_reference:
            start = starting_params(record, base_model, lora_cfg, train_cfg.seed)
            reference = with_reference(Base(base_model, start, base.frozen),
                                       train_cfg.objective_settings.reference, lora_cfg)
            base = Base(base_model, base.params, reference.frozen)
        announce_resume(hooks, out, run.it, saved, changed, data_note)
        objective = objective_of(train_cfg.objective)   # resolved once, passed on
        read, held_out = encode_data(data_record["path"], base_model, train_cfg, objective,
                                     template_budget)
        if held_out and on_note:
            on_note(held_out)   # the split the run logged as it started
        run = _train(out, base, lora_cfg, train_cfg, objective, run, (read.train, read.val),
                     ckpt.tokenizer_json, hooks)
    return run, base_model.cfg
