"""The engine's per-row constraint (response_format) on a tiny random chat model: constrained and
free rows share a batch, every constrained reply that ends is a value its schema accepts, and a
seeded constrained reply is the one `generate(..., constraint=table)` gives alone."""
import json

import jsonschema
import numpy as np
from serve_models import tiny_chat_model

from glassformer.generate.constrain import RowConstraint, json_table, vocabulary_trie
from glassformer.generate.sampling import Sampling
from glassformer.generate.stream import generated_ids
from glassformer.serve.engine import Engine
from glassformer.serve.sequence import Sequence, Settings
from test_engine import STOP, WAIT_S, Reply

POINT = {"type": "object", "properties": {
    "x": {"type": "integer", "minimum": -9, "maximum": 9},
    "tag": {"type": "string", "enum": ["a", "bb", "ccc"]},
    "name": {"type": "string", "maxLength": 5}},
    "required": ["x", "tag", "name"], "additionalProperties": False}
LIST = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}


def test_constrained_and_free_rows_share_a_batch():
    model = tiny_chat_model(max_seq_len=128)
    trie = vocabulary_trie(model.tokenizer, model.cfg.vocab_size)
    tables = {id(s): json_table(s, trie, sorted(STOP), model.tokenizer.encode)
              for s in (POINT, LIST)}
    engine = Engine(model, max_batch=4, max_queue=16, max_len=128)
    engine.start()
    plan = [(POINT, 3), (LIST, 4), (None, 5), (POINT, 6)]
    replies = []
    try:
        for schema, seed in plan:
            reply = Reply()
            settings = Settings(60, Sampling(temperature=1.0), seed)
            seq = Sequence(0, model.tokenizer.encode("json please"), settings, STOP,
                           model.tokenizer, reply)
            if schema is not None:
                seq.constraint = RowConstraint.start(tables[id(schema)])
            engine.submit([seq])
            replies.append(reply)
        assert all(reply.done.wait(WAIT_S) for reply in replies)
    finally:
        engine.stop()
    for (schema, seed), reply in zip(plan, replies):
        if schema is None:
            continue
        assert reply.finished.reason == "stop", reply.text
        jsonschema.validate(json.loads(reply.text), schema)
        alone = generated_ids(model, model.tokenizer.encode("json please"), stop_ids=STOP,
                              max_new_tokens=60, temperature=1.0, seed=seed,
                              constraint=tables[id(schema)])
        assert reply.text == model.tokenizer.decode(list(alone))
    assert np.all([r.finished is not None for r in replies])
