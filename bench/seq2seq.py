"""Encoder-decoder speed: glassformer's hand-written seq2seq vs torch.nn.Transformer, same sizes.

Two timings, each side on the same threads, alternating blocks in one process:

    train   one optimizer step (forward, label-smoothed cross-entropy, backward, clip, AdamW)
            on the same CMUdict G2P batches (B words, bucketed by length as `train` draws them)
    beam    beam search (width K) over the same N source words for the same number of steps:
            glassformer's generate/beam.py (encoder once, KV cache, cross K/V projected once);
            torch: its encoder once, then nn.TransformerDecoder over the whole prefix at each
            step (it has no KV cache), with the same per-step work (log-softmax, top-2K over
            K V candidates, beams reordered)

The torch model is the G2P recipe's shape: nn.Transformer(d_model=C, nhead=H, L encoder and L
decoder layers, dim_feedforward=4C, post-norm, ReLU) with a shared token embedding times sqrt(C),
[sin | cos] positions and a tied output head. (nn.Transformer also puts a final LayerNorm on
each stack, which the paper's post-norm model does not have: two (C,) norms, negligible time.)

    python -m bench.seq2seq [--iters 30] [--threads 2] [--beam 4] [--words 256]

Last line: one JSON object with train_ms and beam_ms of both sides and `ratio`
(glassformer / torch training step time; beam_ratio the same for decoding).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

from glassformer.blas import blas_threads
from glassformer.generate.beam import beam_search
from glassformer.models import seq2seq
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PAD_ID, PairTokenizer
from glassformer.train.objectives.objective import token_loss_and_grads
from glassformer.train.optim import adamw_init, adamw_step, clip_grad_norm
from glassformer.train.datasets.pairs import encode_pairs, read_pairs, split_pairs
from glassformer.train.objectives.seq2seq import draw_pair_batch

HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.98, weight_decay=0.01, grad_clip=1.0, smoothing=0.1)


def g2p_data():
    pairs = read_pairs("cmudict")
    tok = PairTokenizer.from_pairs(pairs.sources, pairs.targets, pairs.target_split)
    parts = split_pairs(pairs)
    return tok, encode_pairs(parts["train"], tok), parts["test"].sources


def our_stepper(cfg, params):
    state = {"opt": adamw_init(params)}
    train_cfg = SimpleNamespace(label_smoothing=HYPER["smoothing"])

    def step(x, y):
        loss, grads, _ = token_loss_and_grads(seq2seq.FAMILY, params, cfg, x, y, rng=None,
                                           train_cfg=train_cfg)
        grads, _ = clip_grad_norm(grads, HYPER["grad_clip"])
        _, state["opt"] = adamw_step(params, grads, state["opt"], lr=HYPER["lr"],
                                     beta1=HYPER["beta1"], beta2=HYPER["beta2"],
                                     weight_decay=HYPER["weight_decay"])
        return loss
    return step


def torch_model(cfg):
    import torch
    from torch import nn

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.core = nn.Transformer(cfg.d_model, cfg.n_head, cfg.n_layer, cfg.n_layer,
                                       4 * cfg.d_model, dropout=0.0, batch_first=True)
            half = cfg.d_model // 2
            pos = torch.arange(cfg.max_seq_len, dtype=torch.float32)[:, None]
            freq = torch.exp(-math.log(10000.0) * torch.arange(half) / half)[None, :]
            self.register_buffer("pos", torch.cat([torch.sin(pos * freq),
                                                   torch.cos(pos * freq)], dim=1))

        def embed(self, ids):
            return self.emb(ids) * math.sqrt(cfg.d_model) + self.pos[:ids.shape[1]]

        def encode(self, src):
            pad = src == PAD_ID
            return self.core.encoder(self.embed(src), src_key_padding_mask=pad), pad

        def decode(self, tgt, memory, pad):
            causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
            h = self.core.decoder(self.embed(tgt), memory, tgt_mask=causal, tgt_is_causal=True,
                                  memory_key_padding_mask=pad)
            return h @ self.emb.weight.T                                # tied head

        def forward(self, src, tgt):
            memory, pad = self.encode(src)
            return self.decode(tgt, memory, pad)
    return Seq2Seq()


def torch_stepper(model):
    import torch
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": HYPER["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}], lr=HYPER["lr"],
                            betas=(HYPER["beta1"], HYPER["beta2"]))

    def step(x, y):
        logits = model(torch.from_numpy(x[0]), torch.from_numpy(x[1]))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 torch.from_numpy(y).reshape(-1),
                                                 label_smoothing=HYPER["smoothing"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["grad_clip"])
        opt.step()
        return loss.item()
    return step


def torch_beam(model, src: np.ndarray, k: int, steps: int):
    """The same per-step work as beam_search for `steps` steps, prefix recomputed each step."""
    import torch
    with torch.no_grad():
        src_t = torch.from_numpy(src)
        b = src_t.shape[0]
        memory, pad = model.encode(src_t)
        memory = memory.repeat_interleave(k, dim=0)
        pad = pad.repeat_interleave(k, dim=0)
        scores = torch.full((b, k), -math.inf, dtype=torch.float64)
        scores[:, 0] = 0.0
        prefix = torch.full((b * k, 1), BOS_ID, dtype=torch.int64)
        for _ in range(steps):
            logp = torch.log_softmax(model.decode(prefix, memory, pad)[:, -1], dim=-1)
            cand = (scores[:, :, None] + logp.double().view(b, k, -1)).view(b, -1)
            top_scores, top = cand.topk(2 * k, dim=1)
            keep = (top % logp.shape[-1] == EOS_ID).argsort(dim=1, stable=True)[:, :k]
            scores = top_scores.gather(1, keep)
            chosen = top.gather(1, keep)
            parent = (torch.arange(b)[:, None] * k + chosen // logp.shape[-1]).view(-1)
            prefix = torch.cat([prefix[parent], (chosen % logp.shape[-1]).view(-1, 1)], dim=1)
        return prefix


def timed(fn, items) -> list[float]:
    out = []
    for item in items:
        start = time.perf_counter()
        fn(*item)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30, help="timed training steps per side")
    parser.add_argument("--threads", type=int, default=2, help="threads of each side")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--words", type=int, default=256, help="test words beam-decoded")
    parser.add_argument("--steps", type=int, default=16, help="decoding steps (both sides)")
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tok, train, test_words = g2p_data()
    cfg = seq2seq.Seq2SeqConfig(vocab_size=tok.vocab_size, max_seq_len=32, n_layer=args.layers,
                                n_head=args.heads, d_model=args.d_model, pad_id=PAD_ID,
                                eos_id=EOS_ID, decoder_start_id=BOS_ID)
    params = seq2seq.init_params(cfg, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    batches = [draw_pair_batch(train, args.batch, rng) for _ in range(args.iters + 4)]
    ours, theirs = our_stepper(cfg, params), torch_stepper(torch_model(cfg))
    ours_ms, torch_ms = [], []
    with blas_threads(args.threads):
        for start in range(0, len(batches), 4):             # alternate blocks of 4 steps
            block = batches[start:start + 4]
            mine, other = timed(ours, block), timed(theirs, block)
            if start:                                        # the first block warms up
                ours_ms += mine
                torch_ms += other
        words = test_words[:args.words]
        src = np.zeros((len(words), max(map(len, words))), np.int64)
        for i, word in enumerate(words):
            src[i, :len(word)] = tok.encode(word)
        beam_ours, beam_torch = [], []
        model = torch_model(cfg).eval()
        for _ in range(3):
            beam_ours += timed(lambda: beam_search(params, cfg, src, beam=args.beam,
                                                   max_new_tokens=args.steps,
                                                   min_new_tokens=args.steps), [()])
            beam_torch += timed(lambda: torch_beam(model, src, args.beam, args.steps), [()])
    result = {"train_ms": {"glassformer": statistics.median(ours_ms),
                           "torch": statistics.median(torch_ms)},
              "beam_ms": {"glassformer": statistics.median(beam_ours),
                          "torch": statistics.median(beam_torch)},
              "threads": args.threads, "batch": args.batch, "beam": args.beam,
              "words": len(words), "steps": args.steps,
              "model": {"layers": args.layers, "d_model": args.d_model, "heads": args.heads}}
    result["ratio"] = result["train_ms"]["glassformer"] / result["train_ms"]["torch"]
    result["beam_ratio"] = result["beam_ms"]["glassformer"] / result["beam_ms"]["torch"]
    print(f"training step: glassformer {result['train_ms']['glassformer']:.1f} ms, torch "
          f"{result['train_ms']['torch']:.1f} ms ({result['ratio']:.2f}x); beam {args.beam} over "
          f"{len(words)} words x {args.steps} steps: glassformer "
          f"{result['beam_ms']['glassformer']:.0f} ms, torch {result['beam_ms']['torch']:.0f} ms "
          f"({result['beam_ratio']:.2f}x)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
