"""Reading and writing the parts of Hugging Face's `tokenizer.json` that our tokenizers use.

A `tokenizer.json` (the `tokenizers` library's format) holds one pipeline:

    normalizer -> pre_tokenizer -> model (BPE / WordPiece + vocab) -> post_processor -> decoder
    plus "added_tokens": the special tokens, matched whole before anything else runs

Only the shapes real byte-level BPE and BERT files use are accepted; anything else is an error
naming the part we do not support, never a silent approximation. This module knows nothing about
the tokenizer classes: it turns layouts into plain values and plain values into layouts.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.tokenizers.pretokenize import GPT2_PATTERN

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
              "use_regex": True}
DIGITS = {"type": "Digits", "individual_digits": True}


def read_added_tokens(layout: dict) -> dict[str, int]:
    """The special tokens ("special": true) of `added_tokens`: content -> id."""
    return {entry["content"]: entry["id"] for entry in layout.get("added_tokens") or []
            if entry.get("special", False)}


def write_added_tokens(special_tokens: dict[str, int]) -> list[dict]:
    return [{"id": token_id, "content": token, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
            for token, token_id in sorted(special_tokens.items(), key=lambda item: item[1])]


# --- byte-level BPE ---------------------------------------------------------------------------

def read_byte_level_pretokenizer(spec: dict | None, source: str) -> tuple[str, bool]:
    """(regex pattern, split_digits) from a pre_tokenizer layout, or GlassformerError.

    Accepted: ByteLevel(use_regex) alone (GPT-2); Digits(individual) then ByteLevel (SmolLM);
    Split(Regex, Isolated) then ByteLevel(use_regex=False) (LLaMA-3 and others).
    """
    steps = spec.get("pretokenizers", []) if spec and spec.get("type") == "Sequence" else [spec]
    kinds = [step.get("type") if step else None for step in steps]
    last = steps[-1] if steps else None
    if not last or last.get("type") != "ByteLevel" or last.get("add_prefix_space", False):
        raise GlassformerError(f"{source}: unsupported pre_tokenizer {kinds}: byte-level BPE needs "
                               "a final ByteLevel step with add_prefix_space false")
    if kinds == ["ByteLevel"] and last.get("use_regex", True):
        return GPT2_PATTERN, False
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") \
            and last.get("use_regex", True):
        return GPT2_PATTERN, True
    if kinds == ["Split", "ByteLevel"] and not last.get("use_regex", True):
        split = steps[0]
        pattern = split.get("pattern", {}).get("Regex")
        if pattern and split.get("behavior") == "Isolated" and not split.get("invert", False):
            return pattern, False
    raise GlassformerError(f"{source}: unsupported pre_tokenizer sequence {kinds}")


def write_byte_level_pretokenizer(pattern: str, split_digits: bool) -> dict:
    if pattern == GPT2_PATTERN and not split_digits:
        return dict(BYTE_LEVEL)
    if pattern == GPT2_PATTERN:
        return {"type": "Sequence", "pretokenizers": [dict(DIGITS), dict(BYTE_LEVEL)]}
    if split_digits:
        raise GlassformerError("cannot write a custom pattern with split_digits to tokenizer.json")
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    return {"type": "Sequence", "pretokenizers": [split, dict(BYTE_LEVEL, use_regex=False)]}


def read_bpe_model(layout: dict, source: str) -> tuple[dict[str, int], list[tuple[str, str]], bool]:
    """(spelled vocab, spelled merge pairs in rank order, ignore_merges) of a BPE model layout."""
    model = layout.get("model") or {}
    if model.get("type") != "BPE":
        raise GlassformerError(f"{source}: model type {model.get('type')!r} is not BPE")
    if layout.get("normalizer"):
        raise GlassformerError(f"{source}: unsupported normalizer {layout['normalizer'].get('type')!r}"
                               " for byte-level BPE")
    if model.get("byte_fallback") or model.get("continuing_subword_prefix") \
            or model.get("end_of_word_suffix"):
        raise GlassformerError(f"{source}: only plain byte-level BPE models are supported "
                               "(no byte_fallback, subword prefix or word suffix)")
    if "merges" not in model:
        raise GlassformerError(f"{source}: BPE model has no merges")
    merges = []
    for rank, entry in enumerate(model["merges"]):
        # Older files write a merge as "a b"; newer ones as ["a", "b"].
        pair = entry.split(" ") if isinstance(entry, str) else list(entry)
        if len(pair) != 2:
            raise GlassformerError(f"{source}: merge {rank} {entry!r} is not a pair of tokens")
        merges.append((pair[0], pair[1]))
    return dict(model.get("vocab") or {}), merges, bool(model.get("ignore_merges", False))


def bpe_layout(vocab: dict[str, int], merges: list[tuple[str, str]], pattern: str,
               split_digits: bool, special_tokens: dict[str, int]) -> dict:
    """A complete tokenizer.json layout for a byte-level BPE (spelled tokens, as in vocab.json)."""
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False, "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": write_added_tokens(special_tokens), "normalizer": None,
            "pre_tokenizer": write_byte_level_pretokenizer(pattern, split_digits),
            "post_processor": None, "decoder": dict(BYTE_LEVEL), "model": model}


# --- WordPiece --------------------------------------------------------------------------------

def read_wordpiece_model(layout: dict, source: str) -> dict:
    """Keyword arguments for WordPieceTokenizer from a BERT tokenizer.json layout."""
    model = layout.get("model") or {}
    if model.get("type") != "WordPiece":
        raise GlassformerError(f"{source}: model type {model.get('type')!r} is not WordPiece")
    normalizer = layout.get("normalizer") or {}
    if normalizer and normalizer.get("type") != "BertNormalizer":
        raise GlassformerError(f"{source}: unsupported normalizer {normalizer.get('type')!r}")
    pre = layout.get("pre_tokenizer") or {}
    if pre.get("type") != "BertPreTokenizer":
        raise GlassformerError(f"{source}: unsupported pre_tokenizer {pre.get('type')!r}")
    lowercase = normalizer.get("lowercase", True)
    strip_accents = normalizer.get("strip_accents")
    return {"vocab": dict(model["vocab"]), "unk_token": model.get("unk_token", "[UNK]"),
            "max_chars_per_word": model.get("max_input_chars_per_word", 100),
            "prefix": model.get("continuing_subword_prefix", "##"),
            "lowercase": lowercase,
            "strip_accents": lowercase if strip_accents is None else strip_accents,
            "clean_text": normalizer.get("clean_text", True),
            "split_chinese": normalizer.get("handle_chinese_chars", True)}


def wordpiece_layout(vocab: dict[str, int], *, unk_token: str, prefix: str,
                     max_chars_per_word: int, lowercase: bool, strip_accents: bool,
                     clean_text: bool, split_chinese: bool, special_tokens: dict[str, int],
                     cls_token: str, sep_token: str) -> dict:
    """A tokenizer.json layout for a BERT WordPiece tokenizer, [CLS] A [SEP] (B [SEP])."""
    cls_id, sep_id = vocab[cls_token], vocab[sep_token]
    single = [{"SpecialToken": {"id": cls_token, "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": sep_token, "type_id": 0}}]
    pair = single + [{"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": sep_token, "type_id": 1}}]
    post = {"type": "TemplateProcessing", "single": single, "pair": pair,
            "special_tokens": {cls_token: {"id": cls_token, "ids": [cls_id], "tokens": [cls_token]},
                               sep_token: {"id": sep_token, "ids": [sep_id], "tokens": [sep_token]}}}
    normalizer = {"type": "BertNormalizer", "clean_text": clean_text,
                  "handle_chinese_chars": split_chinese, "strip_accents": strip_accents,
                  "lowercase": lowercase}
    model = {"type": "WordPiece", "unk_token": unk_token, "continuing_subword_prefix": prefix,
             "max_input_chars_per_word": max_chars_per_word, "vocab": vocab}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": write_added_tokens(special_tokens), "normalizer": normalizer,
            "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": post,
            "decoder": {"type": "WordPiece", "prefix": prefix, "cleanup": True}, "model": model}
