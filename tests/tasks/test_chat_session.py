"""ChatSession keeps its KV cache between turns: the second turn prefills only what is new, gives
a fresh session's reply, drops the oldest exchanges when the context is full, and keeps a reply
cut short. A tiny random LLaMA with a byte-level tokenizer and ChatML specials (no downloads)."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tasks.chat import ChatSession, common_prefix, oldest_exchange
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import ChatTemplate

SPECIALS = {"<|im_start|>": 128, "<|im_end|>": 129, "<|endoftext|>": 130}
FMT = ChatTemplate(   # ChatML with a default system prompt, as SmolLM2's template writes it
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a test.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}", {})
GREEDY = dict(temperature=0.0, max_new_tokens=12)


def tiny_chat_model(max_seq_len: int) -> Model:
    """One token per ASCII byte (no merges): a message of N characters is N tokens, and every
    reply is ASCII text that tokenizes back to the ids generated."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(128)}, [], special_tokens=SPECIALS)
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=max_seq_len, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=32)
    params = llama.init_params(cfg, np.random.default_rng(0))
    for key in params:  # sharper than init, so greedy choices are not near-ties
        if params[key].ndim == 2:
            params[key] = (params[key] * 6.0).astype(np.float32)
    return Model(cfg, params, tokenizer)


def say(session: ChatSession, text: str) -> str:
    return "".join(step.text for step in session.send(text, **GREEDY))


@pytest.fixture(scope="module")
def model():
    return tiny_chat_model(max_seq_len=1024)


def test_second_turn_prefills_only_the_new_part(model):
    session = ChatSession(model, FMT)
    say(session, "Read this. " + "lorem ipsum dolor " * 32)        # a ~600-token first turn
    first = session.turns[0]
    assert first.prompt_tokens > 600 and first.reused_tokens == 0
    second_reply = say(session, "Now answer.")
    fresh = ChatSession(model, FMT, session.messages[:2])
    fresh_reply = say(fresh, "Now answer.")
    second = session.turns[1]
    assert second.prompt_tokens == fresh.turns[0].prompt_tokens
    assert second.prefilled_tokens < fresh.turns[0].prefilled_tokens / 2
    assert second_reply == fresh_reply
    assert session.messages[-1] == {"role": "assistant", "content": fresh_reply}


def test_cached_ids_are_the_fresh_prompt_then_the_reply(model):
    session = ChatSession(model, FMT)
    say(session, "hello")
    say(session, "and again")
    prompt = session.prompt_ids(session.messages[:3])
    assert session.cached_ids[:len(prompt)] == prompt
    reply_ids = model.tokenizer.encode(session.messages[3]["content"])
    assert session.cached_ids[len(prompt):] == reply_ids
    assert session.kv_cache.length <= len(session.cached_ids)


def test_overflow_drops_oldest_exchanges_never_the_system_prompt():
    model = tiny_chat_model(max_seq_len=160)
    session = ChatSession(model, FMT, [{"role": "system", "content": "Be brief."}])
    for word in ("first message here", "second one", "third", "fourth and last!"):
        say(session, word + " " + "x" * 30)
    dropped = [turn.dropped_messages for turn in session.turns]
    assert sum(dropped) > 0 and dropped[0] == 0
    assert session.messages[0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in session.messages[1:]] == ["user", "assistant"] * (
        (len(session.messages) - 1) // 2)
    assert all(turn.prompt_tokens + GREEDY["max_new_tokens"] <= 160 for turn in session.turns)
    # the turn that dropped messages rebuilt the cache from the first id that changed:
    # the system prompt stayed cached
    overflow = dropped.index(next(d for d in dropped if d))
    assert 0 < session.turns[overflow].reused_tokens < session.turns[overflow].prompt_tokens
    # its reply equals a fresh session's over the messages it kept
    kept = session.messages[:-1]
    fresh = ChatSession(model, FMT, kept[:-1])
    assert say(fresh, kept[-1]["content"]) == session.messages[-1]["content"]


def test_a_message_longer_than_the_context_is_refused():
    session = ChatSession(tiny_chat_model(max_seq_len=64), FMT)
    with pytest.raises(GlassformerError, match="does not fit the context of 64"):
        say(session, "y" * 80)
    assert session.messages == []


def test_a_reply_cut_short_is_kept_and_the_next_turn_matches_a_fresh_session(model):
    session = ChatSession(model, FMT)
    stream = session.send("tell me a long story", temperature=0.0, max_new_tokens=40)
    shown = [next(stream).text for _ in range(3)]
    stream.close()                                             # what Ctrl-C does in the CLI
    assert session.messages[-1] == {"role": "assistant", "content": "".join(shown)}
    reply = say(session, "go on")
    fresh = ChatSession(model, FMT, session.messages[:2])
    assert say(fresh, "go on") == reply


def test_reset_keeps_the_cached_system_prompt(model):
    session = ChatSession(model, FMT, [{"role": "system", "content": "Be kind."}])
    say(session, "hi")
    first_prompt = session.prompt_ids(session.messages[:2])
    session.reset(system="Be kind.")
    assert session.messages == [{"role": "system", "content": "Be kind."}]
    say(session, "hello again")
    second_prompt = session.prompt_ids(session.messages[:2])
    shared = common_prefix(first_prompt, second_prompt)
    assert shared > len("Be kind.") and session.turns[1].reused_tokens == shared


def test_no_cache_session_prefills_everything(model):
    session = ChatSession(model, FMT)
    say(session, "one")
    reply = "".join(step.text for step in session.send("two", use_cache=False, **GREEDY))
    assert session.turns[1].reused_tokens == 0
    fresh = ChatSession(model, FMT, session.messages[:2])
    assert say(fresh, "two") == reply


def test_common_prefix_and_oldest_exchange():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    system = {"role": "system", "content": "s"}
    user, assistant = {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}
    assert oldest_exchange([system, user, assistant, user]) == 2
    assert oldest_exchange([user, assistant, assistant, user]) == 3
    assert oldest_exchange([system, user]) == 0


def test_generate_reuses_a_filled_cache(model):
    ids = np.arange(40, 80)[None, :]
    full = list(generate(model, ids, max_new_tokens=5, temperature=0.0))
    cache = model.new_cache(1)
    list(generate(model, ids[:, :30], max_new_tokens=1, temperature=0.0, kv_cache=cache))
    assert cache.length == 30
    cache.keep(25)
    reused = list(generate(model, ids, max_new_tokens=5, temperature=0.0, kv_cache=cache))
    assert [int(t[0]) for t in reused] == [int(t[0]) for t in full]
    with pytest.raises(GlassformerError, match="at least the last prompt token"):
        list(generate(model, ids[:, :10], max_new_tokens=1, kv_cache=cache))
    with pytest.raises(GlassformerError, match="use_cache=False"):
        list(generate(model, ids, max_new_tokens=1, kv_cache=cache, use_cache=False))


def test_kv_cache_keep_checks_its_range():
    cache = KVCache.allocate(KVLayout(1, 2, 2), n_layer=1, batch=1, max_len=8)
    cache.advance(5)
    cache.keep(3)
    assert cache.length == 3
    with pytest.raises(GlassformerError, match="cannot keep 4"):
        cache.keep(4)
