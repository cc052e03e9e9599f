"""SmolLM2's byte-level BPE, read from its GGUF metadata: identical ids to transformers' tokenizer
loaded from the same GGUF file (`AutoTokenizer.from_pretrained(dir, gguf_file=name)`).

subtle: SmolLM2 cuts every digit out before the GPT-2 regex runs (its tokenizer.json has
Digits(individual_digits) then ByteLevel; llama.cpp's "smollm" pre-tokenizer does the same), but
transformers 5.x's GGUF conversion has no entry for "smollm" and falls back to plain GPT-2
splitting. So we check two things, both on the whole corpus:
  1. glassformer with the gpt2 pattern == transformers' GGUF tokenizer exactly as it loads;
  2. glassformer as loaded ("smollm") == the same transformers tokenizer with SmolLM2's
     published pre-tokenizer put back.
The two references disagree where isolating digits changes the pieces BPE sees, e.g. a digit
after a run of spaces: "a  1" is a, Ġ, Ġ, 1 in transformers but a, ĠĠ, 1 in SmolLM2.
"""
import copy

import pytest

from glassformer import load_tokenizer

transformers = pytest.importorskip("transformers")
hf_tokenizers = pytest.importorskip("tokenizers")

CHAT_LINES = ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
              "<|endoftext|><repo_name>glassformer<file_sep>x = 1", "a  1 b   22 c\t3"]


@pytest.fixture(scope="module")
def hf_smollm2(smollm2_gguf):
    return transformers.AutoTokenizer.from_pretrained(str(smollm2_gguf.parent),
                                                      gguf_file=smollm2_gguf.name)


@pytest.fixture(scope="module")
def hf_smollm2_published(hf_smollm2):
    """A copy of the transformers GGUF tokenizer with SmolLM2's own pre-tokenizer (digits isolated)."""
    reference = copy.deepcopy(hf_smollm2)
    pre = hf_tokenizers.pre_tokenizers
    reference.backend_tokenizer.pre_tokenizer = pre.Sequence(
        [pre.Digits(individual_digits=True), pre.ByteLevel(add_prefix_space=False)])
    return reference


@pytest.mark.slow
def test_gpt2_pattern_matches_transformers_gguf_tokenizer(smollm2_gguf, hf_smollm2, parity_corpus):
    tok = load_tokenizer(smollm2_gguf, pattern="gpt2")
    lines = parity_corpus + CHAT_LINES
    expected = hf_smollm2(lines)["input_ids"]
    mismatches = [line for line, ids in zip(lines, expected)
                  if tok.encode(line, allowed_special="all") != ids]
    assert mismatches == []


@pytest.mark.slow
def test_smollm_pattern_matches_published_pretokenizer(smollm2, hf_smollm2_published, parity_corpus):
    assert smollm2.pretokenizer.name == "smollm"
    lines = parity_corpus + CHAT_LINES
    expected = hf_smollm2_published(lines)["input_ids"]
    mismatches = [line for line, ids in zip(lines, expected)
                  if smollm2.encode(line, allowed_special="all") != ids]
    assert mismatches == []


@pytest.mark.slow
def test_special_tokens_typed_in_text_match_split_special_tokens(smollm2, hf_smollm2_published):
    expected = hf_smollm2_published(CHAT_LINES, split_special_tokens=True)["input_ids"]
    assert [smollm2.encode(line) for line in CHAT_LINES] == expected
    control = set(smollm2.special_tokens.values())
    assert not control & {token_id for line in CHAT_LINES for token_id in smollm2.encode(line)}


@pytest.mark.slow
def test_the_two_references_differ_on_digits(hf_smollm2, hf_smollm2_published):
    for line in ["a  1", "a   22 c"]:
        assert hf_smollm2(line)["input_ids"] != hf_smollm2_published(line)["input_ids"]


@pytest.mark.slow
def test_decode_round_trips_and_matches(smollm2, hf_smollm2, parity_corpus):
    for line in parity_corpus[::3] + CHAT_LINES:
        ids = smollm2.encode(line)
        assert smollm2.decode(ids) == line
        assert hf_smollm2.decode(ids) == line


@pytest.mark.slow
def test_gguf_metadata_is_read_fully(smollm2):
    assert smollm2.vocab_size == 49152
    assert len(smollm2.merges) == 48900
    assert smollm2.special_tokens["<|im_start|>"] == 1
    assert len(smollm2.special_tokens) == 17  # the tokens typed CONTROL in the file
