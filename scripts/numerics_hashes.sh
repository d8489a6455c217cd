#!/usr/bin/env bash
# Fingerprints of a model's numerics: short training runs in several layouts (DP x
# PP, TP + SP x PP, TP x DP) and one inspectable update, each reduced to sha256 sums
# of what it computed (final checkpoint shards, per-step loss / grad norm / lr, the
# update's tensors). A refactor that must keep the numerics bit for bit prints the
# same lines before and after:
#   scripts/numerics_hashes.sh build-old > before.txt
#   scripts/numerics_hashes.sh build-new > after.txt && diff before.txt after.txt
# Usage: numerics_hashes.sh BUILD_DIR [WORK_DIR]  (WORK_DIR default: a fresh mktemp -d)
set -euo pipefail
# The hashes are of the AVX2 kernels with OpenBLAS's GEMM, whatever the CPU: troupe may
# otherwise run oneDNN's sgemm (where libdnnl2 is installed) or, on an AVX-512 CPU, its
# own (kernels/cpu/gemm.h), whose sums are ordered differently. (OpenBLAS's own kernel
# choice, e.g. OPENBLAS_CORETYPE, still moves the bits: compare hashes taken under the
# same OpenBLAS core.)
export TROUPE_CPU_ISA=avx2 TROUPE_CPU_GEMM=openblas
build=$(cd "$1" && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
sup="$build/apps/supervisor"
cd "$(dirname "$0")/.."
common=(--quiet --set training.train_samples=96 --set training.eval_interval=3 --set training.eval_samples=16
        --set lr_schedule.warmup_samples=32 --set logging.tensorboard=false)

# name, then --set overrides of the layout
layouts=(
  "dp2-pp2|"
  "tp2sp-pp2|--set parallel.data=1 --set parallel.tensor=2 --set parallel.sequence_parallel=true"
  "tp2-dp2|--set parallel.pipeline=1 --set parallel.tensor=2"
)

for entry in "${layouts[@]}"; do
  name=${entry%%|*}
  # shellcheck disable=SC2206
  extra=(${entry#*|})
  run="$work/$name"
  # A fresh run directory: a reused one would append this run's lines to an earlier
  # run's metrics.jsonl, and the hash would cover both.
  rm -rf "$run"
  "$sup" run "${common[@]}" "${extra[@]}" --set logging.run_dir="$run" >"$work/$name.log" 2>&1 ||
    { echo "$name: run failed (log: $work/$name.log)" >&2; exit 1; }
  # The per-step numbers (times and dates left out).
  python3 - "$run/metrics.jsonl" <<'PY' | sha256sum | sed "s/-\$/$name metrics (step and eval loss, grad_norm, lr)/"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] in ("step", "eval"):
        print({k: r[k] for k in sorted(r) if k in ("type", "step", "loss", "loss_tokens", "grad_norm", "lr", "clipped", "skipped")})
PY
  # Every shard of the newest checkpoint (its manifest names the run and the time).
  ckpt=$(ls -d "$run"/checkpoints/*/ | sort | tail -1)
  find "$ckpt" -type f -name '*.shard' | sort | while read -r f; do
    printf '%s  %s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$name" "${f#"$ckpt"}"
  done
done

out="$work/inspect"
rm -rf "$out"
"$sup" inspect-update --set lr_schedule.warmup_samples=0 --out "$out" >"$work/inspect.log" 2>&1 ||
  { echo "inspect-update failed (log: $work/inspect.log)" >&2; exit 1; }
for f in "$out"/*.safetensors; do
  printf '%s  inspect-update %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$(basename "$f")"
done
python3 - "$out/update.json" <<'PY' | sha256sum | sed 's/-$/inspect-update update.json numbers/'
import json, sys
u = json.load(open(sys.argv[1]))
print({k: u[k] for k in sorted(u) if isinstance(u[k], (int, float, str))})
PY
