"""The recipes: every setting of a kind of training that works, in one place (nanoGPT's config/).

A recipe names its objective (train/objectives/), its model settings, the TrainConfig fields
that differ from TrainConfig's defaults and the objective's settings that differ from the
objective's own defaults (`settings`). The commands only pick one and let the flags given
override it:

    glassformer train                       SHAKESPEARE   (--arch gpt2 or llama)
    glassformer train --arch bert           TANG_BERT
    glassformer train --arch transformer    G2P
    glassformer train --arch moe            MOE
    glassformer finetune                    TANG_SFT
    glassformer finetune --objective dpo    TANG_DPO
    glassformer finetune --objective grpo   TANG_GRPO

    SHAKESPEARE  nanoGPT's Shakespeare-char recipe as its README runs it on a CPU: TrainConfig's
                 defaults, a 4-layer 128-wide GPT (docs: README)
    TANG_BERT    BERT's masked-LM on the Tang poems: 2 layers, C=128, T=128, 40% masked, tanh
                 GELU, layer 0's neighbour heads held 1,500 iterations (docs/bert.md)
    G2P          the paper's encoder-decoder on CMUdict, sized to finish within 20 minutes on a
                 quiet 2-core machine (docs/seq2seq.md)
    MOE          SHAKESPEARE's shape with sparse MoE MLPs: 8 experts, 2 per token, as many
                 parameters per token as the dense --arch llama (train/objectives/moe_next_token.py)
    TANG_SFT     LoRA on SmolLM2-135M-Instruct writing Tang quatrains from tang_sft.jsonl, about
                 half an hour on two CPU cores (docs/finetune.md)
    TANG_DPO     DPO from the TANG_SFT adapter on tang_prefs.jsonl, the SFT adapter frozen as the
                 reference (--adapter SFT_RUN --ref adapter; docs/align.md), with the SFT term
                 at weight 1 (RPO): no rejected poem runs long, so DPO alone never learns to stop
    TANG_GRPO    GRPO from the TANG_SFT adapter on tang_sft.jsonl's prompts with the tang-form
                 reward (docs/align.md); both sized to finish within 35 minutes on two quiet cores
                 with --workers 2

`model` holds the model flags' defaults (arch, n_layer, ...) and any config field the recipe fixes
(BERT's mlm_head); `model_config` builds the family's config from whichever of them its config
class has. A recipe's own init runs after the family's init_params (`start`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

from glassformer.errors import GlassformerError, check_choice
from glassformer.io.lora_modules import ALL_LINEAR
from glassformer.io.peft import LoraConfig
from glassformer.models.family import CAUSAL
from glassformer.models.registry import family as family_of
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PAD_ID
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives import objective_of
from glassformer.train.objectives.objective import KIND_WORDS
from glassformer.train.recipes.gated_delta import gated_delta_model
from glassformer.train.recipes.neighbour_heads import (HELD_KEYS, fits_neighbour_heads,
                                                       neighbour_heads_init, sinusoid_positions)


class Start(NamedTuple):
    """What a recipe does to a new run before it trains."""
    after_init: Callable | None   # (params, cfg, rng) -> params, after the family's init
    train_cfg: TrainConfig        # the run's settings (a recipe may record held keys)
    note: str | None              # a line for the user, or None


class Recipe(NamedTuple):
    name: str
    objective: str              # a name in train/objectives/
    model: dict                 # model flags' defaults and fixed config fields
    train: dict                 # TrainConfig fields that differ from its defaults (but objective)
    start: Callable | None = None   # start(model settings, train_cfg) -> Start
    lora: LoraConfig | None = None  # a fine-tuning recipe's adapters
    settings: dict = {}         # the objective's settings that differ from its defaults


def recipe_train_config(recipe: Recipe, train_given: dict, settings_given: dict,
                        objective: str | None = None) -> TrainConfig:
    """The TrainConfig a new run of `recipe` starts with: its settings, the flags given on top;
    objective: another objective than the recipe's (train --objective with an --arch's recipe),
    which keeps the recipe's objective settings only if they are of its own settings class."""
    chosen = objective_of(objective or recipe.objective)
    fits = chosen.settings is objective_of(recipe.objective).settings
    settings = chosen.settings(**{**(recipe.settings if fits else {}), **settings_given})
    return TrainConfig(**{**recipe.train, **train_given}, objective=chosen.name,
                       objective_settings=settings)


