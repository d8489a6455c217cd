#!/usr/bin/env python3
"""Reference IDs for troupe's Hugging Face tokenizer.json reader (data/hf_tokenizer.h),
from Hugging Face `tokenizers`. Sets up its own virtual environment
(build/hf-tokenizers-venv, `pip install tokenizers`) when `tokenizers` is not
importable; exits 77 (skipped) with the reason when that fails.

Commands:
  fixtures [--out test/data/fixtures/hf]
      Trains five tiny byte-level BPE tokenizers (a few hundred merges, on docs/*.md of commit CORPUS_COMMIT)
      the way real files are built, one per kind troupe reads:
        gpt2_style   ByteLevel(use_regex) pre-tokenizer, <|endoftext|>, a non-special
                     added token; merges as [a, b] pairs
        llama3_style Split(Llama 3's regex, Isolated) + ByteLevel(use_regex false),
                     ignore_merges, <|begin_of_text|> / <|end_of_text|> and a BOS
                     template post-processor; merges as "a b" strings, as Llama 3's
        qwen2_style  NFC normalizer, Split(Qwen2's regex: single digits) + ByteLevel,
                     <|endoftext|>, <|im_start|>, <|im_end|>, a normalized added token
        smollm_style Digits(individual) + ByteLevel(use_regex), <|endoftext|>
        misc_style   Split(String ", ") + Digits(runs) + ByteLevel(add_prefix_space,
                     no regex), added tokens where one is a prefix of another
      and writes OUT/NAME.tokenizer.json and OUT/expected.json: for each of a few
      hundred strings the IDs of Tokenizer.encode(text, add_special_tokens=False).
  extras [--fixtures test/data/fixtures/hf]
      From the committed fixture files, four more built with tokenizers' own API, for
      what the five do not cover: added tokens with lstrip / rstrip / single_word and
      normalized contents (added_flags, nfc_flags), and post-processors (llama3_seq:
      Llama 3's Sequence of ByteLevel + TemplateProcessing; roberta_post:
      RobertaProcessing; template_multi: a template with a two-ID special token before
      and one after). Writes them and FIXTURES/extras_expected.json: for every file
      (the five and the four) and every string (test_strings() and flag_strings()),
      the IDs of encode(text, add_special_tokens=False) and =True, and
      Tokenizer.decode of the first (skip_special_tokens False and True), each only
      where the plain IDs or the text do not already say it; and the
      decoded text of seeded random ID sequences (bytes split across tokens, invalid
      UTF-8, added and special tokens, IDs past the vocabulary), for these files and
      for test/data/fixtures/gpt2_k8000's vocab.json + merges.txt.
  check [--fixtures DIR]
      Recomputes expected.json's IDs (and extras_expected.json's IDs and decoded texts)
      from the committed files with the installed tokenizers and reports any
      difference (the live cross-check).
  expected --tokenizer FILE --out FILE.expected.json
      The same IDs (with and without special tokens) and decoded texts, for the
      strings of test_strings() and flag_strings(), for a real tokenizer.json (GPT-2's,
      Llama 3's): put both files in a
      folder and point TROUPE_HF_TOKENIZER_FILES at it; test_data checks every
      NAME.tokenizer.json there against NAME.expected.json.
  gpt2-json --vocab encoder.json --merges vocab.bpe --out gpt2.tokenizer.json
      GPT-2's tokenizer.json (as Hugging Face's gpt2 repository has it) from GPT-2's
      own vocab.json and merges.txt (tools/data_gpt2_reference.py says where to get them).
  compare-export DIR
      For each DIR/*/ holding tokenizer.json and troupe_ids.json ({"cases": [{"text",
      "ids"}]}), as test_data's export test writes them: checks that
      tokenizers.Tokenizer.from_file encodes each text to troupe's IDs, and, when
      transformers is importable, that AutoTokenizer.from_pretrained(DIR/x) loads and
      agrees too.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "build", "hf-tokenizers-venv")


def ensure_tokenizers():
    try:
        import tokenizers  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("TROUPE_HF_VENV_ACTIVE"):
        print("SKIP: tokenizers is not importable even in " + VENV, file=sys.stderr)
        sys.exit(77)
    py = os.path.join(VENV, "bin", "python")
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "tokenizers"], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print("SKIP: cannot set up " + VENV + " with tokenizers: " + str(e), file=sys.stderr)
        sys.exit(77)
    env = dict(os.environ, TROUPE_HF_VENV_ACTIVE="1")
    os.execve(py, [py] + sys.argv, env)


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def test_strings():
    """A few hundred strings: the GPT-2 test's, then contractions, Unicode, whitespace
    runs, code, emoji, digit runs, long runs, special tokens inside text, and seeded
    random mixtures of all of them."""
    with open(os.path.join(ROOT, "test", "data", "fixtures", "gpt2_expected.json")) as f:
        texts = [c["text"] for c in json.load(f)["cases"]]
    texts += [
        "I'M YOU'LL SHE'D WE'VE THEY'RE IT'S DON'T", "She'S He'Ll We'Ve", "'S 'T 'RE 'VE 'M 'LL 'D",
        "it\u2019s curly", "rock'n'roll o'clock y'all", "''s '''", "a's b't c're", "x'\u017f long s",
        "caf\u00e9 vs cafe\u0301 (NFC changes the second)", "A\u030angstr\u00f6m \u00c5ngstr\u00f6m",
        "\u1e9b\u0323 and \u1e69", "\ufb01le ligature", "Z\u0324\u0308 combining below and above",
        "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\uff0c\u6807\u70b9\u3002", "\u6f22\u5b57\u3068\u304b\u306a\u3068\u30ab\u30ca",
        "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22", "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
        "\u0939\u093f\u0928\u094d\u0926\u0940 \u0926\u0947\u0935\u0928\u093e\u0917\u0930\u0940", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
        "\U0001F469\u200D\U0001F4BB \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family",
        "\U0001F1E9\U0001F1EA\U0001F1EF\U0001F1F5 flags", "\u2764\ufe0f\U0001F525\U0001F680!!", "\U0001F44B\U0001F3FF\U0001F44B\U0001F3FB",
        "a b", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \tb", "a\t b", "a\n b", "a \nb", "a \n b",
        "\n\n\n", "\r\n\r\n", " \n ", "  \n\n  x", "x \t\n y", "\t\t\tindented", "trailing\t", "trailing \n",
        "\u00a0\u00a0nbsp", "\u3000\u3000ideographic", "\u2028\u2029separators", "\x0b\x0cvt ff", "\x85next line",
        "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
        "3.14159265358979", "1,234,567.89", "0x1F 0b1010 1e-9", "2024-01-31T12:34:56Z",
        "\u0661\u0662\u0663\u0664\u0665 arabic-indic", "\u2460\u2461\u2462 circled", "\uff11\uff12\uff13 fullwidth",
        "\u00bd \u00bc \u2153 fractions", "x\u00b2 + y\u00b3 = z\u2074", "\u2167 \u216b roman",
        "int main() { return 0; }\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
        "def f(x, *args, **kw):\n    \"\"\"Doc.\"\"\"\n    return [y**2 for y in args if y]\n",
        "{\"key\": [1, 2.5, null, true], \"s\": \"a\\\"b\"}", "$ ls -la | grep -v '^d' && echo $?\n",
        "<div class=\"x\">&amp;&lt;</div>", "SELECT * FROM t WHERE a >= 10 -- comment",
        "x=>x*2; a?.b ?? c; i++ --j", "#include <vector>\nstd::vector<int> v{1,2,3};",
        "a" * 300, " " * 200, "!" * 150, "ab" * 200, "\n" * 64, "\t" * 40, "9" * 100,
        "\u4e2d" * 120, "\U0001F600" * 50, "x " * 150, "word" * 80 + " end",
        "<|endoftext|>", "hello<|endoftext|>world", "a <|endoftext|> b", "<|endoftext|><|endoftext|>",
        "<|endoftext|", "<|endoftext|>>", "<<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>x<|end_of_text|>",
        "text <|end_of_text|>\n<|begin_of_text|> more", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "<tool>call</tool>", "xx<tool>yy", "troupe troupes Troupe", "\u00c5 and A\u030a and \u212b",
        "", " ", "  ", "\t", "\r", "'", "''", "<", "<|", "|>",
    ]
    rng = random.Random(23)
    pools = [
        ["Hello", "world", "the", "tokenizer", "BPE", "merge", "caf\u00e9", "na\u00efve", "\u00fcber", "\u041f\u0440\u0438\u0432\u0435\u0442",
         "\u65e5\u672c", "\u4e2d\u6587", "\ud55c\uad6d", "e\u0301", "A\u030a", "\U0001F600", "\U0001F44D\U0001F3FD", "\u2764\ufe0f"],
        [" ", "  ", "   ", "\t", "\n", "\r\n", " \n", "\n\n", "\u00a0", "\u3000"],
        ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'x", "'"],
        ["0", "7", "42", "123", "2024", "31415926", "\u0663", "\u00b2"],
        [".", ",", "!", "?", "...", "--", "(", ")", "{", "}", "[", "]", "<", ">", "=", "==", "->", "::", "#", "@", "$", "%", "&", "*", "/", "\\", "\"", "|"],
        ["<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<tool>", "troupe"],
    ]
    weights = [8, 5, 2, 2, 3, 1]
    for _ in range(160):
        n = rng.randint(1, 24)
        parts = [rng.choice(rng.choices(pools, weights)[0]) for _ in range(n)]
        texts.append("".join(parts))
    seen, out = set(), []
    for t in texts:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


# The training text is docs/*.md as of this commit, so that rerunning `fixtures` after
# the docs change rebuilds the same files.
CORPUS_COMMIT = "56e2a52"


def training_text():
    names = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", CORPUS_COMMIT, "docs/"],
                           check=True, capture_output=True, text=True).stdout.split()
    lines = []
    for name in sorted(n for n in names if n.endswith(".md")):
        lines += subprocess.run(["git", "-C", ROOT, "show", CORPUS_COMMIT + ":" + name],
                                check=True, capture_output=True, text=True).stdout.splitlines()
    return lines + test_strings()


def build_fixtures(out_dir):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    corpus = training_text()

    def train(model, specials, vocab_size):
        tok = Tokenizer(model)
        return tok, trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                        initial_alphabet=alphabet, show_progress=False)

    made = {}
    # GPT-2: ByteLevel with GPT-2's regex; <|endoftext|> special; a plain added token.
    tok, tr = train(models.BPE(), ["<|endoftext|>"], 800)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, tr)
    tok.add_tokens([AddedToken("troupe", normalized=True, special=False)])
    made["gpt2_style"] = json.loads(tok.to_str())

    # Llama 3: Split + ByteLevel(use_regex false), ignore_merges, BOS template.
    tok, tr = train(models.BPE(ignore_merges=True), ["<|begin_of_text|>", "<|end_of_text|>"], 900)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, tr)
    tok.add_tokens([AddedToken("<tool>", normalized=False, special=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    made["llama3_style"] = j

    # Qwen2: NFC, single-digit regex, chat specials, a normalized added token.
    tok, tr = train(models.BPE(), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 850)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, tr)
    tok.add_tokens([AddedToken("\u00c5", normalized=True, special=False)])
    made["qwen2_style"] = json.loads(tok.to_str())

    # SmolLM: individual digits, then ByteLevel with GPT-2's regex and a prefix space.
    tok, tr = train(models.BPE(), ["<|endoftext|>", "<|im_start|>"], 700)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, tr)
    made["smollm_style"] = json.loads(tok.to_str())

    # The rest of what troupe reads: a String Split, runs of digits, ByteLevel without
    # its regex but with a prefix space, added tokens sharing a prefix (longest wins).
    tok, tr = train(models.BPE(), ["<|endoftext|>", "<|end|>", "<|end|><|end|>"], 600)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(", ", behavior="isolated", invert=False),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, tr)
    made["misc_style"] = json.loads(tok.to_str())

    os.makedirs(out_dir, exist_ok=True)
    texts = test_strings()
    expected = {"generator": "tools/data_hf_tokenizer_reference.py fixtures",
                "tokenizers_version": __import__("tokenizers").__version__,
                "files": {}, "cases": [{"text": t, "ids": {}} for t in texts]}
    for name, j in made.items():
        path = os.path.join(out_dir, name + ".tokenizer.json")
        text = json.dumps(j, ensure_ascii=False, indent=1) + "\n"
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        tok = Tokenizer.from_file(path)  # what is committed is what is checked
        eod = {"gpt2_style": "<|endoftext|>", "llama3_style": "<|end_of_text|>",
               "qwen2_style": "<|endoftext|>", "smollm_style": "<|endoftext|>", "misc_style": "<|endoftext|>"}[name]
        expected["files"][name] = {"vocab_size": tok.get_vocab_size(with_added_tokens=True),
                                   "eod_token": eod, "eod_id": tok.token_to_id(eod),
                                   "merges": len(j["model"]["merges"])}
        for c in expected["cases"]:
            c["ids"][name] = tok.encode(c["text"], add_special_tokens=False).ids
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("wrote %d files and %d cases to %s" % (len(made), len(texts), out_dir))


def flag_strings():
    """Text around the added tokens of the extras: whitespace runs that lstrip and
    rstrip take, word boundaries of single_word (letters, digits, marks, _, ZWJ,
    Other_Alphabetic symbols), normalized and raw contents."""
    return [
        "a <mask> b", "a<mask>b", "  <mask>  ", "\t\n <mask>", "<mask>", " <mask>", "<mask> ", "x [R]   y",
        "[R]\n\nz", "[R]", " [R] ", " <both> ", "\t<both>\t", "a<both>b", "<mask><mask>", " <mask> [R] <mask> ",
        "[R] <mask>", "[R]  <both>  [R]", "\u00a0<mask>\u3000", "\u2028<mask>", "cat", "a cat sat", "concat",
        "cats", "cat_", "_cat", "cat.", "(cat)", "cat cat", "catcat", " cat\n", "dog", " dog ", "hotdog", "dog\u00e9",
        "  dog  dog  ", "dog,dog", "xab", "ab", " ab ", "b", "xb", "abab", "ab b", "caf\u00e9 \u00e9", " \u00e9 ",
        "\u00e9\u00e9", "e\u0301", "_x_", "a_x_b", " _x_ ", "_x__x_", "cat\u200dx", "\u2460cat", "\u24b6cat",
        "\u0663cat", "\u00aacat", "cat\u0301", "cat\u00b2", "1cat", "cat1", "e\u0301x", "\u00e9x", " \u00e9x ",
        "A\u030a!", "\u00c5!", " A\u030a! ", "A\u030a!A\u030a!", "\xff<mask>", "hello <mask> world [R] again",
    ]


def build_extras(fixtures):
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    def load(name):
        return Tokenizer.from_file(os.path.join(fixtures, name + ".tokenizer.json"))

    made = {}
    tok = load("gpt2_style")
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True), AddedToken("[R]", rstrip=True, special=True)])
    tok.add_tokens([AddedToken("<both>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("cat", single_word=True, normalized=True),
                    AddedToken("dog", single_word=True, lstrip=True, rstrip=True, normalized=False),
                    AddedToken("ab", single_word=True), AddedToken("b"),
                    AddedToken("\u00e9", single_word=True), AddedToken("_x_", single_word=True)])
    made["added_flags"] = tok
    tok = load("qwen2_style")  # NFC: a normalized token matches its normalized content
    tok.add_tokens([AddedToken("e\u0301x", normalized=True), AddedToken("A\u030a!", normalized=False, rstrip=True)])
    made["nfc_flags"] = tok
    tok = load("llama3_style")  # Llama 3's own layout of the BOS template
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A:0", pair="<|begin_of_text|> $A:0 <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    made["llama3_seq"] = tok
    tok = load("gpt2_style")
    tok.post_processor = processors.RobertaProcessing(("troupe", tok.token_to_id("troupe")),
                                                      ("<|endoftext|>", tok.token_to_id("<|endoftext|>")))
    made["roberta_post"] = tok
    tok = load("llama3_style")
    eot = tok.token_to_id("<|end_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="[PAIR] $A <|end_of_text|>", pair="[PAIR] $A $B:1",
        special_tokens=[{"id": "[PAIR]", "ids": [bos, tok.token_to_id("x")], "tokens": ["<|begin_of_text|>", "x"]},
                        ("<|end_of_text|>", eot)])
    made["template_multi"] = tok

    for name, tok in made.items():
        tok.save(os.path.join(fixtures, name + ".tokenizer.json"), pretty=False)
    files = {name: Tokenizer.from_file(os.path.join(fixtures, name + ".tokenizer.json"))  # as committed
             for name in ["gpt2_style", "llama3_style", "qwen2_style", "smollm_style", "misc_style"] + list(made)}
    texts = list(dict.fromkeys(test_strings() + flag_strings()))
    out = {"generator": "tools/data_hf_tokenizer_reference.py extras",
           "tokenizers_version": __import__("tokenizers").__version__,
           "files": {name: {"vocab_size": t.get_vocab_size(with_added_tokens=True)} for name, t in files.items()},
           "cases": [], "decode": []}
    # Only what is not implied is stored: IDs of the five for expected.json's texts are there; the
    # special-token IDs where they differ from the plain ones; a decoded text where it
    # is not the text itself, and the skip_special_tokens one where it differs from that.
    in_expected = set(test_strings())
    for text in texts:
        c = {"text": text, "ids": {}, "ids_special": {}, "decoded": {}, "decoded_skip": {}}
        for name, t in files.items():
            ids = t.encode(text, add_special_tokens=False).ids
            if name in made or text not in in_expected:
                c["ids"][name] = ids
            special = t.encode(text, add_special_tokens=True).ids
            if special != ids:
                c["ids_special"][name] = special
            decoded = t.decode(ids, skip_special_tokens=False)
            if decoded != text:
                c["decoded"][name] = decoded
            skipped = t.decode(ids, skip_special_tokens=True)
            if skipped != decoded:
                c["decoded_skip"][name] = skipped
        out["cases"].append(c)
    rng = random.Random(29)
    for name, t in files.items():
        vocab = t.get_vocab_size(with_added_tokens=True)
        added = sorted(t.get_added_tokens_decoder())
        for _ in range(80):
            ids = [rng.choice(added) if rng.random() < 0.1 else rng.randrange(vocab + 3) for _ in range(rng.randint(1, 12))]
            out["decode"].append({"file": name, "ids": ids, "text": t.decode(ids, skip_special_tokens=False),
                                  "text_skip": t.decode(ids, skip_special_tokens=True)})
    # GPT-2's vocab.json + merges.txt (the truncated test files), as transformers reads them.
    k8000 = os.path.join(ROOT, "test", "data", "fixtures", "gpt2_k8000")
    gpt2 = Tokenizer(models.BPE.from_file(os.path.join(k8000, "vocab.json"), os.path.join(k8000, "merges.txt")))
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens([AddedToken("<|endoftext|>", normalized=True, special=True)])
    vocab = gpt2.get_vocab_size(with_added_tokens=True)
    out["gpt2_files_decode"] = []
    for _ in range(100):
        ids = [rng.randrange(vocab + 2) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.3:
            ids.insert(rng.randrange(len(ids) + 1), gpt2.token_to_id("<|endoftext|>"))
        out["gpt2_files_decode"].append({"ids": ids, "text": gpt2.decode(ids, skip_special_tokens=False),
                                         "text_skip": gpt2.decode(ids, skip_special_tokens=True)})
    with open(os.path.join(fixtures, "extras_expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote %d files, %d cases and %d decode cases to %s" % (len(made), len(texts), len(out["decode"]), fixtures))


def check_fixtures(fixtures):
    from tokenizers import Tokenizer
    with open(os.path.join(fixtures, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    bad = 0
    for name in expected["files"]:
        tok = Tokenizer.from_file(os.path.join(fixtures, name + ".tokenizer.json"))
        for c in expected["cases"]:
            got = tok.encode(c["text"], add_special_tokens=False).ids
            if got != c["ids"][name]:
                bad += 1
                print("DIFF %s %r: tokenizers %s, expected.json %s" % (name, c["text"], got, c["ids"][name]))
    n = len(expected["cases"]) * len(expected["files"])
    print("%d passed, %d failed (tokenizers %s vs expected.json from %s)" % (
        n - bad, bad, __import__("tokenizers").__version__, expected["tokenizers_version"]))
    extras_path = os.path.join(fixtures, "extras_expected.json")
    if os.path.exists(extras_path):
        bad += check_extras(fixtures, expected, extras_path)
    return 1 if bad else 0


def check_extras(fixtures, expected, extras_path):
    """extras_expected.json's IDs and decoded texts recomputed (as build_extras stores them)."""
    from tokenizers import Tokenizer
    with open(extras_path, encoding="utf-8") as f:
        extras = json.load(f)
    plain = {c["text"]: c["ids"] for c in expected["cases"]}
    toks = {name: Tokenizer.from_file(os.path.join(fixtures, name + ".tokenizer.json")) for name in extras["files"]}
    bad = n = 0
    for c in extras["cases"]:
        for name, t in toks.items():
            ids = c["ids"][name] if name in c["ids"] else plain[c["text"]][name]
            decoded = c["decoded"].get(name, c["text"])
            want = [ids, c["ids_special"].get(name, ids), decoded, c["decoded_skip"].get(name, decoded)]
            got = [t.encode(c["text"], add_special_tokens=False).ids, t.encode(c["text"], add_special_tokens=True).ids,
                   t.decode(ids, skip_special_tokens=False), t.decode(ids, skip_special_tokens=True)]
            n += 1
            if got != want:
                bad += 1
                print("DIFF %s %r: tokenizers %s, extras_expected.json %s" % (name, c["text"], got, want))
    for d in extras["decode"]:
        t = toks[d["file"]]
        n += 1
        if [t.decode(d["ids"], skip_special_tokens=False), t.decode(d["ids"], skip_special_tokens=True)] != [d["text"], d["text_skip"]]:
            bad += 1
            print("DIFF decode %s %s" % (d["file"], d["ids"]))
    print("extras: %d passed, %d failed (tokenizers %s vs extras_expected.json from %s)" % (
        n - bad, bad, __import__("tokenizers").__version__, extras["tokenizers_version"]))
    return bad


