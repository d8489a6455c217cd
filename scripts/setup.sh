#!/usr/bin/env bash
# Installs what troupe needs from Debian packages, and nothing else.
# Idempotent: when every package is already installed it changes nothing and
# does not touch the network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                      # C++ Actor Framework 0.17
  libboost-dev libboost-program-options-dev
  libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev
  doctest-dev
  libopenblas-dev
  libdnnl2                        # oneDNN: its sgemm, loaded at run time (kernels/cpu/sgemm_dnnl.h)
  libgloo-dev
  nlohmann-json3-dev              # vocab.json, JSON-lines corpora, reports
  libicu-dev                      # Unicode categories for the GPT-2 pre-tokenizer
  libssl-dev                      # HMAC-SHA256 worker authentication (cluster mode)
  zlib1g-dev                      # PNG plots (supervisor compare --plot), .jsonl.gz corpora
  libzstd-dev                     # .jsonl.zst corpora (supervisor prepare-data)
  fortunes fortunes-min           # the embedded default corpus
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
