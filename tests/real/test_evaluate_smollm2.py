"""glassformer's ICL scoring against an independent scorer written on transformers: SmolLM2 loaded
by transformers from the same GGUF, its own tokenizer, each (prompt, choice) scored as one whole
sequence with torch's log_softmax, lm-eval's way of splitting context and continuation. Per item
the summed log-likelihoods agree within 1e-4 relative, and so do the picks."""
import numpy as np
import pytest

from glassformer.tasks.evaluate.prompts import requests
from glassformer.tasks.evaluate.items import read_items
from glassformer.tasks.evaluate.run_task import evaluate_task
from glassformer.tasks.evaluate.tasks_table import TASKS
from glassformer.tasks.evaluate.metrics import pick

from eval_data import DATA

ITEMS, SHOTS = 20, 3
RELATIVE = 1e-4


def reference_loglik(torch, model, tokenizer, context, continuation):
    """lm-eval hf's _encode_pair and loglikelihood, written against transformers."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    head = tokenizer(context, add_special_tokens=False)["input_ids"]
    ids = head + whole[len(head):]
    n = len(whole) - len(head)
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0].double()
    logp = torch.log_softmax(logits, -1)[-n:]
    return float(logp[torch.arange(n), torch.tensor(ids[-n:])].sum())


@pytest.mark.slow
def test_arc_easy_logliks_match_a_transformers_scorer(smollm2, smollm2_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    folder, name = str(smollm2_path.parent), smollm2_path.name
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    spec = TASKS["arc_easy"]
    ours = evaluate_task(smollm2, spec, DATA, limit=ITEMS, shots=SHOTS)
    items = read_items(DATA / spec.file, spec.kind)
    for index, record in enumerate(ours.items):
        theirs = [reference_loglik(torch, model, tokenizer, c, x)
                  for c, x in requests(spec, items, index, SHOTS)]
        np.testing.assert_allclose(record["logliks"], theirs, rtol=RELATIVE)
        assert record["pred"] == pick(theirs)