def write_expected(tokenizer, out):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    cases = []
    for t in test_strings() + flag_strings():
        ids = tok.encode(t, add_special_tokens=False).ids
        cases.append({"text": t, "ids": ids, "ids_special": tok.encode(t, add_special_tokens=True).ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False)})
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"tokenizer": os.path.basename(tokenizer), "tokenizers_version": __import__("tokenizers").__version__,
                   "vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": cases}, f, ensure_ascii=False)
    print("wrote %d cases to %s" % (len(cases), out))


def gpt2_json(vocab, merges, out):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken("<|endoftext|>", normalized=True, special=True)])
    tok.save(out)
    print("wrote " + out)


def compare_export(root):
    from tokenizers import Tokenizer
    try:
        from transformers import AutoTokenizer
    except ImportError:
        AutoTokenizer = None
        print("transformers not importable: AutoTokenizer load not checked")
    bad = total = 0
    for d in sorted(glob.glob(os.path.join(root, "*", ""))):
        if not os.path.exists(os.path.join(d, "troupe_ids.json")):
            continue
        with open(os.path.join(d, "troupe_ids.json"), encoding="utf-8") as f:
            cases = json.load(f)["cases"]
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            # AutoTokenizer reads this flag itself; a bare Tokenizer is told.
            tok.encode_special_tokens = bool(json.load(f).get("split_special_tokens", False))
        auto = AutoTokenizer.from_pretrained(d) if AutoTokenizer else None
        for c in cases:
            total += 1
            got = tok.encode(c["text"], add_special_tokens=False).ids
            auto_ids = auto(c["text"], add_special_tokens=False)["input_ids"] if auto else got
            if got != c["ids"] or auto_ids != c["ids"]:
                bad += 1
                print("DIFF %s %r: tokenizers %s, AutoTokenizer %s, troupe %s" % (d, c["text"], got, auto_ids, c["ids"]))
    print("%d passed, %d failed (exported tokenizers in %s)" % (total - bad, bad, root))
    return 1 if bad or total == 0 else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fixtures")
    p.add_argument("--out", default=os.path.join(ROOT, "test", "data", "fixtures", "hf"))
    p = sub.add_parser("extras")
    p.add_argument("--fixtures", default=os.path.join(ROOT, "test", "data", "fixtures", "hf"))
    p = sub.add_parser("check")
    p.add_argument("--fixtures", default=os.path.join(ROOT, "test", "data", "fixtures", "hf"))
    p = sub.add_parser("expected")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("gpt2-json")
    p.add_argument("--vocab", required=True)
    p.add_argument("--merges", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("compare-export")
    p.add_argument("dir")
    a = ap.parse_args()
    ensure_tokenizers()
    if a.cmd == "fixtures":
        build_fixtures(a.out)
    elif a.cmd == "extras":
        build_extras(a.fixtures)
    elif a.cmd == "check":
        sys.exit(check_fixtures(a.fixtures))
    elif a.cmd == "expected":
        write_expected(a.tokenizer, a.out)
    elif a.cmd == "gpt2-json":
        gpt2_json(a.vocab, a.merges, a.out)
    else:
        sys.exit(compare_export(a.dir))


if __name__ == "__main__":
    main()
