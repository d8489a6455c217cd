#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build
ctest --output-on-failure -j "${TROUPE_TEST_JOBS:-1}"
