"""A 3-turn chat on a Qwen3.5-shaped model (Gated DeltaNet + full attention) reads each earlier
turn once: the live state continues where the template re-renders nothing (ChatML), and a turn
checkpoint of the state is restored where it re-renders the reply differently (Qwen3.5's template
drops the empty think block from earlier turns). Every reply equals a fresh session's, which
prefills the whole conversation from its first token. The same for a LLaMA-shaped model (its KV
cache is simply cut back). Qwen3.5's own templates (think and nothink) come from TRL, a test
dependency, and a short copy of the nothink layout stands in where it is missing. Random models,
a byte-level tokenizer: no downloads."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from glassformer.cli.chat import turn_stats
from glassformer.models import llama, qwen3_5, qwen3_next
from glassformer.models.model import Model
from glassformer.tasks.chat import ChatSession
from glassformer.tasks.chat_checkpoints import MAX_CHECKPOINTS, turn_boundary
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import ChatTemplate

SPECIALS = {"<|im_start|>": 128, "<|im_end|>": 129, "<|endoftext|>": 130, "<think>": 131,
            "</think>": 132}
CHATML = ChatTemplate(
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}", {})
QWEN35 = ChatTemplate(   # Qwen3.5's layout with thinking off: earlier replies lose their think
    "{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' + message['content'].split('</think>')[-1].lstrip('\n') }}"
    "{{ '<|im_end|>\n' }}{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' }}"
    "{% endif %}", {})
THINK_IDS = 6         # <think> \n \n </think> \n \n: the generation prompt's part not shared
TRL = importlib.util.find_spec("trl")   # a test dependency; it ships Qwen3.5's own templates
TRL_TEMPLATES = Path(TRL.origin if TRL else ".").parent / "chat_templates"


def trl_template(name: str):
    """Qwen3.5's own template (nothink: <think>\n\n</think>\n\n opens the reply; think:
    <think>\n), or a skip where TRL is not installed."""
    path = TRL_TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"TRL's {name} is not installed")
    return ChatTemplate(path.read_text(encoding="utf-8"), {})


TEMPLATES = {"qwen35": lambda: QWEN35, "chatml": lambda: CHATML,
             "qwen3_5_nothink": lambda: trl_template("qwen3_5_nothink.jinja"),
             "qwen3_5_think": lambda: trl_template("qwen3_5_think.jinja")}
UNSHARED = {"qwen35": THINK_IDS, "qwen3_5_nothink": THINK_IDS, "qwen3_5_think": 2}  # <think> \n
GREEDY = dict(temperature=0.0, max_new_tokens=10)
MESSAGES = ("Read this: the cat sat on the mat.", "Where did it sit?", "And the dog?")


def sharpened(params: dict) -> dict:
    """Matrices scaled up from init, so greedy choices are not near-ties."""
    return {k: (v * 4.0).astype(np.float32) if v.ndim == 2 else v for k, v in params.items()}


def tokenizer():
    """One token per ASCII byte: a reply's text tokenizes back to the ids generated."""
    return BPETokenizer({bytes([b]): b for b in range(128)}, [], special_tokens=SPECIALS)


@pytest.fixture(scope="module")
def hybrid():
    cfg = qwen3_5.Qwen35Config(vocab_size=133, max_seq_len=512, n_layer=4, full_layers=(3,),
                               chunk_size=16)
    return Model(cfg, sharpened(qwen3_next.init_params(cfg, np.random.default_rng(0))),
                 tokenizer())


@pytest.fixture(scope="module")
def dense():
    cfg = llama.LlamaConfig(vocab_size=133, max_seq_len=512, n_layer=2, n_head=4,
                            n_kv_head=2, d_model=32)
    return Model(cfg, sharpened(llama.init_params(cfg, np.random.default_rng(0))), tokenizer())


def say(session: ChatSession, text: str) -> str:
    return "".join(step.text for step in session.send(text, **GREEDY))


def fresh_reply(model, template, history: list[dict], text: str) -> tuple[str, int]:
    """The reply of a new session that prefills the whole conversation, and how many ids it
    prefilled."""
    fresh = ChatSession(model, template, list(history))
    return say(fresh, text), fresh.turns[0].prefilled_tokens


@pytest.mark.parametrize("which, name, source", [
    ("hybrid", "qwen35", "checkpoint"), ("hybrid", "qwen3_5_nothink", "checkpoint"),
    ("hybrid", "qwen3_5_think", "checkpoint"), ("hybrid", "chatml", "cache"),
    ("dense", "chatml", "cache"), ("dense", "qwen3_5_nothink", "cache")])
