"""Next-token training of a Mixture-of-Experts decoder ("moe-next-token"): the cross-entropy of
next-token.py, plus the routers' balance.

    data, draw   as next-token: B random windows of the token stream
    settings     MoESettings: balance and router_aux_coef
    loss         cross-entropy of the next tokens (what train_loss and val_loss log), and with
                 balance "aux" the auxiliary load-balancing loss of each sparse
                 layer's router, averaged over the layers (the Switch Transformer paper's), or
                 with "aux-pooled" one loss pooled over the layers (transformers'
                 load_balancing_loss_func; ops/load_balance.py has both), weighted by
                 router_aux_coef:
                     total = cross_entropy + router_aux_coef * aux
                 The default is per layer because pooling lets a layer hide: in bench/moe.py's
                 2,000 iterations the pooled loss left one layer's busiest expert at 2.5x its even
                 share while the pooled f and P looked flat (docs/moe.md has the table).
                 Its gradient reaches each layer's router logits through the model's backward
                 (`drouter_logits`), beside the gradient of the routing itself.
    eval_stats   at every evaluation, over the val batches: each sparse layer's expert load
                 (the share of routed token-slots per expert, `expert_load`, L rows of E) and the
                 auxiliary loss (`val_aux_loss`), logged apart from the LM loss.

balance "none" trains on the cross-entropy alone (the table of bench/moe.py shows what the
routers then do); "bias" is DeepSeek-V3's loss-free update (ops/expert_bias.py) of the model's
router biases (`mlp.router_bias`, used only to choose): loss_and_grads puts each layer's load in
the place of its bias's (zero) gradient, the step sums those as it sums gradients (over
micro-batches and ranks), and `bias_rule` (the objective's rule) moves each bias by
BIAS_UPDATE_SPEED against its layer's load and zeroes the entry, so the clip and AdamW leave it. Under data parallelism each rank's auxiliary loss pools its own rows, as
each device's does in transformers' Trainer; the runs on 1 and N ranks then differ slightly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glassformer.blocks.moe import chosen_experts, router_logits
from glassformer.blocks.residual import moe_block_ctx
from glassformer.errors import GlassformerError
from glassformer.models.family import CAUSAL
from glassformer.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward
from glassformer.ops.expert_bias import expert_bias_update
from glassformer.ops.load_balance import (expert_counts, load_balance_backward,
                                          load_balance_forward)
from glassformer.train.objectives.next_token import draw_windows, the_stream
from glassformer.train.objectives.objective import (TEXT, Objective, check_kind, only_trained,
                                                    token_eval_loss, with_frozen)
from glassformer.train.objectives.settings import Settings, setting


# DeepSeek-V3's bias update speed gamma (its paper's 0.001), per optimizer step
BIAS_UPDATE_SPEED = 0.001
BIAS_KEY = "mlp.router_bias"     # a layer's selection bias, under "blocks.{i}."


def sparse_layers(ctx) -> dict:
    """{layer index: MoE ctx} of every sparse layer of a decoder's forward, in layer order."""
    found = {i: moe_block_ctx(block) for i, block in enumerate(ctx.blocks)}
    return {i: layer for i, layer in found.items() if layer is not None}


def routing(ctx) -> tuple[np.ndarray, np.ndarray]:
    """(router logits (L, N, E), chosen experts (L, N, k)) of the sparse layers, stacked."""
    layers = sparse_layers(ctx).values()
    logits = np.stack([router_logits(layer) for layer in layers])         # L x (N, E)
    chosen = np.stack([chosen_experts(layer) for layer in layers])        # L x (N, k)
    return logits, chosen


AUX_BALANCES = {"aux": True, "aux-pooled": False}     # balance -> the loss is per layer
BALANCES = ("aux", "aux-pooled", "bias", "none")


@dataclass(frozen=True)
class MoESettings(Settings):
    """How a Mixture-of-Experts run keeps its routers balanced (docs/moe.md)."""
    balance: str = setting("aux", "how the routers are kept balanced: aux (the auxiliary "
                                  "load-balancing loss of each layer, averaged, as the Switch "
                                  "Transformer paper), aux-pooled (one loss pooled over the "
                                  "layers, as transformers' load_balancing_loss_func), bias "
                                  "(DeepSeek-V3's loss-free bias update) or none",
                           choices=BALANCES)
    router_aux_coef: float = setting(0.1, "weight of the auxiliary load-balancing loss")

    def __post_init__(self):
        self.check_types_and_choices()
        if not self.router_aux_coef >= 0.0:
            raise GlassformerError(f"--router-aux-coef must be >= 0, got {self.router_aux_coef}")


