"""One DPO step and one GRPO step (generation and update apart), glassformer against TRL 1.16.

The same tiny random Llama with the same PEFT LoRA on both sides (tests/align/test_dpo_trl.py's),
the same batch. Timed, alternating run by run so machine noise hits both:

    dpo          dpo_loss_and_grads (policy + reference forward, backward)  vs
                 DPOTrainer._compute_loss + loss.backward()
    grpo update  rollout_loss_and_grads on fixed completions                vs
                 GRPOTrainer._compute_loss + loss.backward()
    grpo sample  B*G completions sampled with the KV cache                  vs
                 the PEFT model's generate (TRL's transformers path), the same lengths

    python -m bench.align [--repeats 7]

Last line: one JSON object with each median in ms and the ratio glassformer / TRL (goal <= 1.0).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "align"))
import test_dpo_trl as dpo_case   # noqa: E402  the tiny model and TRL trainer of the tests
import test_grpo_trl as grpo_case   # noqa: E402

from glassformer.generate.generate import generate   # noqa: E402
from glassformer.io.peft import load_adapter           # noqa: E402
from glassformer.io.pretrained import load_pretrained  # noqa: E402
from glassformer.train.objectives.dpo import dpo_loss_and_grads   # noqa: E402
from glassformer.models.model import Model            # noqa: E402
from glassformer.train.loop import TrainConfig        # noqa: E402
from glassformer.train.objectives.grpo import GRPOSettings   # noqa: E402
from glassformer.train.objectives.grpo import rollout_loss_and_grads, rollout_of   # noqa: E402


class Folder:
    """tmp_path_factory's one method, for the tests' module fixture."""
    def mktemp(self, name):
        return Path(tempfile.mkdtemp(prefix=name))


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) * 1e3


def dpo_pair(folder: Path):
    trainer = dpo_case.trl_trainer("base", folder)
    ids, attention, completion = dpo_case.batch()
    inputs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(attention),
              "completion_mask": torch.from_numpy(completion)}
    trainer.model.train()

    def theirs():
        trainer.model.zero_grad()
        trainer._compute_loss(trainer.model, inputs, False).backward()

    model = load_pretrained(folder / "base")
    policy, _ = load_adapter(folder / "policy", model)
    trained = {k: v for k, v in policy.items() if k.endswith(("lora_A", "lora_B"))}
    frozen = {**model.params, **{k: v for k, v in policy.items() if k not in trained}}
    x = ids[:, :-1]
    y = np.where(completion[:, 1:] == 1, ids[:, 1:], -100)

    def ours():
        dpo_loss_and_grads(model.family, trained, model.cfg, x, y, rng=None, frozen=frozen)
    return ours, theirs


def grpo_pairs(folder: Path):
    trainer, model, adapters = grpo_case.setup.__wrapped__(Folder())
    parts = grpo_case.batch()
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = parts
    trained = {k: v for k, v in adapters.items() if k.endswith(("lora_A", "lora_B"))}
    frozen = {**model.params, **{k: v for k, v in adapters.items() if k not in trained}}
    rollout = rollout_of(prompt_ids, prompt_mask, completion_ids, completion_mask)
    cfg = TrainConfig(objective="grpo", objective_settings=GRPOSettings(
        loss_type="dapo", max_completion_tokens=grpo_case.C))

    def our_update():
        rollout_loss_and_grads(model.family, trained, model.cfg, rollout, advantages,
                               frozen=frozen, train_cfg=cfg)

    def their_update():
        grpo_case.trl_loss(trainer, "dapo", 0.0, None, parts)

    policy = Model(model.cfg, {**model.params, **adapters})
    tokens = 16

    def our_sample():
        list(generate(policy, prompt_ids, max_new_tokens=tokens, temperature=1.0, seed=0,
                      attention_mask=prompt_mask))

    def their_sample():
        with torch.no_grad():
            trainer.model.generate(input_ids=torch.from_numpy(prompt_ids),
                                   attention_mask=torch.from_numpy(prompt_mask.astype(np.int64)),
                                   max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True,
                                   temperature=1.0, top_k=0, pad_token_id=0)
    return {"grpo_update": (our_update, their_update), "grpo_sample": (our_sample, their_sample)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each side")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)   # both sides on one thread: glassformer's BLAS is capped below
    folder = Path(tempfile.mkdtemp(prefix="bench_align"))
    cases = {"dpo": dpo_pair(folder / "dpo"), **grpo_pairs(folder)}
    from threadpoolctl import threadpool_limits
    result = {}
    with threadpool_limits(1):
        for name, (ours, theirs) in cases.items():
            ours(), theirs()                                   # warm up
            times = {"ours": [], "theirs": []}
            for _ in range(args.repeats):
                times["ours"].append(timed(ours))
                times["theirs"].append(timed(theirs))
            mine, trl = np.median(times["ours"]), np.median(times["theirs"])
            print(f"{name:12s} glassformer {mine:8.1f} ms   TRL {trl:8.1f} ms   "
                  f"ratio {mine / trl:.2f}", file=sys.stderr)
            result[name] = {"glassformer_ms": round(float(mine), 2),
                            "trl_ms": round(float(trl), 2), "ratio": round(float(mine / trl), 3)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
