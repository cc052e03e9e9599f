"""GSM8K for chat models: the final number read from a reply, the shots never the problem asked,
replies written in batches with a shared cached prefix equal to each prompt written alone from
scratch, and `glassformer eval --task gsm8k` with its results file (a tiny random chat model)."""
import json

import numpy as np
import pytest

import glassformer.cli.eval_tasks as eval_tasks
from eval_fixtures import DATA
from glassformer.cli import main
from glassformer.generate.generate import generate
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tasks.evaluate.generative import evaluate_generative, prompt_ids
from glassformer.tasks.evaluate.gsm8k import (as_number, final_number, is_right, messages,
                                              read_problems, shot_indices)
from glassformer.tasks.evaluate.tasks_table import TASKS
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import chat_template_of

SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}


def tiny_chat_model() -> Model:
    """A byte-level tokenizer with ChatML's tokens (so ChatML is its template) and a random
    LLaMA: fast, no downloads."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=4096, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=32)
    params = llama.init_params(cfg, np.random.default_rng(0))
    for key in params:   # sharper than init, so greedy choices are not near-ties
        if params[key].ndim == 2:
            params[key] = params[key] * 6.0
    return Model(cfg, {k: v.astype(np.float32) for k, v in params.items()}, tokenizer)


@pytest.fixture(scope="module")
def chat_model():
    return tiny_chat_model()


@pytest.mark.parametrize("reply,number", [
    ("3 + 4 = 7 eggs.\n#### 7", "7"), ("#### 1,600\nthen 5 more", "1,600"),
    ("She pays $12.50 and then $3.", "3"), ("no idea", None), ("#### -4", "-4")])
def test_the_final_number_is_after_the_marks_else_the_last(reply, number):
    assert final_number(reply) == number


def test_answers_are_compared_as_numbers():
    assert as_number("1,600") == as_number("$1600.00") == as_number("1600.")
    assert is_right("1,600", "1600") and not is_right("160", "1600") and not is_right(None, "0")


def test_shots_are_shared_and_never_the_problem_itself():
    problems = read_problems(DATA / "gsm8k.jsonl")
    drawn = shot_indices(0, len(problems), 8)
    for index in [0, *drawn, 500]:
        chosen = shot_indices(index, len(problems), 8)
        assert len(chosen) == 8 and index not in chosen
    assert shot_indices(500, len(problems), 8) == shot_indices(501, len(problems), 8)
    turns = messages(problems, 500, 2)
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user"]
    assert turns[1]["content"].endswith("\n#### " + problems[drawn[0]].answer)


def test_batched_replies_equal_each_prompt_written_alone(chat_model):
    spec = TASKS["gsm8k"]
    problems = read_problems(DATA / "gsm8k.jsonl")
    shots = 1
    batched = evaluate_generative(chat_model, spec, DATA, limit=5, shots=shots,
                                  max_new_tokens=6, rows=3)
    template = chat_template_of(chat_model.tokenizer)
    for index, record in enumerate(batched.items):
        ids = prompt_ids(chat_model, template, messages(problems, index, shots))
        alone = []
        for token in generate(chat_model, np.asarray(ids), max_new_tokens=6, temperature=0.0,
                              stop=[257, 258]):
            if int(token[0]) in (257, 258):
                break
            alone.append(int(token[0]))
        assert record["reply"] == chat_model.tokenizer.decode(alone)
        assert record["line"] == index + 1 and record["gold"] == problems[index].answer
    assert batched.n == 5 and batched.acc == 0.0 and batched.tokens > 0


def test_eval_task_gsm8k_writes_every_reply(chat_model, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(eval_tasks, "load_model_shown",
                        lambda name, adapter=None, *rest: chat_model)
    out = tmp_path / "gsm8k.json"
    argv = ["eval", "--model", "tiny", "--task", "gsm8k", "--data-dir", str(DATA), "--limit",
            "2", "--shots", "1", "--max-new-tokens", "4", "--out", str(out), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"]["gsm8k"]["n"] == 2 and summary["core"]["name"] is None
    items = json.loads(out.read_text())["tasks"]["gsm8k"]["items"]
    assert len(items) == 2 and all(isinstance(item["reply"], str) for item in items)


def test_a_model_without_a_chat_template_is_refused_in_one_line(monkeypatch, capsys):
    from eval_fixtures import tiny_model
    monkeypatch.setattr(eval_tasks, "load_model_shown",
                        lambda name, adapter=None, *rest: tiny_model())
    argv = ["eval", "--model", "tiny", "--task", "gsm8k", "--data-dir", str(DATA), "--limit", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "no chat template" in err and len(err.splitlines()) == 1


def test_a_bad_gsm8k_line_names_file_and_line(tmp_path, capsys):
    (tmp_path / "gsm8k.jsonl").write_text('{"context": "q", "chain_of_thought": "c", '
                                          '"answer": "seven"}\n')
    argv = ["eval", "--model", "x", "--task", "gsm8k", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "gsm8k.jsonl line 1: answer must be a number" in err and len(err.splitlines()) == 1


def test_an_adapter_is_merged_before_the_problems_are_answered(chat_model, tmp_path, capsys):
    from glassformer.io.peft import LoraConfig, init_adapters, save_adapter
    from glassformer.io.pretrained import load_pretrained, save_pretrained
    save_pretrained(chat_model, tmp_path / "base")
    lora_cfg = LoraConfig(r=2, alpha=4.0, targets=("q_proj", "v_proj", "down_proj"))
    rng = np.random.default_rng(1)
    adapters = {k: rng.standard_normal(v.shape).astype(np.float32)   # non-zero A and B
                for k, v in init_adapters(chat_model, lora_cfg, rng).items()}
    save_adapter(tmp_path / "adapter", chat_model, adapters, lora_cfg)
    out = tmp_path / "r.json"
    assert main(["eval", "--model", str(tmp_path / "base"), "--adapter", str(tmp_path / "adapter"),
                 "--task", "gsm8k", "--data-dir", str(DATA), "--limit", "2", "--shots", "1",
                 "--max-new-tokens", "4", "--out", str(out), "--json"]) == 0
    record = json.loads(out.read_text())
    assert record["adapter"] == str(tmp_path / "adapter")
    merged = load_pretrained(tmp_path / "base", adapter=tmp_path / "adapter")
    expected = evaluate_generative(merged, TASKS["gsm8k"], DATA, limit=2, shots=1,
                                   max_new_tokens=4)
    assert [item["reply"] for item in record["tasks"]["gsm8k"]["items"]] == \
        [item["reply"] for item in expected.items]
