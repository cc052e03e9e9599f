"""`/v1/embeddings`' request checked: its texts, their lengths against the model's, `dimensions`.

A sentence encoder reads at most `max_length` tokens ([CLS] and [SEP] included): the model's
`max_seq_length` (sentence_bert_config.json, 256 for all-MiniLM-L6-v2), never past its position
table. A longer text is refused (400, `context_length_exceeded`, naming the text and both
lengths), as OpenAI refuses it, unless the request says `"truncate": true`: then it is cut to
`max_length`, as sentence-transformers and HF's text-embeddings-inference (its `truncate`
field) cut it. A vector is never silently made of the first part of a text.

`dimensions` shortens OpenAI's text-embedding-3 vectors, which were trained for it (Matryoshka
representation learning: their first d numbers are a d-dimensional embedding). glassformer's
encoders were not, so `dimensions` is taken only when it is the model's own width and refused
otherwise, as OpenAI refuses it for text-embedding-ada-002.
"""
from __future__ import annotations

from typing import NamedTuple

from glassformer.serve.protocol import ApiError, bad, flag, integer

MAX_TEXTS = 2048       # texts per request (OpenAI's limit)


class EmbeddingRequest(NamedTuple):
    texts: list[str]
    lengths: list[int]     # each text's tokens as embedded (after truncation), specials included
    encoding: str          # "float" or "base64"
    max_length: int        # tokens a text is cut to (only when the request said truncate)


def check_texts(value) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if (not isinstance(texts, list) or not texts
            or not all(isinstance(text, str) and text for text in texts)):
        raise bad("input", "a non-empty string or a non-empty list of them", value)
    if len(texts) > MAX_TEXTS:
        raise ApiError(400, f"at most {MAX_TEXTS} texts per request, got {len(texts)}",
                       param="input")
    return texts


def check_dimensions(body: dict, width: int) -> None:
    wanted = integer(body, "dimensions", None, 1)
    if wanted is not None and wanted != width:
        raise ApiError(400, f"'dimensions' {wanted}: this model's embeddings have {width} "
                       "dimensions and it was not trained to shorten them (Matryoshka, as "
                       "text-embedding-3 is); leave 'dimensions' out", param="dimensions",
                       code="invalid_value")


def token_lengths(tokenizer, texts: list[str]) -> list[int]:
    """Each text's token count, [CLS] and [SEP] included, uncut."""
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(texts)]


def check_lengths(lengths: list[int], max_length: int, truncate: bool) -> list[int]:
    """The lengths as embedded: a text past max_length is a 400 unless truncate."""
    if truncate:
        return [min(length, max_length) for length in lengths]
    for index, length in enumerate(lengths):
        if length > max_length:
            where = "input" if len(lengths) == 1 else f"input[{index}]"
            raise ApiError(400, f"{where} is {length} tokens, past this model's {max_length} "
                           "([CLS] and [SEP] included): send a shorter text, or "
                           "'truncate': true to embed its first "
                           f"{max_length} tokens", param="input",
                           code="context_length_exceeded")
    return lengths


def embedding_request(model, body: dict, max_length: int) -> EmbeddingRequest:
    """A /v1/embeddings body checked against the model (every fault an ApiError, 400)."""
    max_length = min(max_length, model.cfg.max_seq_len)
    texts = check_texts(body.get("input"))
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise bad("encoding_format", "'float' or 'base64'", encoding)
    check_dimensions(body, model.cfg.d_model)
    lengths = check_lengths(token_lengths(model.tokenizer, texts), max_length,
                            flag(body, "truncate"))
    return EmbeddingRequest(texts, lengths, encoding, max_length)
