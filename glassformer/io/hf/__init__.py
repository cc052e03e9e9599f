"""Hugging Face families: one file per glassformer family, holding everything io/ knows about it.

    records.py    the record types: FamilyNames (tensor rename table), ModelType (one per
                  config.json model_type), HFFamily (one per glassformer arch, holding both)
    rope.py       RoPE scaling: rope_parameters / rope_scaling <-> LlamaConfig's rope_* fields
    gpt2.py       GPT-2 (model_type gpt2)
    llama.py      LLaMA (llama, qwen2, mistral)
    bert.py       BERT (bert)
    seq2seq.py    the encoder-decoder (marian, bart, mbart)
    deepseek_v3.py  DeepSeek-V3 (deepseek_v3): multi-head latent attention
    registry.py   the lookups: hf_family(arch), model_type(name)

The generic code that uses them: io/hf_config.py (config.json), io/hf_names.py (tensor names),
io/pretrained.py (folders).
"""