def tang_bert_start(model: dict, train_cfg: TrainConfig) -> Start:
    """Neighbour heads when they fit the context (held for hold_iters), else a sinusoid position
    table, said in one line."""
    heads, block = model["n_head"], train_cfg.block_size
    if fits_neighbour_heads(model["d_model"], heads, block):
        held = dataclasses.replace(train_cfg, held_keys=",".join(HELD_KEYS))
        return Start(neighbour_heads_init, held, None)
    return Start(sinusoid_positions, train_cfg,
                 f"note: neighbour heads need two heads or more, each large enough to point at "
                 f"one of block size positions, got {heads} of {model['d_model'] // heads} dims "
                 f"for block size {block}: the position table starts from sinusoids instead, "
                 "and nothing is held (docs/bert.md)")


# `glassformer train`'s model flags default to this model (MODEL_FLAGS in cli/train.py)
SHAKESPEARE = Recipe(
    name="shakespeare-char", objective="next-token",
    model=dict(arch="gpt2", n_layer=4, n_head=4, n_kv_head=None, d_model=128, dropout=0.0,
               bias=False),
    train=dict())

# `glassformer train --arch moe`: SHAKESPEARE's shape (L=4, H=4, C=128) with 8 experts, 2 per
# token. An expert's width makes the parameters a token uses match the dense --arch llama
# default: 2 x 3 C F_e + C E (two experts and the router) ~ 3 C F, F = 344 -> F_e ~ 171, taken
# as 172, a multiple of 4 floats (torch's grouped_mm, bench/moe.py's reference, needs 16-byte
# strides): 812,672 parameters per token against the dense model's 808,320 (+0.5%).
MOE = Recipe(
    name="shakespeare-char-moe", objective="moe-next-token",
    model={**SHAKESPEARE.model, "arch": "moe", "n_experts": 8, "experts_per_token": 2,
           "expert_d_ff": 172, "shared_experts": 0, "router_bias": False, "attention": "mha",
           "kv_lora_rank": 32},
    train=dict())

TANG_BERT = Recipe(
    name="tang-bert", objective="mlm",
    model={**SHAKESPEARE.model, "arch": "bert", "n_layer": 2, "n_head": 4, "d_model": 128,
           "mlm_head": True, "activation": "gelu_tanh"},   # Google's BERT's GELU (gelu_new)
    train=dict(block_size=128, batch_size=16, lr=2e-3, min_lr=2e-4,
               warmup_iters=100, max_iters=20000, lr_decay_iters=20000, weight_decay=0.01,
               beta2=0.999, hold_iters=1500, eval_interval=500, eval_iters=10),
    settings=dict(mask_prob=0.4), start=tang_bert_start)

G2P = Recipe(
    name="g2p", objective="seq2seq",
    model={**SHAKESPEARE.model, "arch": "transformer", "n_layer": 3, "n_head": 4,
           "d_model": 128, "dropout": 0.1,
           "pad_id": PAD_ID, "eos_id": EOS_ID, "decoder_start_id": BOS_ID},  # the pair vocab's
    train=dict(label_smoothing=0.1, schedule="cosine", batch_size=64,
               lr=1e-3, warmup_iters=400, max_iters=10000, min_lr=1e-4, lr_decay_iters=10000,
               weight_decay=0.01, beta1=0.9, beta2=0.98, eval_interval=500, eval_iters=10))