def test_three_turns_read_each_earlier_turn_once(which, name, source, request):
    model = request.getfixturevalue(which)
    template = TEMPLATES[name]()
    session = ChatSession(model, template)
    left = []          # per turn: its prompt, and how many ids it left in the cache
    for k, text in enumerate(MESSAGES):
        history = list(session.messages)
        reply = say(session, text)
        want, fresh_prefilled = fresh_reply(model, template, history, text)
        assert reply == want and reply                              # a fresh session's reply
        turn = session.turns[-1]
        prompt = session.prompt_ids(history + [{"role": "user", "content": text}])
        assert turn.prompt_tokens == len(prompt) == fresh_prefilled
        if k == 0:
            assert (turn.reused_tokens, turn.reused_from) == (0, "none")
        elif name == "chatml":    # the live cache: the last prompt and reply, all of them
            assert turn.reused_from == "cache"
            assert turn.reused_tokens == left[-1][1]
        else:                     # up to the last turn's boundary: a checkpoint of the state,
            assert turn.reused_from == source                # or the KV cache cut back there
            assert turn.reused_tokens == len(left[-1][0]) - UNSHARED[name]
        assert turn.prefilled_tokens == turn.prompt_tokens - turn.reused_tokens
        assert prompt[:turn.reused_tokens] == session.cached_ids[:turn.reused_tokens]
        held = len(session.cached_ids)                       # the prompt, then the reply
        assert session.kv_cache.length in (held, held - 1)   # a reply cut at max_new_tokens:
        left.append((prompt, session.kv_cache.length))      # its last id was never fed
        line = turn_stats(turn)
        assert f"[prefill: {turn.prefilled_tokens} tokens ({turn.reused_tokens} reused" in line
        assert ("a turn checkpoint" in line) == (turn.reused_from == "checkpoint")
    # over the chat, each id of the last prompt was read once: a reply as it was decoded where
    # the template renders it as written, once prefilled where it re-renders it (plus the
    # generation prompt's think block, which later turns do not share); never a user's twice
    total = sum(t.prefilled_tokens for t in session.turns)
    replies = sum(held - len(prompt) for prompt, held in left[:-1])
    last = len(left[-1][0])
    if name == "chatml":
        assert total == last - replies
    else:
        assert total == last + (len(MESSAGES) - 1) * UNSHARED[name]
    if which == "hybrid":
        assert 0 < session.checkpoints.nbytes() <= MAX_CHECKPOINTS * session.kv_cache.nbytes()
        assert all(t.checkpoint_bytes > 0 for t in session.turns)


def test_a_regenerated_reply_restores_the_turn_checkpoint(hybrid):
    """Cut back past the live state (the last reply dropped and asked again): the state goes
    back to the last turn boundary and only the new generation prompt is read."""
    session = ChatSession(hybrid, CHATML)
    say(session, MESSAGES[0])
    first = say(session, MESSAGES[1])
    session.messages = session.messages[:-2]                 # forget the last exchange
    again = say(session, MESSAGES[1])
    turn = session.turns[-1]
    assert again == first
    assert turn.reused_from == "checkpoint"
    assert turn.prefilled_tokens == 1                         # the last prompt id, for logits
    other = say(session, "Something else entirely.")         # the live state again
    assert session.turns[-1].reused_from == "cache"
    assert other == fresh_reply(hybrid, CHATML, session.messages[:-2],
                                "Something else entirely.")[0]


def test_edited_first_message_starts_over(hybrid):
    """Nothing shared but the template's opening: no checkpoint is that short, so the state
    starts over and the reply is still a fresh session's."""
    session = ChatSession(hybrid, QWEN35)
    say(session, MESSAGES[0])
    session.messages = []
    reply = say(session, "Quite another opening line.")
    turn = session.turns[-1]
    assert (turn.reused_tokens, turn.reused_from) == (0, "none")
    assert reply == fresh_reply(hybrid, QWEN35, [], "Quite another opening line.")[0]


def test_turn_boundary_is_where_the_next_turn_stops_sharing(hybrid):
    session = ChatSession(hybrid, QWEN35)
    messages = [{"role": "user", "content": "hi"}]
    prompt = session.prompt_ids(messages)
    assert turn_boundary(hybrid.tokenizer, QWEN35, messages, prompt) == len(prompt) - THINK_IDS
    chatml = ChatSession(hybrid, CHATML).prompt_ids(messages)
    assert turn_boundary(hybrid.tokenizer, CHATML, messages, chatml) == len(chatml)
