"""glassformer through lm-evaluation-harness equals lm-eval's own `hf` backend, item by item.

The reference: lm-eval 0.4's `hf` model (transformers loading the same SmolLM2 GGUF, float32) on
the local tasks arc_easy_local, piqa_local, winogrande_local (glassformer/lm_eval/tasks.py:
lm-eval's prompts over the shared JSONL), ITEMS items each, samples logged. Then both doors:

    (a) model="glassformer" in process             (glassformer/lm_eval/model.py), the
        GGUF's matrices dequantized once at load (dequantize=true) as transformers reads them
    (b) model="local-completions" against a real `glassformer serve --model smollm2` on a free
        loopback port (token-id prompts, echo, logprobs), with the tokenizer's files saved
        from the GGUF by transformers (tokenizer_backend=huggingface); the server is stopped
        when the module ends

        (the served model kept quantized, serve's default; each request of lm-eval's is one
        forward: echo with max_tokens 1 takes its token from the echo's own logits)

must give every request's log-likelihood within 1e-4 relative of hf's and the same acc and
acc_norm for every item (hence the same task figures). hf's reference runs once for both.
Several minutes on 2 busy cores.
"""
import numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("transformers")
pytest.importorskip("torch")

from lm_eval.tasks import TaskManager  # noqa: E402

import glassformer.lm_eval  # noqa: E402,F401  registers "glassformer"
from glassformer.lm_eval.tasks import LOCAL_TASKS, write_tasks  # noqa: E402
from tests.serve.serve_process import start_server  # noqa: E402

from eval_data import DATA  # noqa: E402

ITEMS = 100
RELATIVE = 1e-4
BATCH = 64          # requests a forward in process: fewer, larger forwards than 16
SERVER_BATCH = 32   # requests an HTTP request (about one forward of the echo: GROUP_FLOATS)
TASKS = sorted(LOCAL_TASKS)
pytestmark = pytest.mark.slow


def evaluate(model: str, model_args: str, include: str) -> dict:
    """simple_evaluate on the local tasks, every sample logged."""
    manager = TaskManager(include_path=include, include_defaults=False)   # only these tasks
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=TASKS, limit=ITEMS,
                                   log_samples=True, task_manager=manager,
                                   random_seed=0, numpy_random_seed=0, torch_random_seed=0,
                                   fewshot_random_seed=0)


@pytest.fixture(scope="module")
def include(tmp_path_factory):
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    return str(write_tasks(DATA, tmp_path_factory.mktemp("lm_eval_tasks")))


@pytest.fixture(scope="module")
def reference(smollm2_path, include):
    """lm-eval's hf backend on the same GGUF."""
    args = (f"pretrained={smollm2_path.parent},gguf_file={smollm2_path.name},dtype=float32,"
            "batch_size=16,device=cpu")
    return evaluate("hf", args, include)


def assert_same_items(theirs: dict, ours: dict) -> None:
    """Per task and item: each request's log-likelihood (1e-4 relative), acc and acc_norm."""
    for task in TASKS:
        ref = sorted(theirs["samples"][task], key=lambda s: s["doc_id"])
        got = sorted(ours["samples"][task], key=lambda s: s["doc_id"])
        assert len(ref) == len(got) == ITEMS
        for a, b in zip(ref, got):
            assert a["arguments"] == b["arguments"], (task, a["doc_id"])   # the same requests
            np.testing.assert_allclose([r[0][0] for r in b["resps"]],
                                       [r[0][0] for r in a["resps"]], rtol=RELATIVE,
                                       err_msg=f"{task} item {a['doc_id']}")
            for metric in ("acc", "acc_norm"):
                assert a.get(metric) == b.get(metric), (task, a["doc_id"], metric)
        for metric in ("acc,none", "acc_norm,none"):
            assert theirs["results"][task].get(metric) == ours["results"][task].get(metric)


def test_the_glassformer_lm_class_equals_lm_evals_hf_item_by_item(reference, include):
    ours = evaluate("glassformer", f"pretrained=smollm2,batch_size={BATCH},dequantize=true",
                    include)
    assert_same_items(reference, ours)


def test_local_completions_against_glassformer_serve_equals_hf(reference, include, smollm2_path,
                                                                tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("aiohttp")          # lm-eval's API models ("lm-eval[api]")
    folder = tmp_path_factory.mktemp("smollm2_tokenizer")
    transformers.AutoTokenizer.from_pretrained(
        str(smollm2_path.parent), gguf_file=smollm2_path.name).save_pretrained(folder)
    server = start_server("smollm2", tmp_path_factory.mktemp("serve"))
    try:
        args = (f"base_url={server.url}/v1/completions,model=smollm2,"
                f"tokenizer_backend=huggingface,tokenizer={folder},batch_size={SERVER_BATCH},"
                "max_retries=1")
        ours = evaluate("local-completions", args, include)
    finally:
        server.stop()
    assert server.process.poll() is not None
    assert_same_items(reference, ours)
