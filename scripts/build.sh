#!/usr/bin/env bash
# Installs what is missing, then configures and builds troupe into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs="${TROUPE_JOBS:-$(nproc)}"
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j "$jobs"
