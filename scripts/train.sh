#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and trains the
# embedded default config.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec build/apps/supervisor run
