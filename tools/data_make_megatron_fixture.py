#!/usr/bin/env python3
"""Writes tiny Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx) for troupe's
reader test, independently of troupe's writer: only `struct`, following the layout
of megatron/core/datasets/indexed_dataset.py (_IndexWriter):

  .idx: b"MMIDIDX\\x00\\x00", <Q version 1, <B dtype code, <Q sequence count,
        <Q document-index count, int32 lengths, int64 byte pointers,
        int64 document indices (0, then the sequence index ending each document)
  .bin: the tokens of every sequence back to back (uint16 = code 8, int32 = code 4)

Usage: tools/data_make_megatron_fixture.py [OUTDIR]   (default test/data/fixtures)
The C++ test (test/data/indexed_dataset_test.cpp) asserts the contents below.
"""
import os
import struct
import sys

HEADER = b"MMIDIDX\x00\x00"
CODES = {"uint16": (8, "<H", 2), "int32": (4, "<i", 4)}

# (dtype, sequences, documents as lists of sequence indices)
FIXTURES = {
    # Four sequences; the second document holds two (Megatron's --split-sentences).
    "megatron_u16": ("uint16", [[1, 2, 3, 256], [10, 11], [12, 13, 14, 256], [42, 256]],
                     [[0], [1, 2], [3]]),
    # Token IDs past uint16 force int32 (vocabularies of 65500 or more).
    "megatron_i32": ("int32", [[70000, 50256], [1, 2, 3, 65535, 100000]], [[0], [1]]),
}


def write(prefix, dtype, sequences, documents):
    code, fmt, size = CODES[dtype]
    with open(prefix + ".bin", "wb") as f:
        for seq in sequences:
            for t in seq:
                f.write(struct.pack(fmt, t))
    pointers, ptr = [], 0
    for seq in sequences:
        pointers.append(ptr)
        ptr += len(seq) * size
    doc_index = [0]
    for doc in documents:
        doc_index.append(doc[-1] + 1)
    with open(prefix + ".idx", "wb") as f:
        f.write(HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sequences)))
        f.write(struct.pack("<Q", len(doc_index)))
        for seq in sequences:
            f.write(struct.pack("<i", len(seq)))
        for p in pointers:
            f.write(struct.pack("<q", p))
        for d in doc_index:
            f.write(struct.pack("<q", d))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "test", "data", "fixtures")
    os.makedirs(out, exist_ok=True)
    for name, (dtype, seqs, docs) in FIXTURES.items():
        write(os.path.join(out, name), dtype, seqs, docs)
        print(f"{name}: {dtype}, {len(seqs)} sequences, {len(docs)} documents")


if __name__ == "__main__":
    main()
