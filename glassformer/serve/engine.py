"""Engine: continuous batching of many replies on one model, in one worker thread.

A decode step reads every weight whether it serves one row or eight, so the engine runs every
reply in flight in the same forward. Its loop, once per step:

    1. drop the rows whose client left (`Sequence.cancelled`): freed within one step
    2. admit waiting sequences into free rows (a row holding the longest common prefix of the
       prompt is preferred, and those keys are reused), and prefill their prompts together:
       in one piece, or chunk by chunk (prefill.py) while the running rows go on decoding,
       C columns per step (`prefill_chunk`) or as many as `prefill_budget` allows beside the
       measured decode step (budget.py); nobody new is admitted until those joiners are in.
       Where the model allows (a LLaMA-family float32 or GGUF-block model, not batch-invariant),
       the chunk rides in step 3's forward instead of one of its own (mixed.py, vLLM's mixed
       batches): its ids share the decode step's products, so it pays no second weight pass
    3. one decode step for every running row: each feeds its last token at its own position,
       samples with its own Sampling and generator (generate/sampling.py, the sampler
       generate() uses: all rows in one call) after its grammar's mask when its request
       asked for a response_format (generate/constrain/), and stops on its own conditions
       (a reasoning budget spent puts the closing tag in place of the sample: reasoning.py);
       a finished row leaves, the others go on

The server's ASGI side talks to the engine only through `submit` (a bounded waiting list: a full
one raises `QueueFull`, an HTTP 429) and `Sequence.cancelled`; the engine answers through each
sequence's `on_event`. Greedy replies are the ones `generate` gives for the prompt alone (each
row's keys and positions are its own: rows.py), to float rounding of batched matrix products.
A hybrid model (Qwen3-Next, Qwen3.5) is served the same way, each row also carrying its
linear-attention layers' fixed-size state (rows.py); its rows reuse no earlier request's prefix.
With `batch_invariant` (serve --batch-invariant, invariant.py) a reply's logits are bit for bit
those it gets alone: joiners are prefilled together on fixed-shape tiles, each attending alone
by query blocks fixed from position 0, reusing a prefix only where an earlier prompt's prefill
computed it (`Aligned`), and every decode step computes all max_batch rows, so its products
have one shape.
"""
from __future__ import annotations

import sys
import threading
import time
from collections import deque

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import advance_rows, mask_rows
from glassformer.generate.generate import padding_start
from glassformer.generate.penalties import History
from glassformer.generate.sampling import sample
from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.serve.budget import PrefillBudget
from glassformer.serve.faults import fault_line
from glassformer.serve.invariant import check_invariant
from glassformer.serve.metrics import Metrics
from glassformer.serve.mixed import mixed_applies, mixed_step
from glassformer.serve.prefill import Aligned, Prefill
from glassformer.serve.reasoning import force_rows
from glassformer.serve.rows import RowCache
from glassformer.serve.sequence import Sequence, TokenInfo, likeliest


class QueueFull(GlassformerError):
    """The waiting list is full: the client should retry later."""


