"""GlassformerLM: lm-evaluation-harness's `LM` interface over a glassformer model.

    lm_eval.simple_evaluate(model="glassformer", model_args="pretrained=smollm2,adapter=A",
                            tasks=[...])

    loglikelihood            requests grouped by context (an item's choices), groups batched
                             together (tasks/evaluate/batches.py) and scored by score_batch
                             (tasks/evaluate/score.py): each shared context run once, every
                             continuation read from the KV cache; up to `batch_size` rows a
                             forward
    loglikelihood_rolling    the text in windows of the model's context (requests.py), scored
                             `batch_size` windows at a time; the sum of every token's log-prob
    generate_until           greedy (glassformer.generate, temperature 0) up to max_gen_toks,
                             cut before the first `until` string or at an end-of-text token

Answers come back in the order of the requests. `pretrained` is anything load_model takes: a
packaged name, an HF folder, a .gguf file, a glassformer run; `dequantize=true` widens a GGUF's
quantized matrices to float32 once at load (as transformers reads a GGUF), instead of a slab at a
time in every product.
"""
from __future__ import annotations

from collections import defaultdict

from lm_eval.api.model import LM
from tqdm import tqdm

from glassformer.errors import GlassformerError
from glassformer.generate.stream import generated_ids
from glassformer.io.named_models import load_model
from glassformer.lm_eval.requests import (cut_at_stop, encode_request, prefix_token,
                                          rolling_windows)
from glassformer.tasks.evaluate.batches import plan_batches
from glassformer.tasks.evaluate.score import score_batch, score_requests
from glassformer.tokenizers.end_of_text import end_of_text_ids

DEFAULT_MAX_GEN_TOKS = 256     # lm-eval's hf backend default


def _batch_size(value) -> int:
    """lm-eval passes batch_size as an int, a string, or "auto" (here: 16 rows)."""
    if value in (None, "auto") or str(value).startswith("auto"):
        return 16
    size = int(value)
    if size < 1:
        raise GlassformerError(f"batch_size must be >= 1, got {value}")
    return size


def _flag(name: str, value) -> bool:
    """A true/false model_arg: lm-eval passes "true"/"false" as a bool, a caller may pass a
    string."""
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "false", "0"):
        return str(value).lower() in ("true", "1")
    raise GlassformerError(f"model_arg {name} must be true or false, got {value!r}")


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


class GlassformerLM(LM):
    """A glassformer model as an lm-eval LM (registered as "glassformer" in __init__.py)."""

    def __init__(self, pretrained=None, adapter=None, batch_size=1, model=None,
                 max_batch_size=None, device=None, dequantize=False, **unknown) -> None:
        super().__init__()
        if unknown:     # a misspelt model_arg would otherwise be ignored silently
            raise GlassformerError(f"unknown model_args {', '.join(sorted(unknown))}: "
                                   "glassformer takes pretrained, adapter, batch_size, "
                                   "dequantize")
        if model is None and pretrained is None:
            raise GlassformerError("give model_args pretrained=NAME|FOLDER|FILE.gguf")
        self.model = model if model is not None else load_model(
            pretrained, adapter=adapter, dequantize=_flag("dequantize", dequantize))
        if self.model.tokenizer is None:
            raise GlassformerError("this model has no tokenizer: lm-eval sends text")
        self.batch_size = _batch_size(batch_size)

    @property
    def tokenizer_name(self) -> str:   # lm-eval's cache key for chat templates
        return "glassformer"

    def _score(self, encoded: list) -> list[tuple[float, bool]]:
        scored = score_requests(self.model, encoded)
        return [(float(sum(logps)), greedy) for logps, greedy in zip(scored.logps, scored.greedy)]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """(summed log-prob of the continuation, whether it is the greedy one) per request."""
        tokenizer, context_len = self.model.tokenizer, self.model.context_len
        groups = defaultdict(list)                     # context -> indices of its requests
        for index, request in enumerate(requests):
            groups[request.args[0]].append(index)
        chunks = [chunk for indices in groups.values()
                  for chunk in _chunks(indices, self.batch_size)]
        encoded = [[encode_request(tokenizer, *requests[i].args[:2], context_len) for i in chunk]
                   for chunk in chunks]
        answers = [None] * len(requests)
        progress = tqdm(total=len(requests), disable=disable_tqdm, desc="loglikelihood")
        for batch in plan_batches(encoded, rows=self.batch_size):
            for c, scored in zip(batch, score_batch(self.model, [encoded[c] for c in batch])):
                for index, logps, greedy in zip(chunks[c], scored.logps, scored.greedy):
                    answers[index] = (float(sum(logps)), greedy)
                    self.cache_hook.add_partial("loglikelihood", requests[index].args,
                                                answers[index])
                progress.update(len(chunks[c]))
        progress.close()
        return answers

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each text's total log-prob, in windows of the model's context."""
        tokenizer = self.model.tokenizer
        prefix = prefix_token(tokenizer)
        answers = []
        for request in tqdm(requests, disable=disable_tqdm, desc="loglikelihood_rolling"):
            windows = rolling_windows(tokenizer.encode(request.args[0]), prefix,
                                      self.model.context_len)
            total = sum(logp for chunk in _chunks(windows, self.batch_size)
                        for logp, _ in self._score(chunk))
            answers.append(float(total))
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, answers[-1])
        return answers

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy text after each context, up to max_gen_toks, cut before a stop string."""
        return [self._generate(*request.args[:2], request)
                for request in tqdm(requests, disable=disable_tqdm, desc="generate_until")]

    def _generate(self, context: str, gen_kwargs: dict, request) -> str:
        tokenizer = self.model.tokenizer
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        new = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
        new = min(new, self.model.context_len - 1)
        prompt = tokenizer.encode(context)[-(self.model.context_len - new):]   # left-truncated
        if not prompt:
            prompt = [prefix_token(tokenizer)]
        ids, text = [], ""
        for token in generated_ids(self.model, prompt, stop_ids=end_of_text_ids(tokenizer),
                                   max_new_tokens=new, temperature=0.0):
            ids.append(token)
            text, stopped = cut_at_stop(tokenizer.decode(ids), until)
            if stopped:
                break
        self.cache_hook.add_partial("generate_until", request.args, text)
        return text
