#!/usr/bin/env python3
"""Checks `supervisor generate`'s greedy continuation against transformers.

Loads MODEL_DIR with AutoModelForCausalLM (fp32), continues --prompt-ids greedily
(argmax of the last position's logits, the lowest id among equal maxima, as
torch.argmax) for as many tokens as --expected-ids holds, and compares token for token.

Exit status: 0 equal, 1 different, 77 transformers/torch not importable (the caller
treats that as "skipped").
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--expected-ids", required=True)
    args = ap.parse_args()
    try:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except Exception as e:
        print(f"SKIP: transformers/torch not importable ({e})")
        return 77
    hf_logging.set_verbosity_error()
    model = AutoModelForCausalLM.from_pretrained(args.model_dir).float().eval()
    ids = [int(x) for x in args.prompt_ids.split(",")]
    want = [int(x) for x in args.expected_ids.split(",")]
    got = []
    with torch.no_grad():
        for _ in want:
            logits = model(torch.tensor([ids + got])).logits[0, -1]
            got.append(int(torch.argmax(logits)))
    print("transformers:", ",".join(map(str, got)))
    print("troupe:      ", ",".join(map(str, want)))
    if got != want:
        first = next(i for i in range(len(want)) if got[i] != want[i])
        print(f"FAIL: first difference at generated token {first}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