class Engine:
    """One model, a RowCache of `max_batch` rows, a waiting list of at most `max_queue`."""

    def __init__(self, model, *, max_batch: int, max_queue: int, max_len: int,
                 prefill_chunk: int = 0, prefill_budget: PrefillBudget | None = None,
                 batch_invariant: bool = False, mixed: bool = True):
        if batch_invariant:
            check_invariant(model)
        self.batch_invariant = batch_invariant   # invariant.py: each row computed apart
        self.model = model
        self.prefill_chunk = prefill_chunk   # 0 (and no budget): a joining prompt in one piece
        self.budget = prefill_budget         # each chunk sized to the decode step (budget.py)
        self.joining: Prefill | Aligned | None = None   # joiners prefilled chunk by chunk
        self.joiners: list[Sequence] = []
        self.max_queue = max_queue
        self.rows = RowCache.allocate(model, max_batch, max_len, batch_invariant=batch_invariant)
        self.running: list[Sequence | None] = [None] * max_batch
        self.prefilled = np.zeros(max_batch, dtype=np.int64)   # each row's last prompt length
        self.next_tokens = np.zeros(max_batch, dtype=np.int64)   # (B,) each row's newest token
        self.waiting: deque[Sequence] = deque()
        self.wake = threading.Condition()
        self.stopping = False
        self.padding = padding_start(model)
        self.thread = threading.Thread(target=self.loop, name="glassformer-engine", daemon=True)
        self.metrics = Metrics()          # token times (TTFT, inter-token), read by /metrics
        self.mixed = mixed                # a joiner's chunk rides in the decode step (mixed.py)
        self.mixes_model: bool | None = None   # mixed_applies, asked once (the model's shape)

    @property
    def max_len(self) -> int:
        return self.rows.max_len

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Finish what is running and waiting, then end the thread."""
        with self.wake:
            self.stopping = True
            self.wake.notify()
        self.thread.join()

    def submit(self, sequences: list[Sequence]) -> None:
        """Queue a request's sequences together, or raise QueueFull (none of them queued)."""
        with self.wake:
            if self.stopping:
                raise QueueFull("the server is shutting down")
            if len(self.waiting) + len(sequences) > self.max_queue:
                raise QueueFull(f"the server is busy: {len(self.waiting)} requests wait "
                                f"(--max-queue {self.max_queue}); retry shortly")
            now = time.perf_counter()
            for seq in sequences:
                seq.submitted_at = now
            self.waiting.extend(sequences)
            self.wake.notify()

    def busy(self) -> bool:
        return any(seq is not None for seq in self.running)

    def loop(self) -> None:
        while True:
            with self.wake:
                while not self.waiting and not self.busy() and not self.stopping:
                    self.wake.wait()
                if self.stopping and not self.waiting and not self.busy():
                    return
            try:
                self.step()
            except Exception as err:   # a bug must not hang the clients: each gets an error
                print(f"glassformer serve: engine fault: {fault_line(err)}", file=sys.stderr,
                      flush=True)
                self.fail_all(f"{type(err).__name__}: {err}")

    def fail_all(self, message: str) -> None:
        with self.wake:
            failed = [seq for seq in self.running if seq is not None] + list(self.waiting)
            self.waiting.clear()
        self.running = [None] * len(self.running)
        self.joining = None
        for row in range(len(self.running)):
            self.rows.forget(row)
        for seq in failed:
            seq.finish("error", flush=False, message=message)

    def step(self) -> None:
        self.drop_cancelled()
        if self.joining is None:
            self.admit()
        if self.joining is not None and self.mixes():
            self.mixed_step()
            return
        if self.joining is not None:
            self.feed_joiners()
        if self.decodable().any():
            began = time.perf_counter()
            self.decode()
            if self.budget is not None:
                self.budget.decoded(time.perf_counter() - began)

    def decodable(self) -> np.ndarray:
        """(B,) bool: the rows running with their prompt in (not still being prefilled)."""
        rows = np.array([seq is not None for seq in self.running])
        if self.joining is not None:
            rows[self.joining.rows] = False
        return rows

    def drop_cancelled(self) -> None:
        for row, seq in enumerate(self.running):
            if seq is not None and (seq.cancelled or seq.finished):
                seq.finish("cancelled")
                self.running[row] = None
        with self.wake:
            gone = [seq for seq in self.waiting if seq.cancelled]
            self.waiting = deque(seq for seq in self.waiting if not seq.cancelled)
        for seq in gone:
            seq.finish("cancelled")

    def admit(self) -> None:
        """Move waiting sequences into free rows and prefill them together."""
        joiners, rows, reused = [], [], []
        with self.wake:
            free = [row for row, seq in enumerate(self.running) if seq is None]
            while self.waiting and free:
                seq = self.waiting.popleft()
                row, keep = self.best_row(free, seq.prompt)
                free.remove(row)
                joiners.append(seq)
                rows.append(row)
                reused.append(keep)
        if not joiners:
            return
        if self.batch_invariant:   # the prefix every joiner's row holds (Aligned)
            reused = [min(reused)] * len(reused)
        running = np.array([seq is not None for seq in self.running])   # before the joiners
        for seq, row, keep in zip(joiners, rows, reused):   # running before their prefill, so
            seq.cached_tokens = keep                        # a fault in it fails them too
            self.running[row] = seq                         # (fail_all) rather than losing them
            self.prefilled[row] = len(seq.prompt)
        prompts = [seq.prompt for seq in joiners]
        if self.batch_invariant:   # each prompt computed as it would be alone (invariant.py)
            joining = Aligned.start(self.rows, self.model, rows, prompts, min(reused))
        else:
            joining = Prefill.start(self.rows, self.model, rows, prompts, reused)
        if self.prefill_chunk or self.budget is not None:
            self.joining = joining
            self.joiners = joiners
            return
        joining.feed(self.model)
        logits = joining.finish(self.rows, running)                     # (n, V)
        self.choose(logits, joiners, rows)

    def mixes(self) -> bool:
        """Whether this step feeds the joiners' chunk inside the decode step (mixed.py): rows
        decode beside them, the model takes the mixed step, and (auto chunks) the budget has
        a decode step's seconds to size the chunk by (else this step decodes alone, measured)."""
        if not self.mixed or not self.decodable().any():
            return False
        if self.budget is not None and not self.budget.decode_seconds:
            return False
        if self.mixes_model is None:
            self.mixes_model = mixed_applies(self.model, self.rows, self.joining)
        return self.mixes_model

    def mixed_step(self) -> None:
        """One forward decodes the running rows and feeds the joiners' next chunk (mixed.py);
        the budget learns the chunk's share of the step's seconds (budget.py `fed_beside`)."""
        joining = self.joining
        decodable = self.decodable()
        rows = int(np.flatnonzero(decodable).max()) + 1
        active = decodable[:rows]                                                # (rows,)
        tokens = np.where(active, self.next_tokens[:rows], 0)                    # (rows,)
        u, position, fed = joining.tokens.shape[0], joining.small.length, joining.fed
        chunk = (self.prefill_chunk if self.budget is None
                 else self.budget.chunk(u, position, decoding=True))
        began = time.perf_counter()
        logits = mixed_step(self.model, self.rows, rows, tokens, active, joining, chunk)
        picked = np.flatnonzero(active)
        self.choose(logits[picked], [self.running[row] for row in picked], list(picked))
        if self.budget is not None:
            self.budget.fed_beside(u, joining.fed - fed, position, time.perf_counter() - began)
        if joining.done:
            self.joined()

    def feed_joiners(self) -> None:
        """One chunk of the joiners' prefill; once all is fed, they join and pick a token (a
        joiner whose client left meanwhile is only copied in, for prefix reuse)."""
        joining = self.joining
        if self.budget is None:                     # a fixed chunk (always so when invariant)
            joining.feed(self.model, self.prefill_chunk)
        else:                                       # sized to the step, then learns its cost
            rows, position = joining.tokens.shape[0], joining.small.length
            chunk = self.budget.chunk(rows, position, decoding=bool(self.decodable().any()))
            began, fed = time.perf_counter(), joining.fed
            joining.feed(self.model, chunk)
            self.budget.fed(rows, joining.fed - fed, position, time.perf_counter() - began)
        if joining.done:
            self.joined()

    def joined(self) -> None:
        """Every joiner's prompt is fed: copy them into their rows and pick their first tokens
        (a joiner whose client left meanwhile is only copied in, for prefix reuse)."""
        joining = self.joining
        self.joining = None
        logits = joining.finish(self.rows, self.decodable())                # (n, V)
        staying = [i for i, (seq, row) in enumerate(zip(self.joiners, joining.rows))
                   if self.running[row] is seq]
        if staying:
            self.choose(logits[staying], [self.joiners[i] for i in staying],
                        [joining.rows[i] for i in staying])

    def best_row(self, free: list[int], prompt: list[int]) -> tuple[int, int]:
        """The free row holding the longest prefix of prompt (else the lowest), and its length."""
        shared = [self.rows.reuse(row, prompt) for row in free]
        if self.batch_invariant:   # its last prompt's keys only (prefill.py's Aligned)
            shared = [min(n, int(self.prefilled[row])) for n, row in zip(shared, free)]
        best = int(np.argmax(shared))
        return (free[best], shared[best]) if shared[best] > 0 else (free[0], 0)

    def decode(self) -> None:
        """One forward for rows [first running row, last running row]: each running row feeds
        its last token (rows.py `first_of`: idle rows before the first are not computed)."""
        decodable = self.decodable()
        rows = int(np.flatnonzero(decodable).max()) + 1
        if self.batch_invariant:
            rows = len(decodable)            # every row: products of one shape (invariant.py)
        first = self.rows.first_of(decodable)
        active = decodable[first:rows]                                           # (n,)
        tokens = np.where(active, self.next_tokens[first:rows], 0)               # (n,)
        logits = self.rows.decode(self.model, rows, tokens, active, first)       # (n, V)
        picked = np.flatnonzero(active)
        self.choose(logits[picked], [self.running[first + row] for row in picked],
                    list(first + picked))

    def choose(self, logits: np.ndarray, seqs: list[Sequence], rows: list[int]) -> None:
        """Sample each row's next token, hand it to its sequence, free the finished rows."""
        if self.padding is not None:
            logits = logits.copy()
            logits[:, self.padding:] = -np.inf               # padding ids: never sampled
        constraints = [seq.constraint for seq in seqs]              # response_format rows
        masked = mask_rows(logits, constraints)                     # refused tokens: -inf
        ids = sample(masked, [seq.settings.sampling for seq in seqs],
                     [seq.rng for seq in seqs],                     # (n,) generate()'s sampler
                     history=[History(seq.prompt, seq.output) for seq in seqs])
        advance_rows(constraints, ids)
        force_rows(ids, seqs)              # reasoning budgets (rows without a grammar only)
        infos = self.token_infos(logits, ids, seqs)                 # the model's own log-probs
        self.next_tokens[rows] = ids
        for seq, row, token_id, info in zip(seqs, rows, ids, infos):
            seq.accept(int(token_id), info)
            if seq.cancelled:
                seq.finish("cancelled")
            if seq.finished:
                self.running[row] = None
        self.metrics.tokens_chosen(seqs)

    def token_infos(self, logits: np.ndarray, ids: np.ndarray, seqs: list[Sequence]) -> list:
        """Per row, the chosen token's log-probability and the top alternatives (None for
        rows that did not ask): the model's own log-softmax of its logits."""
        wanted = [i for i, seq in enumerate(seqs) if seq.settings.logprobs is not None]
        infos: list = [None] * len(seqs)
        if not wanted:
            return infos
        logp, _ = log_softmax_forward(logits[wanted])                   # (w, V)
        top = likeliest(logp, max(seqs[i].settings.logprobs for i in wanted))   # (w, k)
        decode = self.model.tokenizer.decode
        for j, i in enumerate(wanted):
            k = seqs[i].settings.logprobs
            alternatives = [(decode([int(t)]), float(logp[j, t])) for t in top[j, :k]]
            infos[i] = TokenInfo(decode([int(ids[i])]), float(logp[j, ids[i]]), alternatives)
        return infos