TANG_SFT = Recipe(
    name="tang-sft", objective="sft",
    model=dict(model="smollm2"),   # the base its numbers were measured on (finetune asks --model)
    train=dict(batch_size=4, block_size=256, lr=2e-3, min_lr=2e-4, warmup_iters=10,
               lr_decay_iters=300, max_iters=300, weight_decay=0.0, beta2=0.999,
               eval_interval=50, eval_iters=4),
    # every linear layer of the blocks, named per family: on SmolLM2 (LLaMA) q_proj, k_proj,
    # v_proj, o_proj, gate_proj, up_proj, down_proj; on GPT-2 c_attn, c_proj, c_fc
    lora=LoraConfig(r=16, alpha=32.0, dropout=0.0, targets=ALL_LINEAR))


def after_tang_sft(objective: str, train: dict, settings: dict) -> Recipe:
    """An alignment recipe, "tang-OBJECTIVE", that continues a TANG_SFT run (`finetune --adapter
    SFT_RUN`: its adapter, its LoRA settings): TANG_SFT's base and training settings with
    160-token blocks and a tenth of its learning rate, then `train` over them. Sizes are
    estimates from one step's time on SmolLM2-135M (docs/align.md)."""
    return Recipe(name=f"tang-{objective}", objective=objective, model=dict(TANG_SFT.model),
                  train={**TANG_SFT.train, "block_size": 160, "lr": 2e-4, "min_lr": 2e-5,
                         **train},
                  settings=settings)


TANG_DPO = after_tang_sft(
    "dpo", dict(batch_size=4, warmup_iters=10, max_iters=100, lr_decay_iters=100,
                eval_interval=50, eval_iters=4),
    settings=dict(beta=0.1, sft_weight=1.0))

TANG_GRPO = after_tang_sft(
    "grpo", dict(batch_size=2, warmup_iters=5, max_iters=75, lr_decay_iters=75,
                 eval_interval=25, eval_iters=2),
    settings=dict(num_generations=8, max_completion_tokens=72, temperature=1.0, beta=0.0,
                  loss_type="dapo", scale_rewards="group", reward="tang-form"))

# `glassformer finetune --objective NAME` starts from these settings
FINETUNE_RECIPES = {"sft": TANG_SFT, "dpo": TANG_DPO, "grpo": TANG_GRPO}

# --arch -> the recipe `glassformer train` starts from (any other arch: SHAKESPEARE)
RECIPE_OF_ARCH = {"bert": TANG_BERT, "transformer": G2P, "moe": MOE}
# objective -> the recipe that trains it from scratch, for messages
RECIPE_OF_OBJECTIVE = {recipe.objective: recipe for recipe in (SHAKESPEARE, TANG_BERT, G2P,
                                                                MOE)}


def recipe_for(arch: str | None, objective: str | None = None) -> Recipe:
    """The recipe `glassformer train --arch ARCH` starts from (no --arch: SHAKESPEARE's); an
    --objective its model cannot train is refused in one line (before any rank is launched)."""
    recipe = RECIPE_OF_ARCH.get(arch, SHAKESPEARE)
    arch = arch or recipe.model["arch"]
    if objective is None:
        return recipe
    wanted = objective_of(objective)
    kind = family_of(arch).kind
    own = RECIPE_OF_OBJECTIVE.get(wanted.name)
    if kind == CAUSAL and wanted.kind != CAUSAL and own is not None:
        raise GlassformerError(f"--objective {wanted.name} trains {KIND_WORDS[wanted.kind]}: "
                               f"give --arch {own.model['arch']} (got --arch {arch}, a decoder, "
                               "which predicts the next token)")
    if wanted.kind != kind or wanted.reads != objective_of(recipe.objective).reads:
        raise GlassformerError(f"--arch {arch} trains with --objective {recipe.objective}, got "
                               f"--objective {wanted.name}")
    return recipe


