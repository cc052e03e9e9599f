"""LoRA on SmolLM2-135M-Instruct against transformers + peft on the same (dequantized) weights:
a peft adapter (random non-zero A and B on q_proj and v_proj) loads in glassformer with peft's
logits, and the LoRA gradients of one batch equal torch autograd's. Slow: two 135M models."""
import numpy as np
import pytest

from glassformer.io.peft import load_adapter, merge_adapters, modules
from glassformer.io.pretrained import save_pretrained
from glassformer.train.step import loss_and_grads

pytestmark = pytest.mark.slow

LOGITS_RTOL = 1e-4   # the bar, relative to the largest logit (30 layers deep)
GRAD_RTOL = 1e-4     # float32 sums over 30 layers in two orders; relative to each grad's max
TARGETS = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def folders(smollm2, tmp_path_factory):
    """SmolLM2 as an HF folder (float32), and a peft adapter on it with random A and B."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    root = tmp_path_factory.mktemp("smollm2_lora")
    save_pretrained(smollm2, root / "base")
    base = transformers.AutoModelForCausalLM.from_pretrained(root / "base",
                                                             dtype=torch.float32)
    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0,
                             init_lora_weights=False, task_type="CAUSAL_LM")
    torch.manual_seed(0)
    reference = peft.get_peft_model(base, config)
    with torch.no_grad():   # smaller adapters: the base's logits stay in a realistic range
        for name, p in reference.named_parameters():
            if "lora_" in name:
                p.mul_(0.1)
    reference.save_pretrained(root / "adapter")
    return root, reference


def test_peft_adapter_gives_peft_logits(smollm2, folders):
    import torch
    root, reference = folders
    ids = np.array([smollm2.tokenizer.encode("The capital of France is Paris, and")])
    # the module's model has the folder's weights: load_pretrained(base, adapter=...) in one read
    ours = merge_adapters(smollm2, load_adapter(root / "adapter", smollm2)[0])(ids)
    with torch.no_grad():
        theirs = reference.eval()(torch.from_numpy(ids)).logits.numpy()
    err = np.abs(ours - theirs).max() / np.abs(theirs).max()
    print(f"SmolLM2 + peft adapter: logits rel err {err:.2e}")
    assert err <= LOGITS_RTOL


def test_lora_grads_equal_torch_autograd(smollm2, folders):
    import torch
    root, reference = folders
    adapters, _ = load_adapter(root / "adapter", smollm2)
    trained = {k: v for k, v in adapters.items() if k.endswith(("lora_A", "lora_B"))}
    frozen = {**smollm2.params, **{k: v for k, v in adapters.items() if k not in trained}}
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 49152, (1, 16)), rng.integers(0, 49152, (1, 16))
    loss, grads = loss_and_grads(smollm2.family, trained, smollm2.cfg, x, y, rng=None,
                                 frozen=frozen)
    reference.train()
    reference.zero_grad()
    logits = reference(torch.from_numpy(x)).logits
    torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                   torch.from_numpy(y).reshape(-1))
    torch_loss.backward()
    assert loss == pytest.approx(torch_loss.item(), rel=1e-5)
    ours_of = {m.hf_module: m.weight for m in modules("llama", smollm2.cfg)}
    worst = 0.0
    for key, p in reference.named_parameters():
        if not p.requires_grad:
            continue
        module, part = key[len("base_model.model."):].split(".lora_")
        ours = grads[f"{ours_of[module]}.lora_{part.split('.')[0]}"]
        theirs = p.grad.numpy().T
        worst = max(worst, float(np.abs(ours - theirs).max() / np.abs(theirs).max()))
    print(f"SmolLM2 LoRA grads: worst rel err {worst:.2e}")
    assert worst <= GRAD_RTOL, worst
