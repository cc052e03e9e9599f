"""The lm-evaluation-harness door (glassformer/lm_eval/): the "glassformer" LM's answers equal
glassformer's own scoring (tasks/evaluate), a direct forward's log-softmax, and lm-eval's own
rolling windows; simple_evaluate on a local JSON task gives evaluate_task's acc item by item.
A tiny random LLaMA with a byte tokenizer (tests/serve/serve_models.py) saved as an HF folder."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402

from glassformer.errors import GlassformerError  # noqa: E402
from glassformer.io.named_models import load_model  # noqa: E402
from glassformer.lm_eval import GlassformerLM  # noqa: E402  registers "glassformer"
from glassformer.lm_eval.requests import rolling_windows  # noqa: E402
from glassformer.ops.cross_entropy import log_softmax_forward  # noqa: E402
from glassformer.tasks.evaluate.items import read_items  # noqa: E402
from glassformer.tasks.evaluate.prompts import requests as task_requests  # noqa: E402
from glassformer.tasks.evaluate.run_task import evaluate_task  # noqa: E402
from glassformer.tasks.evaluate.tasks_table import CHOICE, TaskSpec  # noqa: E402
from tests.serve.serve_models import save_chat_model, tiny_chat_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
YAML = Path(__file__).with_name("lm_eval_tasks") / "tiny_mc.yaml"
SPEC = TaskSpec("tiny_mc", "tiny_mc.jsonl", CHOICE, 0, 0.25)   # delimiter " ", as the YAML
ITEMS = [{"query": f"Question: which number is {word}?",
          "choices": ["one", "two", "three", "four"][:3 + i % 2], "gold": i % 3}
         for i, word in enumerate(["one", "two", "three", "one", "two", "three", "one", "two"])]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_chat_model(tmp_path_factory.mktemp("lm_eval_door") / "tiny")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm_eval_data")
    (path / SPEC.file).write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    (path / "tiny_mc.yaml").write_text(YAML.read_text().replace("DATA_FILE",
                                                                str(path / SPEC.file)))
    return path


def direct(model, inputs, targets) -> float:
    """Summed log-prob of the last len(targets) positions of one whole forward."""
    logits, _ = model.forward(np.asarray([inputs], np.int64))
    scores, _ = log_softmax_forward(logits[0].astype(np.float64))
    rows = np.arange(len(inputs) - len(targets), len(inputs))
    return float(scores[rows, targets].sum())


def instances(kind, arguments):
    return [Instance(request_type=kind, doc={}, arguments=args, idx=0) for args in arguments]


def test_loglikelihood_equals_evaluate_task_and_a_direct_forward(folder, data_dir):
    lm = lm_eval.api.registry.get_model("glassformer").create_from_arg_string(
        f"pretrained={folder}", {"batch_size": 2})        # groups of 3-4 choices, chunked by 2
    result = evaluate_task(lm.model, SPEC, data_dir)
    items = read_items(data_dir / SPEC.file, CHOICE)
    for index, record in enumerate(result.items):
        pairs = task_requests(SPEC, items, index, 0)
        answers = lm.loglikelihood(instances("loglikelihood", pairs), disable_tqdm=True)
        np.testing.assert_allclose([a for a, _ in answers], record["logliks"], atol=1e-5)
    tok = lm.model.tokenizer
    context, continuation = "Question: which number is two?", " two"
    ids, targets = tok.encode(context), tok.encode(continuation)
    (got, greedy), (empty, _) = lm.loglikelihood(
        instances("loglikelihood", [(context, continuation), ("", continuation)]),
        disable_tqdm=True)
    assert got == pytest.approx(direct(lm.model, ids + targets[:-1], targets), abs=1e-5)
    assert empty == pytest.approx(direct(lm.model, [130] + targets[:-1], targets), abs=1e-5)
    assert isinstance(greedy, bool)


def test_bad_model_args_are_one_line_each(folder):
    make = lm_eval.api.registry.get_model("glassformer").create_from_arg_string
    with pytest.raises(GlassformerError, match="give model_args pretrained="):
        make("")
    with pytest.raises(GlassformerError, match="unknown model_args adaptor"):
        make(f"pretrained={folder},adaptor=x")
    with pytest.raises(GlassformerError, match="batch_size must be >= 1"):
        make(f"pretrained={folder}", {"batch_size": 0})
    with pytest.raises(GlassformerError, match="model_arg dequantize must be true or false"):
        make(f"pretrained={folder},dequantize=maybe")


def test_loglikelihood_rolling_is_the_sum_of_every_tokens_log_prob():
    model = tiny_chat_model(max_seq_len=32)
    lm = GlassformerLM(model=model, batch_size=3)
    short, long = "the cat sat on the mat", "the cat sat on the mat and looked at the dog " * 3
    got = lm.loglikelihood_rolling(instances("loglikelihood_rolling", [(short,), (long,)]),
                                   disable_tqdm=True)
    tokens = model.tokenizer.encode(short)
    assert got[0] == pytest.approx(direct(model, [130] + tokens[:-1], tokens), abs=1e-5)
    tokens = model.tokenizer.encode(long)
    windows = [make_disjoint_window(w) for w in get_rolling_token_windows(tokens, 130, 32, 1)]
    assert len(windows) > 3                                  # lm-eval's hf windows, one by one
    expected = sum(direct(model, (ctx + cont)[:-1][-32:], cont) for ctx, cont in windows)
    assert got[1] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("length", [1, 3, 4, 12, 13, 40])
def test_rolling_windows_are_lm_evals_own(length):
    tokens, context = list(range(5, 5 + length)), 4
    ours = [(w.inputs.tolist(), w.targets.tolist()) for w in rolling_windows(tokens, 0, context)]
    theirs = [((ctx + cont)[:-1][-context:], cont) for ctx, cont in
              map(make_disjoint_window, get_rolling_token_windows(tokens, 0, context, 1))]
    assert ours == theirs


def test_generate_until_is_greedy_and_stops_before_the_stop_string():
    lm = GlassformerLM(model=tiny_chat_model(), batch_size=1)
    free, = lm.generate_until(instances("generate_until", [("Once upon", {"max_gen_toks": 12})]),
                              disable_tqdm=True)
    assert 6 <= len(lm.model.tokenizer.encode(free)) <= 12      # no end-of-text before 6
    stop = free[4:6]
    cut, again = lm.generate_until(instances("generate_until", [
        ("Once upon", {"until": [stop], "max_gen_toks": 12}),
        ("Once upon", {"until": "never there", "max_gen_toks": 12})]), disable_tqdm=True)
    assert cut == free[:free.index(stop)] and again == free


def test_simple_evaluate_acc_equals_evaluate_task_item_by_item(folder, data_dir):
    out = lm_eval.simple_evaluate(model="glassformer", model_args=f"pretrained={folder}",
                                  tasks=["tiny_mc"], limit=6, log_samples=True,
                                  task_manager=TaskManager(include_path=str(data_dir)))
    ours = evaluate_task(load_model(folder), SPEC, data_dir, limit=6)
    assert out["results"]["tiny_mc"]["acc,none"] == pytest.approx(ours.acc)
    samples = sorted(out["samples"]["tiny_mc"], key=lambda s: s["doc_id"])
    for sample, record in zip(samples, ours.items, strict=True):
        np.testing.assert_allclose([r[0][0] for r in sample["resps"]], record["logliks"],
                                   atol=1e-5)


def test_python_m_glassformer_lm_eval_is_lm_evals_command_line(folder, data_dir):
    done = subprocess.run(
        [sys.executable, "-m", "glassformer.lm_eval", "run", "--model", "glassformer",
         "--model_args", f"pretrained={folder}", "--tasks", "tiny_mc", "--include_path",
         str(data_dir), "--limit", "2"], capture_output=True, text=True, env=_env(), cwd=ROOT,
        timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"tiny_mc.*acc", done.stdout)


def _env() -> dict:
    """This checkout's glassformer first, for subprocesses."""
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))


def test_import_glassformer_does_not_import_lm_eval():
    check = ("import sys, glassformer, glassformer.tasks.evaluate.run_task; "
             "print([m for m in sys.modules if m.split('.')[0] in ('lm_eval', 'datasets')])")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_lm_eval_the_door_says_how_to_install_it():
    check = ("import sys; sys.modules['lm_eval'] = None\n"
             "try:\n    import glassformer.lm_eval\n"
             "except Exception as error:\n    print(type(error).__name__, error)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=60)
    assert done.stdout.startswith("GlassformerError lm-eval is not installed: "
                                  'pip install -e ".[eval]"')
