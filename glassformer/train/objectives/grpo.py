"""Group Relative Policy Optimization ("grpo"): sample a group of replies, reward them, and push
up the ones better than their group (ops/grpo_loss.py has the math and TRL's formulas).

One step, on B prompts drawn from PromptData (train/datasets/prompts.py):

    1. sample   each prompt repeated G times (TRL's order: a prompt's G rows together), all
                B*G rows in ONE batch with the KV cache (generate/generate.py), temperature
                GRPOSettings.temperature, at most max_completion_tokens, each row ending at
                its first end-of-text id (which is kept: the model learns to stop)
    2. reward   every reward function (train/rewards/) on the decoded completions, summed
                with reward_weights; advantages per group (ops/grpo_loss.group_advantages)
    3. update   the forward of prompt + completion (left-padded prompts: key mask and
                positions from the mask), per-token log-probs of the completion
                (ops/token_logps.py, logits / temperature as TRL), the clipped surrogate
                (+ beta * k3 KL to the reference: train/objectives/dpo.py's), backward; in
                chunks of rows (row_chunks), so the (rows, T, V) logits stay within
                LOGITS_CHUNK_BYTES (TRL bounds it alike: its update runs on per-device
                micro-batches of the generation batch, its no-grad log-probs in chunks)

Old log-probs are the policy's own (one update per generation, TRL's num_iterations=1), so the
ratio is 1. The sampling seed comes from the batch draw, so a resumed run samples what the
uninterrupted one would have. eval_loss is minus the mean reward of a sampled group on val
prompts (higher reward, lower "loss").
Data parallelism (--workers): each rank takes whole groups (shard_groups) and samples them with
its own seed, drawn from the batch's and its rank, so a run on N ranks is reproducible (its
completions differ from one process's, which samples all groups from one stream). Rewards are
scored where they were sampled; the advantages, the loss (its token normaliser spans the
batch) and every metric are the whole batch's on every rank, from the gathered rewards and
per-token log-probs (train/objectives/ranks.py), so on the same completions N ranks compute
one process's loss and gradient.
Logged as TRL names them: reward, reward_std, rewards/<name>/mean and /std,
frac_reward_zero_std, completions/mean_length (min, max, clipped_ratio), clip_ratio/*, kl.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate, positions_from_mask
from glassformer.models.family import CAUSAL
from glassformer.models.model import Model
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.ops.grpo_loss import (LOSS_TYPES, SCALES, group_advantages,
                                        grpo_loss_backward, grpo_loss_forward, reduction_weights)
from glassformer.ops.token_logps import token_logps_backward, token_logps_forward
from glassformer.tokenizers.end_of_text import end_of_text_ids
from glassformer.train.datasets.epochs import batch_rows
from glassformer.train.datasets.prompts import PromptData, left_padded
from glassformer.train.objectives.dpo import policy_and_reference
from glassformer.train.objectives.objective import (PROMPTS, Objective, check_kind, only_trained,
                                                    rows_of)
from glassformer.train.objectives.ranks import gather_rows, gather_token_rows, unit_slice
from glassformer.train.objectives.settings import Settings, setting
from glassformer.train.rewards import call_reward, load_rewards

# the update's logits per chunk of rows (float32), which bounds its peak memory: SmolLM2's
# 49,152-entry vocabulary over 111 positions is 22 MB a row, so 6 rows a chunk
LOGITS_CHUNK_BYTES = 128 * 2**20


@dataclass(frozen=True)
class GRPOSettings(Settings):
    """GRPO's settings; the defaults are TRL's GRPOConfig's (a recipe may give others)."""
    num_generations: int = setting(8, "completions sampled per prompt, the group (TRL's "
                                      "default: 8)")
    max_completion_tokens: int = setting(64, "longest completion sampled (TRL's "
                                             "max_completion_length: 256; ours is shorter "
                                             "for a CPU)")
    temperature: float = setting(1.0, "sampling temperature (TRL's default: 1.0)")
    epsilon: float = setting(0.2, "clip range of the ratio (TRL's default: 0.2)")
    epsilon_high: float | None = setting(None, "upper clip range (default: --epsilon)")
    loss_type: str = setting("dapo", "how the per-token losses are averaged, as TRL's "
                                     "loss_type (TRL's default: dapo)", choices=LOSS_TYPES)
    scale_rewards: str = setting("group", "what the advantage is divided by: the group's std, "
                                          "the batch's, or none (TRL's default: group)",
                                 choices=SCALES)
    reward: str = setting("tang-form", "reward functions, comma-separated: tang-form (built "
                                       "in) or FILE.py:FUNC with TRL's signature "
                                       "f(prompts, completions, **columns)")
    reward_weights: str = setting("", "comma-separated weights of the rewards (default: 1 "
                                      "each, TRL's)")
    beta: float = setting(0.0, "weight of the KL term to the reference (TRL's default: 0, "
                               "no reference)")

    def __post_init__(self):
        self.check_types_and_choices()
        if self.num_generations < 2:
            raise GlassformerError(f"GRPO compares completions within a group: "
                                   f"--num-generations must be at least 2, got "
                                   f"{self.num_generations}")
        if self.max_completion_tokens < 1:
            raise GlassformerError(f"--max-completion-tokens must be at least 1, got "
                                   f"{self.max_completion_tokens}")
        if not self.temperature > 0.0:
            raise GlassformerError(f"GRPO samples: --temperature must be above 0, got "
                                   f"{self.temperature}")
        for name in ("epsilon", "beta"):
            if not getattr(self, name) >= 0.0:
                raise GlassformerError(f"--{name} must be >= 0, got {getattr(self, name)}")
        for weight in filter(None, self.reward_weights.split(",")):
            try:
                float(weight)
            except ValueError:
                raise GlassformerError(f"--reward-weights must be numbers separated by commas, "
                                       f"got {weight!r}") from None

    def check_run(self, train_cfg) -> None:
        if train_cfg.grad_accum > 1:
            # TRL samples one generation batch for all its accumulated micro-batches: the
            # batch's reward std and DAPO's token count span them all. Here that batch is
            # --batch-size, whose update already runs in memory-bounded chunks of rows.
            raise GlassformerError(f"GRPO samples and updates the whole batch at once, in "
                                   f"chunks that bound memory: give --batch-size "
                                   f"{train_cfg.batch_size * train_cfg.grad_accum} instead of "
                                   f"--grad-accum {train_cfg.grad_accum} (TRL's accumulation "
                                   f"over one generation batch)")

    @property
    def needs_reference(self) -> bool:
        return self.beta != 0.0   # only the KL term reads the reference


