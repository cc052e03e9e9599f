"""glassformer's ICL scoring against an independent scorer written on transformers: SmolLM2 loaded
by transformers from the same GGUF, its own tokenizer, each (prompt, choice) scored as one whole
sequence with torch's log_softmax, lm-eval's way of splitting context and continuation. Per item
the summed log-likelihoods agree within 1e-4 relative, and so do the picks.

The second test takes each task kind (multiple choice, schema, language modelling) on items from
the far end of the task's file, which no `--limit` run in the docs reaches: the items are copied
into a folder of their own, so the shots are drawn among them too."""
import numpy as np
import pytest

from glassformer.tasks.evaluate.prompts import requests
from glassformer.tasks.evaluate.items import read_items
from glassformer.tasks.evaluate.run_task import evaluate_task
from glassformer.tasks.evaluate.tasks_table import TASKS
from glassformer.tasks.evaluate.metrics import pick

from eval_data import DATA

# (task, shots, first line taken): hidden items, past every --limit the docs report
HIDDEN = [("copa", 0, 80), ("winograd", 0, 250), ("lambada_openai", 0, 5000),
          ("bigbench_operators", 1, 190)]
HIDDEN_ITEMS = 8

ITEMS, SHOTS = 8, 3
RELATIVE = 1e-4


def split_ids(tokenizer, context, continuation):
    """lm-eval hf's _encode_pair: trailing spaces move to the continuation; (ids, n scored)."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    head = tokenizer(context, add_special_tokens=False)["input_ids"]
    return head + whole[len(head):], len(whole) - len(head)


def reference_loglik(torch, model, tokenizer, context, continuation):
    """lm-eval hf's loglikelihood, written against transformers."""
    ids, n = split_ids(tokenizer, context, continuation)
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0].double()
    logp = torch.log_softmax(logits, -1)[-n:]
    return float(logp[torch.arange(n), torch.tensor(ids[-n:])].sum())


def reference_greedy(torch, model, tokenizer, context, continuation):
    """Language modelling: the continuation is each position's argmax (lm-eval's is_greedy)."""
    ids, n = split_ids(tokenizer, context, continuation)
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0]
    return bool((logits[-n:].argmax(-1) == torch.tensor(ids[-n:])).all())


def load_reference(torch, transformers, smollm2_path):
    folder, name = str(smollm2_path.parent), smollm2_path.name
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32).eval()
    return model, transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)


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


@pytest.mark.slow
def test_every_task_kind_on_hidden_items_matches_a_transformers_scorer(smollm2, smollm2_path,
                                                                      tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    model, tokenizer = load_reference(torch, transformers, smollm2_path)
    for task, shots, first in HIDDEN:
        spec = TASKS[task]
        lines = (DATA / spec.file).read_text(encoding="utf-8").splitlines()
        assert len(lines) >= first + HIDDEN_ITEMS, f"{spec.file} is shorter than expected"
        (tmp_path / spec.file).write_text(
            "\n".join(lines[first:first + HIDDEN_ITEMS]) + "\n", encoding="utf-8")
        ours = evaluate_task(smollm2, spec, tmp_path, shots=shots)
        items = read_items(tmp_path / spec.file, spec.kind)
        right = 0
        for index, record in enumerate(ours.items):
            asked = requests(spec, items, index, shots)
            theirs = [reference_loglik(torch, model, tokenizer, c, x) for c, x in asked]
            np.testing.assert_allclose(record["logliks"], theirs, rtol=RELATIVE, err_msg=task)
            if spec.kind == "language_modeling":
                greedy = reference_greedy(torch, model, tokenizer, *asked[0])
                assert (record["pred"] == 0) == greedy, (task, index)
                right += greedy
            else:
                assert record["pred"] == pick(theirs), (task, index)
                right += pick(theirs) == items[index].gold
        assert ours.acc == right / len(items), task