def new_run_settings(recipe: Recipe, train_given: dict, model_given: dict,
                     settings_given: dict | None = None, objective: str | None = None
                     ) -> tuple[dict, Start]:
    """(model settings, Start) of a new run: the recipe's, with the settings given on top, and
    what the recipe does before training (its own init, held keys, a note); objective: one
    other than the recipe's that trains the same kind of model (recipe_for checked it)."""
    train_cfg = recipe_train_config(recipe, train_given, settings_given or {}, objective)
    model = {**recipe.model, **model_given}
    if "router_bias" in recipe.model:     # an MoE recipe: --balance bias moves the routers' bias
        model["router_bias"] = train_cfg.objective_settings.balance == "bias"
    model = with_attention(model)
    if recipe.start is None:
        return model, Start(None, train_cfg, None)
    return model, recipe.start(model, train_cfg)


def model_config(model: dict, vocab_size: int, max_seq_len: int):
    """The config of model["arch"]'s family from the settings its config class has (a flag
    another family has, such as --bias for BERT, does not apply); n_kv_head None is n_head."""
    config = family_of(model["arch"]).config
    fields = {field.name for field in dataclasses.fields(config)}
    model = with_shared_width(model)
    settings = {key: value for key, value in model.items() if key in fields}
    if "n_kv_head" in settings and settings["n_kv_head"] is None:
        settings["n_kv_head"] = model["n_head"]
    return config(**settings, vocab_size=vocab_size, max_seq_len=max_seq_len)


def with_shared_width(model: dict) -> dict:
    """--shared-experts N of an MoE model as its config's shared expert width, N experts' worth
    (N x expert_d_ff, as DeepSeek-V3 sizes it); other settings as they are."""
    shared = model.get("shared_experts")
    if not shared:
        return model
    if shared < 0:
        raise GlassformerError(f"--shared-experts must be at least 0, got {shared}")
    return {**model, "shared_d_ff": shared * model["expert_d_ff"]}


ATTENTIONS = ("mha", "mla")        # --arch moe's attentions; "window" is any RoPE decoder's
# ("gated-delta" is --arch llama's: train/recipes/gated_delta.py)
WINDOWED_ARCHS = ("llama", "moe")   # the families whose config has sliding_window


def with_attention(model: dict) -> dict:
    """--attention mla of an MoE recipe: DeepSeek-V3's model (models/deepseek_v3.py: multi-head
    latent attention with a --kv-lora-rank latent, its sigmoid router with the selection bias,
    --shared-experts as n_shared_experts), which exports as DeepseekV3ForCausalLM; --attention
    window --window W: every layer of a llama or moe model attends through a sliding window of W
    keys (its sliding_window; a llama exports as MistralForCausalLM); --attention gated-delta
    --full-every K: a llama as a Qwen3.5 hybrid (train/recipes/gated_delta.py); mha (or a recipe
    without the setting) keeps the model as it is."""
    attention = model.get("attention", "mha")
    window = model.get("window")
    if model.get("full_every") is not None and attention != "gated-delta":
        raise GlassformerError("--full-every applies to --attention gated-delta only")
    if attention == "gated-delta":
        if window is not None:
            raise GlassformerError("--window applies to --attention window only")
        return gated_delta_model(model)
    if attention == "window":
        if model["arch"] not in WINDOWED_ARCHS:
            raise GlassformerError(f"--attention window needs --arch llama or moe (a RoPE "
                                   f"decoder), got --arch {model['arch']}")
        if window is None or window < 1:
            raise GlassformerError(f"--attention window needs --window W >= 1 (the keys each "
                                   f"query sees), got {window}")
        return {**model, "sliding_window": window}
    check_choice("--attention", attention, ATTENTIONS)
    if window is not None:
        raise GlassformerError("--window applies to --attention window only")
    if attention == "mha":
        return model
    return {**model, "arch": "deepseek_v3", "n_shared_experts": model.get("shared_experts", 0)}