class PromptBatch(NamedTuple):
    """The grpo objective's x: which prompts, and the seed their groups are sampled with."""
    data: PromptData
    rows: np.ndarray     # (B,)
    seed: int


class Rollout(NamedTuple):
    """Prompts with their sampled completions, ready for the update (N = B * G rows)."""
    x: np.ndarray          # (N, T) ids: prompt (left-padded) + completion, last id dropped
    key_mask: np.ndarray   # (N, T) bool, False on padding
    y: np.ndarray          # (N, T) the completion's ids, IGNORE_INDEX elsewhere


def draw_prompts(data: PromptData, train_cfg, rng: np.random.Generator, *,
                 split: str = "data", step: int = 0, shuffle: bool = True
                 ) -> tuple[PromptBatch, np.ndarray]:
    """Micro-batch `step`'s B prompts (datasets/epochs.py) and a sampling seed, the one draw
    from rng every call (so a resumed run samples what the uninterrupted one would have)."""
    if len(data.records) == 0:
        raise GlassformerError(f"the {split} split holds no prompts")
    rows = batch_rows(len(data.records), train_cfg, step=step, shuffle=shuffle)   # (B,)
    seed = int(rng.integers(0, 2**62))
    return PromptBatch(data, rows, seed), rows


def shard_groups(x: PromptBatch, y: np.ndarray, ranks: int, rank: int
                 ) -> tuple[PromptBatch, np.ndarray]:
    """Rank `rank`'s whole groups: its share of the batch's prompts, sampled with a seed of
    its own (from the batch's seed and the rank: the same on every rerun)."""
    prompts = unit_slice(len(x.rows), ranks, rank, "prompts")
    seed = int(np.random.default_rng([x.seed, rank]).integers(0, 2**62))
    return PromptBatch(x.data, x.rows[prompts], seed), y[prompts]