def aux_gradients(ctx, scale: float, per_layer: bool) -> dict:
    """{layer: d(scale * aux)/d router logits (N, E)} for layers_backward's drouter_logits."""
    logits, chosen = routing(ctx)                                         # (L, N, E), (L, N, k)
    _, aux_ctx = load_balance_forward(logits, chosen, per_layer=per_layer)
    dlogits = load_balance_backward(np.asarray(scale, dtype=logits.dtype), aux_ctx)  # (L, N, E)
    return dict(zip(sparse_layers(ctx), dlogits))


def bias_loads(ctx, scale: float) -> dict:
    """{"blocks.{i}.mlp.router_bias": scale * the layer's slot counts (E,)}: what `bias_rule`
    reads from the grads, summed over micro-batches and ranks as gradients are."""
    loads = {}
    for i, layer in sparse_layers(ctx).items():
        chosen = chosen_experts(layer)[None]                              # (1, N, k)
        counts = expert_counts(chosen, router_logits(layer).shape[-1])[0]  # (E,)
        loads[f"blocks.{i}.{BIAS_KEY}"] = (counts * scale).astype(router_logits(layer).dtype)
    return loads


def bias_rule(params: dict, grads: dict, train_cfg) -> None:
    """balance "bias": each router bias in `grads` holds its layer's load; move the bias by
    DeepSeek-V3's rule (ops/expert_bias.py) in place and zero that entry (no gradient step)."""
    if train_cfg.objective_settings.balance != "bias":
        return
    for key in [key for key in grads if key.endswith(BIAS_KEY)]:
        new = expert_bias_update(params[key][None], grads[key][None],
                                 gamma=BIAS_UPDATE_SPEED)                 # (1, E)
        params[key][...] = new[0]
        grads[key][...] = 0.0


def check_moe(family, cfg, tokenizer=None) -> None:
    """A causal LM with mixture-of-experts layers (one line otherwise)."""
    check_kind(CAUSAL, family)
    if cfg.block_config().moe is None:
        raise GlassformerError(f"the moe-next-token objective trains a mixture-of-experts "
                               f"model (--arch moe); {family.name} has dense MLPs only")


def moe_loss_and_grads(family, params: dict, cfg, x, y: np.ndarray, *,
                       rng: np.random.Generator | None, dloss: float = 1.0, train_cfg=None,
                       frozen: dict | None = None) -> tuple[float, dict, dict]:
    """The cross-entropy (returned), d(dloss * (cross_entropy + coef * aux))/d params, and no
    metrics."""
    settings = train_cfg.objective_settings
    logits, ctx = family.forward(with_frozen(params, frozen), x, cfg, train=True,
                                 rng=rng)                                  # (B, T, V)
    loss, ce_ctx = cross_entropy_forward(logits, y,
                                         label_smoothing=train_cfg.label_smoothing)
    dlogits = cross_entropy_backward(np.asarray(dloss, dtype=logits.dtype), ce_ctx)
    drouter = None
    if settings.balance in AUX_BALANCES and settings.router_aux_coef > 0.0:
        drouter = aux_gradients(ctx, dloss * settings.router_aux_coef,
                                AUX_BALANCES[settings.balance])
    grads = family.backward(dlogits, ctx, drouter_logits=drouter)
    if settings.balance == "bias":
        grads.update(bias_loads(ctx, dloss))   # the router biases' zero grads carry their loads
    return float(loss), only_trained(grads, params), {}


def moe_eval_stats(family, params: dict, cfg, batches: list, *, train_cfg=None,
                   frozen: dict | None = None) -> dict:
    """{"expert_load": L rows of E shares, "val_aux_loss"} over the val batches (eval mode); the
    auxiliary loss as the run trains it (pooled only with "aux-pooled")."""
    balance = MoESettings().balance if train_cfg is None else train_cfg.objective_settings.balance
    per_layer = AUX_BALANCES.get(balance, True)
    counts, aux_losses = None, []
    for x, _ in batches:
        _, ctx = family.forward(with_frozen(params, frozen), x, cfg, train=False)
        router, chosen = routing(ctx)
        aux, _ = load_balance_forward(router, chosen, per_layer=per_layer)
        aux_losses.append(float(aux))
        batch_counts = expert_counts(chosen, router.shape[-1])            # (L, E)
        counts = batch_counts if counts is None else counts + batch_counts
    load = counts / counts.sum(axis=1, keepdims=True)                      # (L, E)
    return {"expert_load": np.round(load, 4).tolist(),
            "val_aux_loss": float(np.mean(aux_losses))}


MOE_NEXT_TOKEN = Objective(name="moe-next-token", kind=CAUSAL, reads=TEXT, draw=draw_windows,
                           loss_and_grads=moe_loss_and_grads, eval_loss=token_eval_loss,
                           check=check_moe, prepare=the_stream, bits_per_byte=True,
                           eval_stats=moe_eval_stats, rule=bias_rule, settings=MoESettings)
