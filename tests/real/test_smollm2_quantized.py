"""SmolLM2's own Q4_1 file loaded with its matrices kept quantized (the default) against the same
file widened to float32 (dequantize=True): the same weights, so the logits agree to float32
rounding of a different BLAS blocking (1e-5 of the largest logit over 30 layers), greedy tokens
are equal, and the weights take about the file's size in memory, not 6x. Slow: two 135M models.
With llama-cpp-python installed (a benchmark dependency), a file `glassformer quantize` writes
loads in llama.cpp and its greedy tokens are glassformer's on the same file."""
import numpy as np
import pytest

from glassformer.generate.generate import generate
from glassformer.io.pretrained import load_pretrained
from glassformer.ops.quant import QuantizedMatrix

pytestmark = pytest.mark.slow

LOGITS_RTOL = 1e-5
PROMPT = "The capital of France is"
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def widened(smollm2_path):
    return load_pretrained(smollm2_path, dequantize=True)


def greedy(model, ids, n=NEW_TOKENS):
    steps = generate(model, np.array([ids]), max_new_tokens=n, temperature=0.0)
    return [int(t[0]) for t in steps]


def test_quantized_logits_equal_the_widened_files(smollm2, widened, smollm2_path):
    assert isinstance(smollm2.params["blocks.0.attn.wq"], QuantizedMatrix)
    assert smollm2.params["blocks.0.mlp.w_down"].kind == "q4_1"
    assert smollm2.params["tok_emb"].kind == "q8_0"              # the tied head reads it too
    held = sum(v.nbytes for v in smollm2.params.values())
    assert held < 1.05 * smollm2_path.stat().st_size              # about the file, not 6x
    ids = np.array([smollm2.tokenizer.encode("Quantized weights stay in their blocks: " * 3)])
    got, want = smollm2(ids), widened(ids)
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"SmolLM2 Q4_1 kept quantized vs widened: logits rel err {err:.2e}")
    assert err <= LOGITS_RTOL
    ids = smollm2.tokenizer.encode(PROMPT)
    assert greedy(smollm2, ids) == greedy(widened, ids)


def test_llama_cpp_reads_what_quantize_writes(smollm2_path, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python")
    from glassformer.io.gguf_write import quantize_gguf

    out = tmp_path / "smollm2.q8_0.gguf"
    quantize_gguf(smollm2_path, "q8_0", out)
    ours = load_pretrained(out)
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=64, n_threads=2, logits_all=True,
                          verbose=False)
    ids = llm.tokenize(PROMPT.encode(), add_bos=False)
    assert ids == list(ours.tokenizer.encode(PROMPT))
    llm.eval(ids)
    theirs = []
    for _ in range(NEW_TOKENS):                    # greedy: the argmax of the last logits
        theirs.append(int(np.argmax(llm.eval_logits[-1])))
        llm.eval([theirs[-1]])
    assert greedy(ours, ids) == theirs