def sample_groups(weights: dict, cfg, prompt_ids, prompt_mask, *, group: int, max_tokens: int,
                  temperature: float, seed: int, stop_ids: list[int]):
    """(completion ids (N, C), completion mask (N, C) bool up to and with the first stop id,
    truncated (N,) bool: no stop id) for each prompt row repeated `group` times."""
    ids = np.repeat(prompt_ids, group, axis=0)                          # (B, P) -> (N, P)
    mask = np.repeat(prompt_mask, group, axis=0)                        # (N, P)
    model = Model(cfg, weights)
    # note: a cache as long as prompt + completion, not the model's whole context (SmolLM2's
    # 8,192 positions would be gigabytes for B * G rows)
    cache = model.new_cache(len(ids), ids.shape[1] + max_tokens)
    steps = list(generate(model, ids, max_new_tokens=max_tokens, temperature=temperature,
                          seed=seed, stop=stop_ids, attention_mask=mask, pad_id=0,
                          kv_cache=cache))
    completion = np.stack(steps, axis=1) if steps else np.zeros((len(ids), 0), np.int64)
    is_stop = np.isin(completion, stop_ids)                             # (N, C)
    before_stop = np.cumsum(is_stop, axis=1) - is_stop == 0             # up to the first stop
    return completion, before_stop, ~is_stop.any(axis=1)


def rollout_of(prompt_ids, prompt_mask, completion, completion_mask) -> Rollout:
    """The update's batch from prompts (N, P) and completions (N, C)."""
    full = np.concatenate([prompt_ids, completion], axis=1)             # (N, P + C)
    mask = np.concatenate([prompt_mask, completion_mask], axis=1)       # (N, P + C)
    is_completion = np.zeros_like(mask)
    is_completion[:, prompt_ids.shape[1]:] = completion_mask
    y = np.where(is_completion[:, 1:], full[:, 1:], IGNORE_INDEX)       # (N, T)
    return Rollout(x=full[:, :-1], key_mask=mask[:, :-1], y=y)


def completion_logps(family, weights: dict, cfg, rollout: Rollout, *, temperature: float,
                     train: bool, rng=None):
    """(per-token log-probs of the completion (N, T), forward ctx, token_logps ctx)."""
    positions = positions_from_mask(rollout.key_mask)                   # (N, T)
    logits, ctx = family.forward(weights, rollout.x, cfg, train=train, rng=rng,
                                 key_mask=rollout.key_mask, positions=positions)  # (N, T, V)
    if temperature != 1.0:
        logits = logits * (1.0 / temperature)      # TRL scores the sampling distribution
    token_logp, logp_ctx = token_logps_forward(logits, rollout.y)       # (N, T)
    return token_logp, ctx, logp_ctx


