#!/usr/bin/env python3
"""Checks a `supervisor export` directory with Hugging Face transformers.

Loads MODEL_DIR with AutoModelForCausalLM.from_pretrained (GPT2LMHeadModel or
LlamaForCausalLM, as config.json says) and checks that
  1. loading reports no unexpected, mismatched or missing weights,
  2. every tensor of the weight files (model.safetensors, or the shards that
     model.safetensors.index.json names; read with the safetensors library, an
     independent parser) is bitwise equal to the loaded model's parameter, and the
     LM head is tied to the token embedding exactly when config.json ties it,
  3. with --expected FILE (JSON {"tokens": [...], "logits": [[...], ...]} from the
     C++ test's reference forward), the model's logits on those tokens match
     within --atol.

Exit status: 0 all checks pass, 1 a check failed, 77 transformers/torch/safetensors
are not importable (the caller treats that as "skipped", never as a failure).
"""
import argparse
import json
import os
import sys


def stored_tensors(model_dir, load_file):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load_file(single), ["model.safetensors"]
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        out.update(load_file(os.path.join(model_dir, name)))
    return out, files


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--expected", help="JSON with tokens and reference logits")
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()

    try:
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except Exception as e:  # ImportError, or a broken install
        print(f"SKIP: transformers/torch/safetensors not importable ({e})")
        return 77

    hf_logging.set_verbosity_error()
    failures = []
    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    model, info = AutoModelForCausalLM.from_pretrained(args.model_dir, output_loading_info=True)
    model = model.float()
    model.eval()
    print(f"model: {type(model).__name__}")
    for what in ("unexpected_keys", "mismatched_keys", "missing_keys", "error_msgs"):
        items = list(info.get(what, []))
        print(f"load: {what}: {items if items else 'none'}")
        if items:
            failures.append(f"loading reported {what}: {items}")

    stored, files = stored_tensors(args.model_dir, load_file)
    params = dict(model.named_parameters(remove_duplicate=False))
    params.update(dict(model.named_buffers()))
    gpt2 = config.get("model_type") == "gpt2"
    for name, tensor in stored.items():
        key = name
        if gpt2 and not name.startswith("transformer.") and name != "lm_head.weight":
            key = "transformer." + name
        if key not in params:
            failures.append(f"{name}: no such parameter in {type(model).__name__}")
            continue
        loaded = params[key].detach()
        if loaded.shape != tensor.shape or loaded.dtype != tensor.dtype:
            failures.append(f"{name}: loaded {tuple(loaded.shape)} {loaded.dtype}, "
                            f"stored {tuple(tensor.shape)} {tensor.dtype}")
        elif not torch.equal(loaded.view(torch.int32), tensor.view(torch.int32)):
            failures.append(f"{name}: loaded values differ from the stored ones")
    print(f"tensors: {len(stored)} in {len(files)} file(s) compared bitwise with the loaded model")
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    want_tied = bool(config.get("tie_word_embeddings", gpt2))
    if tied != want_tied:
        failures.append(f"LM head tied to the embedding: {tied}, config.json says {want_tied}")

    if args.expected:
        with open(args.expected) as f:
            expected = json.load(f)
        tokens = torch.tensor([expected["tokens"]], dtype=torch.long)
        want = torch.tensor(expected["logits"], dtype=torch.float64)
        with torch.no_grad():
            got = model(tokens).logits[0].to(torch.float64)
        if got.shape != want.shape:
            failures.append(f"logits shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        else:
            diff = (got - want).abs().max().item()
            print(f"logits: {tuple(got.shape)}, max |transformers - reference| = {diff:.3e} "
                  f"(atol {args.atol:g})")
            if not diff <= args.atol:
                failures.append(f"logits differ from the reference by {diff:.3e}")

    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else f"{len(failures)} check(s) failed")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
