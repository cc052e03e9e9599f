"""The records io/ keeps per Hugging Face family, and the rows their rename tables are made of.

Each family file (io/hf/gpt2.py, llama.py, bert.py, seq2seq.py) ends with one `FAMILY =
HFFamily(...)`; generic code (io/hf_config.py, io/hf_names.py, io/pretrained.py, io/peft.py)
asks these records, never an arch's name.

    ModelType    one config.json model_type: the keys it reads, the switch values it requires,
                 and its from_hf (config.json -> the family's config)
    FamilyNames  the family's tensor rename table: Rename / Split / Squeeze rows
    HFFamily     one glassformer arch: its model_types, its names, its to_hf (config -> the
                 config.json of the model_type that fits) and how its HF folders are laid out

A rename row pairs a glassformer name with an HF key ("{i}" stands for the layer index) and says
whether to transpose: torch's nn.Linear stores W as (out, in), glassformer as (in, out).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

# Three spellings of tanh GELU in config.json files (GPT-2's activation_function, BERT's
# hidden_act); "gelu" is the exact erf GELU.
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


class Rename(NamedTuple):
    ours: str            # glassformer name, "{i}" for the layer index
    theirs: str          # HF key without the base-model prefix, same "{i}"
    transpose: bool      # nn.Linear (out, in) <-> glassformer (in, out)


class Split(NamedTuple):
    ours: tuple[str, ...]  # glassformer names of the equal parts, in order
    theirs: str            # one HF tensor holding the parts side by side on its last axis
    interleaved: bool = False  # the parts alternate along that axis instead (gpt-oss's
                               # gate_up_proj: gate, up, gate, up, ...)


class Stack(NamedTuple):
    ours: str            # glassformer name of an (E, ...) array, one slice per expert
    theirs: str          # HF key of expert e's tensor, "{e}" for the expert index (and "{i}")
    transpose: bool      # each slice as Rename's transpose


class Convert(NamedTuple):
    """Tensors that are not a rename: HF's joined or interleaved layout, or a stored offset
    (Qwen3-Next's per-head interleaved projections, its zero-centred norms). Its three functions
    are written once, beside the table that uses them (io/hf/qwen3_next.py)."""
    ours: tuple[str, ...]    # glassformer names ("{i}" rows: layer-local)
    theirs: tuple[str, ...]  # HF keys, "{i}" for the layer index
    load: Callable           # (cfg, *HF tensors) -> our arrays, in `ours` order
    save: Callable           # (cfg, *our arrays) -> HF tensors, in `theirs` order
    shapes: Callable         # (cfg, *our shapes) -> HF shapes, in `theirs` order


class Squeeze(NamedTuple):
    ours: str            # glassformer name of a (N,) vector
    theirs: str          # HF key of the same values as a (1, N) row (BART's final_logits_bias)


# An untied output head: lm_head.weight of a *ForCausalLM / *ForConditionalGeneration file, an
# nn.Linear (V, C) outside the base model (so never prefixed), tied to the embedding when absent.
LM_HEAD = Rename("lm_head", "lm_head.weight", True)


def linear(weight: str, bias: str, theirs: str, *, transpose: bool = True) -> tuple:
    """The rows of one linear layer with a bias: `theirs`.weight and `theirs`.bias
    (transpose=False for GPT-2's Conv1D, which stores (in, out) already)."""
    return (Rename(weight, f"{theirs}.weight", transpose),
            Rename(bias, f"{theirs}.bias", False))


def norm(ours: str, theirs: str, *, bias: bool = True) -> tuple:
    """The rows of one LayerNorm: our `ours`.w / `ours`.b are HF's weight / bias (an RMSNorm,
    bias=False: the weight only)."""
    weight = Rename(f"{ours}.w", f"{theirs}.weight", False)
    return (weight, Rename(f"{ours}.b", f"{theirs}.bias", False)) if bias else (weight,)


def attention(q: str, k: str, v: str, o: str, ours: str = "attn") -> tuple:
    """The rows of the q, k, v and output projections of one attention block, weights and
    biases (nn.Linear), from the four HF module names."""
    return sum((linear(f"{ours}.w{part}", f"{ours}.b{part}", theirs)
                for part, theirs in zip("qkvo", (q, k, v, o))), ())


class FamilyNames(NamedTuple):
    """A family's rename table (io/hf_names.py applies it)."""
    prefix: str               # the base model's key prefix in task-model files
    outside: tuple            # key starts of task heads, which never carry the prefix
    top: tuple                # Rename rows outside the layers
    layer: tuple              # Rename / Split / Stack rows of layer {i}
    tied: dict                # HF key -> HF key it must equal when the head is tied
    ignored: tuple            # regexes of HF keys that are skipped on load
    layer_ours: str = "blocks.{i}."       # our prefix of the `layer` rows
    dec_layer: tuple = ()                 # an encoder-decoder's decoder layer rows
    dec_layer_ours: str = "dec.blocks.{i}."


class ModelType(NamedTuple):
    """One config.json model_type: what io/hf_config.py checks and calls."""
    name: str                 # config.json's model_type ("qwen2")
    arch: str                 # the glassformer family it loads as ("llama")
    hf_class: str             # the transformers class of its folders ("Qwen2ForCausalLM")
    reads: frozenset          # keys from_hf reads, or may ignore (the family file says why)
    required: dict            # switch key -> the values glassformer implements
    from_hf: Callable         # (config.json dict, **HFFamily.from_tensors) -> config
    layer_types: tuple = ()   # layer_types it reads beyond io/hf_config.py's LAYER_TYPES
                              # (a hybrid's "linear_attention")


def save_tokenizer_files(tokenizer, folder, cfg) -> None:
    """The default HFFamily.save_tokenizer: the tokenizer's own files."""
    tokenizer.save(folder)


class HFFamily(NamedTuple):
    """Everything io/ knows about one glassformer arch in Hugging Face form."""
    arch: str                 # glassformer's arch name ("llama")
    model_types: tuple        # the ModelTypes that load as this arch
    to_hf: Callable           # config -> config.json of the model_type that computes the same
    names: FamilyNames        # the tensor rename table
    # The folder's layout, where families differ:
    bare_unless: str | None = None   # config field whose False means a bare-model file, keys
                                     # without the prefix (BERT's mlm_head: BertModel)
    from_tensors: dict = {}   # config field -> HF key start whose presence sets it (BERT's
                              # mlm_head: "cls.predictions."); passed to from_hf
    hf_always: dict = {}      # config fields HF's class always has: save_pretrained sets them and
                              # writes the params the config lacked as zeros (the same model)
    fixed_positions: tuple = ()   # HF keys of stored sinusoid tables: checked, then dropped
    conv1d: bool = False      # layer weights stored (in, out) (GPT-2's Conv1D): PEFT's
                              # fan_in_fan_out
    save_tokenizer: Callable = save_tokenizer_files   # (tokenizer, folder, cfg)


def file_prefix(family: HFFamily, cfg) -> str:
    """The prefix of base-model keys in the file save_pretrained writes for `cfg`: the task
    model's, or none for a bare-model file (a BertModel without the MLM head)."""
    bare = family.bare_unless is not None and not getattr(cfg, family.bare_unless)
    return "" if bare else family.names.prefix