def row_chunks(rollout: Rollout, vocab: int, rows: int | None) -> list[slice]:
    """The update's rows in chunks of at most `rows` (None: as many as keep a chunk's (rows, T,
    V) float32 logits within LOGITS_CHUNK_BYTES, at least one)."""
    n, width = rollout.y.shape
    if rows is None:
        rows = max(1, LOGITS_CHUNK_BYTES // (4 * width * vocab))
    return [slice(start, min(start + rows, n)) for start in range(0, n, rows)]


def chunk_loss_grads(family, policy: dict, params: dict, cfg, part: Rollout, advantages,
                     weight, old_logps, ref, *, train_cfg, rng, dloss: float):
    """(per-token log-probs (n, T), grads) of one chunk of rows, its logits freed on return.
    weight (n, T): its tokens' weights in the whole batch's loss (grpo_loss_forward)."""
    settings = train_cfg.objective_settings
    temperature = settings.temperature
    logps, ctx, logp_ctx = completion_logps(family, policy, cfg, part, temperature=temperature,
                                            train=True, rng=rng)            # (n, T)
    _, loss_ctx, _ = grpo_loss_forward(
        logps, logps if old_logps is None else old_logps, advantages, part.y != IGNORE_INDEX,
        ref_logps=ref, beta=settings.beta, epsilon=settings.epsilon,
        epsilon_high=settings.epsilon_high, weight=weight)
    dlogps = grpo_loss_backward(dloss, loss_ctx).astype(logps.dtype)    # (n, T)
    dlogits = token_logps_backward(dlogps, logp_ctx)                    # (n, T, V)
    if temperature != 1.0:
        dlogits = dlogits * (1.0 / temperature)
    return logps, only_trained(family.backward(dlogits, ctx), params)


def rollout_loss_and_grads(family, params: dict, cfg, rollout: Rollout, advantages, *,
                           frozen: dict | None, train_cfg, rng=None, dloss: float = 1.0,
                           old_logps=None, comm=None, chunk_rows: int | None = None
                           ) -> tuple[float, dict, dict]:
    """The update on fixed completions: (loss, d(dloss * loss)/d params, clip/kl metrics).
    old_logps None: the policy's own (ratio 1). comm: the rollout and advantages are this
    rank's rows; the loss and metrics are the whole batch's, the grads those of its rows.
    The forward and backward run in chunks of rows (row_chunks; chunk_rows None: by
    LOGITS_CHUNK_BYTES), which bounds the memory of the logits and activations: a token's
    gradient needs only its own log-prob and its weight in the whole batch's loss, known from
    the masks before any forward. (With dropout, the chunks draw their masks in turn.)"""
    settings = train_cfg.objective_settings
    policy, reference = policy_and_reference(params, frozen)
    temperature, beta = settings.temperature, settings.beta
    mask = rollout.y != IGNORE_INDEX                                    # (N, T)
    whole_mask, mine = gather_token_rows(comm, mask)                    # (N_all, T_max)
    weight = reduction_weights(whole_mask, settings.loss_type, settings.max_completion_tokens)
    weight = weight[mine, :mask.shape[1]]                               # (N, T): this rank's
    chunks = row_chunks(rollout, cfg.vocab_size, chunk_rows)
    ref = None
    if beta != 0.0:
        ref = np.concatenate([completion_logps(family, reference, cfg, rows_of(rollout, rows),
                                               temperature=temperature, train=False)[0]
                              for rows in chunks])                      # (N, T)
    parts, grads = [], None
    for rows in chunks:
        logps, chunk_grads = chunk_loss_grads(
            family, policy, params, cfg, rows_of(rollout, rows), advantages[rows], weight[rows],
            None if old_logps is None else old_logps[rows], None if ref is None else ref[rows],
            train_cfg=train_cfg, rng=rng, dloss=dloss)
        parts.append(logps)
        if grads is None:
            grads = chunk_grads
        else:
            for key, g in chunk_grads.items():
                grads[key] += g   # fan-in over chunks: this function owns `grads`
    logps = np.concatenate(parts)                                       # (N, T)
    # the whole batch's loss and metrics from every rank's per-token numbers (ranks.py)
    whole_old = gather_token_rows(comm, logps if old_logps is None else old_logps)[0]
    loss, _, metrics = grpo_loss_forward(
        gather_token_rows(comm, logps)[0], whole_old, gather_rows(comm, advantages)[0],
        whole_mask, ref_logps=None if ref is None else gather_token_rows(comm, ref)[0],
        beta=beta, epsilon=settings.epsilon, epsilon_high=settings.epsilon_high,
        loss_type=settings.loss_type, max_completion_length=settings.max_completion_tokens)
    return loss, grads, metrics


def reward_weights(train_cfg, count: int) -> np.ndarray:
    settings = train_cfg.objective_settings
    if not settings.reward_weights:
        return np.ones(count)
    weights = np.array([float(w) for w in settings.reward_weights.split(",")])
    if len(weights) != count:
        raise GlassformerError(f"--reward-weights gives {len(weights)} weights for {count} "
                               "rewards")
    return weights


def score(batch: PromptBatch, completion, completion_mask, train_cfg) -> tuple[np.ndarray, list]:
    """(rewards per function (N, F), NaN for None; the functions' names)."""
    settings = train_cfg.objective_settings
    data, group = batch.data, settings.num_generations
    specials = set(data.tokenizer.special_tokens.values())
    texts = [data.tokenizer.decode([int(t) for t in row[keep] if int(t) not in specials])
             for row, keep in zip(completion, completion_mask)]
    records = [data.records[int(row)] for row in np.repeat(batch.rows, group)]
    prompts = [record["prompt"] for record in records]
    completions = ([[{"role": "assistant", "content": text}] for text in texts]
                   if data.conversational else texts)
    keys = [key for key in records[0] if key != "prompt"]
    columns = {key: [record.get(key) for record in records] for key in keys}
    columns["completion_ids"] = [row[keep].tolist() for row, keep in zip(completion,
                                                                          completion_mask)]
    rewards = load_rewards(settings.reward)
    table = np.array([call_reward(name, function, prompts, completions, columns)
                      for name, function in rewards]).T                 # (N, F)
    return table, [name for name, _ in rewards]


def rollout_batch(policy: dict, cfg, batch: PromptBatch, train_cfg, comm=None):
    """Sample and score: (Rollout, advantages (N,), metrics). comm: the batch is this rank's
    groups; the advantages and metrics come from every rank's rewards (ranks.py)."""
    settings = train_cfg.objective_settings
    prompt_ids, prompt_mask = left_padded(batch.data, batch.rows)       # (B, P)
    completion, completion_mask, truncated = sample_groups(
        policy, cfg, prompt_ids, prompt_mask, group=settings.num_generations,
        max_tokens=settings.max_completion_tokens, temperature=settings.temperature,
        seed=batch.seed, stop_ids=end_of_text_ids(batch.data.tokenizer))
    table, names = score(batch, completion, completion_mask, train_cfg)
    advantages, metrics = batch_advantages(comm, table, names, completion_mask.sum(axis=1),
                                           truncated, train_cfg)
    rollout = rollout_of(np.repeat(prompt_ids, settings.num_generations, axis=0),
                         np.repeat(prompt_mask, settings.num_generations, axis=0),
                         completion, completion_mask)
    return rollout, advantages, metrics


def batch_advantages(comm, table, names, lengths, truncated, train_cfg) -> tuple:
    """(this rank's advantages (N,), the batch's reward metrics) from its rewards (N, F),
    completion lengths (N,) and truncated (N,): gathered first, so the advantages of
    --scale-rewards batch divide by the whole batch's std, as in one process (ranks.py)."""
    settings = train_cfg.objective_settings
    table, mine = gather_rows(comm, table)                              # (N_all, F)
    weights = reward_weights(train_cfg, len(names))
    advantages, rewards, std_zero = group_advantages(table, weights, settings.num_generations,
                                                     scale=settings.scale_rewards)
    metrics = reward_metrics(table, names, rewards, std_zero, gather_rows(comm, lengths)[0],
                             gather_rows(comm, truncated)[0])
    return advantages[mine], metrics


def reward_metrics(table, names, rewards, std_zero, lengths, truncated) -> dict:
    """TRL's reward and completion-length metrics of one generation batch (lengths (N,))."""
    metrics = {}
    # a function that scored nothing (all None) has NaN metrics, null in the log; nanmean and
    # nanstd would also print a RuntimeWarning for each
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for column, name in enumerate(names):
            metrics[f"rewards/{name}/mean"] = float(np.nanmean(table[:, column]))
            metrics[f"rewards/{name}/std"] = float(np.nanstd(table[:, column], ddof=1))
        metrics.update({"reward": float(np.nanmean(rewards)),
                        "reward_std": float(np.nanstd(rewards, ddof=1)),
                        "frac_reward_zero_std": float(std_zero.mean()),
                        "completions/mean_length": float(lengths.mean()),
                        "completions/min_length": float(lengths.min()),
                        "completions/max_length": float(lengths.max()),
                        "completions/clipped_ratio": float(truncated.mean())})
    return metrics


def grpo_loss_and_grads(family, params: dict, cfg, x: PromptBatch, y, *, rng=None,
                        dloss: float = 1.0, train_cfg=None, frozen: dict | None = None,
                        comm=None) -> tuple[float, dict, dict]:
    """Sample, reward and update on one batch of prompts (the module docstring's three steps;
    comm: this rank's groups of a batch split over ranks)."""
    policy, _ = policy_and_reference(params, frozen)
    rollout, advantages, metrics = rollout_batch(policy, cfg, x, train_cfg, comm)
    loss, grads, loss_metrics = rollout_loss_and_grads(
        family, params, cfg, rollout, advantages, frozen=frozen, train_cfg=train_cfg, rng=rng,
        dloss=dloss, comm=comm)
    return loss, grads, {**metrics, **loss_metrics}


def grpo_eval_loss(family, params: dict, cfg, x: PromptBatch, y, *, train_cfg=None,
                   frozen: dict | None = None, comm=None) -> float:
    """Minus the mean reward of a sampled group on these prompts (comm: of the whole batch)."""
    policy, _ = policy_and_reference(params, frozen)
    return -rollout_batch(policy, cfg, x, train_cfg, comm)[2]["reward"]


GRPO = Objective(name="grpo", kind=CAUSAL, reads=PROMPTS, draw=draw_prompts,
                 loss_and_grads=grpo_loss_and_grads, eval_loss=grpo_eval_loss,
                 check=partial(check_kind, CAUSAL), shard=shard_groups,
                 unit=("prompts", "a prompt's group of completions stays on one rank"),
                 settings=GRPOSettings)
