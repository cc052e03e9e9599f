"""GSM8K on SmolLM2-135M-Instruct, a few problems: the 8-shot conversation is the ids
transformers' apply_chat_template gives for the same messages, and each reply is text whose final
number is the one recorded (slow: a real model writes the replies)."""
import pytest

from glassformer.tasks.evaluate.generative import evaluate_generative, prompt_ids
from glassformer.tasks.evaluate.gsm8k import final_number, messages, read_problems
from glassformer.tasks.evaluate.tasks_table import TASKS
from glassformer.tokenizers.chat_template import chat_template_of

from eval_data import DATA


@pytest.mark.slow
def test_gsm8k_prompt_is_transformers_and_replies_are_scored(smollm2, smollm2_path):
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    transformers = pytest.importorskip("transformers")
    problems = read_problems(DATA / "gsm8k.jsonl")
    conversation = messages(problems, 0, 8)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(smollm2_path.parent),
                                                           gguf_file=smollm2_path.name)
    expected = tokenizer.apply_chat_template(conversation, add_generation_prompt=True,
                                             tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected   # BatchEncoding
    ours = prompt_ids(smollm2, chat_template_of(smollm2.tokenizer), conversation)
    assert ours == list(expected)
    result = evaluate_generative(smollm2, TASKS["gsm8k"], DATA, limit=2, max_new_tokens=24)
    assert result.n == 2
    for item in result.items:
        assert item["reply"].strip() and item["pred"] == final_number(item["reply"])
