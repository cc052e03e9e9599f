"""SmolLM2-135M-Instruct (Q4_1 GGUF): logits vs transformers loading the same file, greedy text,
and the chat command. Slow: loading the 135M model takes several seconds per library."""
import numpy as np
import pytest

from glassformer.cli import main
from glassformer.generate.generate import generate

pytestmark = pytest.mark.slow

# Same float32 weights; the two libraries sum in different orders over 30 layers: logits of
# magnitude ~30 agree to ~1e-4, well inside the 1e-3.
LOGITS_TOLERANCE = 1e-3
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ",
           "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
           "Le chat dort. 猫在睡觉。 🙂"]


def test_logits_match_transformers(smollm2, smollm2_path):
    torch = pytest.importorskip("torch", reason="the reference needs torch")
    transformers = pytest.importorskip("transformers", reason="the reference is transformers")
    pytest.importorskip("accelerate", reason="transformers' GGUF loading needs accelerate")
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_path.parent), gguf_file=smollm2_path.name, dtype=torch.float32).eval()
    for prompt in PROMPTS:
        ids = smollm2.tokenizer.encode(prompt)
        ours = smollm2(np.array([ids]))
        with torch.no_grad():
            theirs = reference(torch.tensor([ids])).logits.numpy()
        assert ours.shape == theirs.shape == (1, len(ids), 49152)
        assert np.abs(ours - theirs).max() <= LOGITS_TOLERANCE, prompt


def test_greedy_continuation_says_paris(smollm2):
    ids = np.array([smollm2.tokenizer.encode("The capital of France is")])
    new = [int(step[0]) for step in generate(smollm2, ids, max_new_tokens=8, temperature=0.0)]
    assert "Paris" in smollm2.tokenizer.decode(new)


def test_chat_command_answers(capsys):
    argv = ["chat", "--model", "smollm2", "--message", "What is the capital of France?",
            "--temperature", "0", "--max-new-tokens", "24"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Paris" in out
    assert "<|im_end|>" not in out and "<|im_start|>" not in out


def test_chat_session_is_multi_turn(smollm2):
    from glassformer.generate.chat import ChatSession
    from glassformer.generate.templates import chat_prompt_ids, chat_template_of

    template = chat_template_of(smollm2.tokenizer)
    session = ChatSession(smollm2, template)
    first = "".join(step.text for step in session.send(
        "Name a colour.", temperature=0.0, max_new_tokens=6))
    second = "".join(step.text for step in session.send(
        "Another one?", temperature=0.0, max_new_tokens=6))
    assert [m["role"] for m in session.messages] == ["user", "assistant"] * 2
    assert session.messages[1]["content"] == first and session.messages[3]["content"] == second
    # The second reply continues the whole conversation, first exchange included.
    prompt = chat_prompt_ids(smollm2.tokenizer, template, session.messages[:3])
    end_ids = set(smollm2.tokenizer.special_tokens.values())
    expected = []
    for step in generate(smollm2, np.array([prompt]), max_new_tokens=6, temperature=0.0):
        if int(step[0]) in end_ids:
            break
        expected.append(int(step[0]))
    assert second == smollm2.tokenizer.decode(expected)
