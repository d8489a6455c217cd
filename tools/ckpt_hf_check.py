#!/usr/bin/env python3
"""Checks a `supervisor export` directory with Hugging Face transformers.

Loads MODEL_DIR with GPT2LMHeadModel.from_pretrained and checks that
  1. loading reports no unexpected, mismatched or missing weights,
  2. every tensor of model.safetensors (read with the safetensors library, an
     independent parser) is bitwise equal to the loaded model's parameter, and the
     LM head is tied to wte,
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--expected", help="JSON with tokens and reference logits")
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()

    try:
        import torch
        from safetensors.torch import load_file
        from transformers import GPT2LMHeadModel
        from transformers.utils import logging as hf_logging
    except Exception as e:  # ImportError, or a broken install
        print(f"SKIP: transformers/torch/safetensors not importable ({e})")
        return 77

    hf_logging.set_verbosity_error()
    failures = []
    model, info = GPT2LMHeadModel.from_pretrained(args.model_dir, output_loading_info=True)
    model = model.float()
    model.eval()
    for what in ("unexpected_keys", "mismatched_keys", "missing_keys", "error_msgs"):
        items = list(info.get(what, []))
        print(f"load: {what}: {items if items else 'none'}")
        if items:
            failures.append(f"loading reported {what}: {items}")

    stored = load_file(os.path.join(args.model_dir, "model.safetensors"))
    params = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    for name, tensor in stored.items():
        key = name if name.startswith("transformer.") else "transformer." + name
        if key not in params:
            failures.append(f"{name}: no such parameter in GPT2LMHeadModel")
            continue
        loaded = params[key].detach()
        if loaded.shape != tensor.shape or loaded.dtype != tensor.dtype:
            failures.append(f"{name}: loaded {tuple(loaded.shape)} {loaded.dtype}, "
                            f"stored {tuple(tensor.shape)} {tensor.dtype}")
        elif not torch.equal(loaded.view(torch.int32), tensor.view(torch.int32)):
            failures.append(f"{name}: loaded values differ from the stored ones")
    print(f"tensors: {len(stored)} compared bitwise with the loaded model")
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        failures.append("lm_head.weight is not tied to transformer.wte.weight")

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
