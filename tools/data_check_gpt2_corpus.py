#!/usr/bin/env python3
"""Cross-checks troupe's GPT-2 tokenizer on a whole corpus against Hugging Face
`tokenizers`: reads PREFIX.bin/.idx written by
  supervisor prepare-data --format fortune --tokenizer gpt2 --vocab V --merges M ...
(without --shuffle-seed), re-reads the same fortune files the same way ('%' lines
separate documents; whitespace-only documents skipped), encodes each document with
the reference and compares it, plus EOD, with the stored sequence.

Usage: tools/data_check_gpt2_corpus.py --prefix P --vocab V --merges M FILE...
The same for a Hugging Face tokenizer.json (prepare-data --tokenizer hf
--tokenizer-file F): --tokenizer-json F --eod ID instead of --vocab/--merges, encoding
with Tokenizer.encode(d, add_special_tokens=False).
"""
import argparse
import struct
import sys
from array import array

from tokenizers import ByteLevelBPETokenizer, Tokenizer


def read_dataset(prefix):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    code = idx[17]
    n, _ = struct.unpack_from("<QQ", idx, 18)
    lengths = struct.unpack_from(f"<{n}i", idx, 34)
    pointers = struct.unpack_from(f"<{n}q", idx, 34 + 4 * n)
    tokens = array({8: "H", 4: "i"}[code])
    tokens.frombytes(open(prefix + ".bin", "rb").read())
    size = tokens.itemsize
    return [tokens[p // size: p // size + l].tolist() for p, l in zip(pointers, lengths)]


def fortune_docs(path):
    text = open(path, "rb").read().decode("utf-8", errors="strict")
    docs, cur = [], []
    for line in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
        if line in ("%", "%\r"):
            docs.append("".join(cur))
            cur = []
        else:
            cur.append(line + "\n")
    if cur:
        tail = "".join(cur)
        docs.append(tail if text.endswith("\n") else tail[:-1])
    return [d for d in docs if d.strip(" \t\r\n\f\v")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--vocab")
    ap.add_argument("--merges")
    ap.add_argument("--tokenizer-json")
    ap.add_argument("--eod", type=int, default=50256)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    if a.tokenizer_json:
        hf = Tokenizer.from_file(a.tokenizer_json)
        encode = lambda d: hf.encode(d, add_special_tokens=False).ids  # noqa: E731
    elif a.vocab and a.merges:
        bpe = ByteLevelBPETokenizer(a.vocab, a.merges, add_prefix_space=False)
        encode = lambda d: bpe.encode(d).ids  # noqa: E731
    else:
        sys.exit("give --vocab and --merges, or --tokenizer-json")
    stored = read_dataset(a.prefix)
    docs = [d for f in sorted(a.files) for d in fortune_docs(f)]
    if len(docs) != len(stored):
        sys.exit(f"document count differs: reference {len(docs)}, stored {len(stored)}")
    bad = 0
    for i, (d, s) in enumerate(zip(docs, stored)):
        want = encode(d) + [a.eod]
        if want != s:
            bad += 1
            if bad <= 5:
                print(f"document {i} differs: {d[:60]!r}")
    print(f"{len(docs)} documents, {sum(map(len, stored))} tokens, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
