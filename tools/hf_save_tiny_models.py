#!/usr/bin/env python3
"""Saves two tiny random models with transformers' own save_pretrained, as a user's
downloaded directories would be: OUT/gpt2 (GPT2LMHeadModel, fp32, "transformer."
names, tied head left out) and OUT/llama-bf16 (LlamaForCausalLM, untied, bfloat16,
sharded at 20KB with model.safetensors.index.json, transformers 5's rope_parameters).
OUT/<name>/expected.json holds, per tensor name, the sum of its values in float64
(for the C++ test to check what it read).

Exit status: 0 saved, 77 transformers/torch not importable (the caller skips).
"""
import json
import os
import sys


def main():
    out = sys.argv[1]
    try:
        import torch
        import transformers as t
        from transformers.utils import logging as hf_logging
    except Exception as e:
        print(f"SKIP: transformers/torch not importable ({e})")
        return 77
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    gpt2 = t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=32, vocab_size=257,
                                          bos_token_id=256, eos_token_id=256))
    llama = t.LlamaForCausalLM(t.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=32, vocab_size=257,
                                             tie_word_embeddings=False, rms_norm_eps=1e-5,
                                             rope_theta=50000.0)).to(torch.bfloat16)
    for name, model, shard in (("gpt2", gpt2, "5GB"), ("llama-bf16", llama, "20KB")):
        d = os.path.join(out, name)
        model.save_pretrained(d, max_shard_size=shard)
        sums = {k: float(v.double().sum()) for k, v in model.state_dict().items()}
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(sums, f)
    print("saved", sorted(os.listdir(out)), "with transformers", t.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
