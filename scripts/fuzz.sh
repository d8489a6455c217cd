#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (AddressSanitizer + UBSan) into build-fuzz/ and
# runs each for SECONDS (default 60) from the corpora in test/fuzz/corpus/<target>/
# (seeded from the embedded default config, a real manifest and a real dataset the
# first time). Not part of the test command: a fuzzing campaign, run by hand.
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
./scripts/setup.sh
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=OFF \
    -DTROUPE_FUZZERS=ON
fi
cmake --build build-fuzz -j "${TROUPE_JOBS:-$(nproc)}" --target config_fuzzer manifest_fuzzer idx_fuzzer join_fuzzer regex_fuzzer
corpus=build-fuzz/corpus
mkdir -p "$corpus/config" "$corpus/manifest" "$corpus/idx" "$corpus/join" "$corpus/regex"
printf 'TRP1\000\023kind=proof\nproof=ab\n' > "$corpus/join/proof"
cp configs/*.textproto "$corpus/config/"
# Seeds: the pre-tokenizer patterns of the test tokenizer.json files, each with a text.
for f in test/data/fixtures/hf/*.tokenizer.json; do
  python3 -c 'import json,sys
p=json.load(open(sys.argv[1]))["pre_tokenizer"]
for s in ([p] if p["type"] != "Sequence" else p["pretokenizers"]):
    if s["type"] == "Split" and "Regex" in s["pattern"]:
        r=s["pattern"]["Regex"].encode()
        sys.stdout.buffer.write(bytes([len(r)]) + r + "Hello, it'\''s 2024!\n\t\u4e2d\u6587  x".encode())' "$f" \
    > "$corpus/regex/$(basename "$f" .tokenizer.json)"
done
# Seeds: manifests of earlier test runs' checkpoints, when there are some.
mapfile -t manifests < <(find /tmp -path '*checkpoints/step_*/manifest.pb' 2>/dev/null | head -n 5)
for m in "${manifests[@]}"; do cp "$m" "$corpus/manifest/$(echo "$m" | md5sum | cut -c1-12)"; done
for t in config manifest idx join regex; do
  echo "== ${t}_fuzzer for ${seconds} s"
  (cd build-fuzz && "./test/fuzz/libfuzzer/${t}_fuzzer" -max_total_time="$seconds" -timeout=10 \
     -rss_limit_mb=2048 "corpus/$t")
done
